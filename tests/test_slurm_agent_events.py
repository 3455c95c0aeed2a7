"""What the agent tells the coordinator: each change Slurm shows as one event, anything
else as drift (no Slurm needed)."""

from __future__ import annotations

import copy

from unicron_plan.integrations.agent import events_between


def _inst(failed=(), jobs=None, reserved=None):
    nodes = [{"id": f"n{i}", "gpu_type": "h100", "gpus": 8, "failed_gpus": list((reserved or {}).get(f"n{i}", []))}
             for i in range(1, 5)]
    inst = {"cluster": {"nodes": nodes}, "jobs": jobs if jobs is not None else [
        {"id": "1", "current": {"gpus": 16, "nodes": ["n1", "n2"]}},
        {"id": "2", "current": {"gpus": 8, "nodes": ["n3"]}}]}
    if failed:
        inst["event"] = {"kind": "failure", "failed_nodes": list(failed), "failed_gpus": []}
    return inst


def _applied(inst):
    """The coordinator's view after applying a plan that drained the failed nodes."""
    out = copy.deepcopy(inst)
    for n in out["cluster"]["nodes"]:
        if n["id"] in (out.get("event") or {}).get("failed_nodes", []):
            n["failed_gpus"] = list(range(8))
    out.pop("event", None)
    return out


def _events(coord, slurm, failed=None):
    return events_between(coord, slurm, failed)


def test_in_sync_means_no_event():
    assert _events(_inst(), _inst()) == ([], [])


def test_failure_repair_exit_arrival():
    assert _events(_inst(), _inst(failed=["n4"])) == (
        [{"kind": "failure", "failed_nodes": ["n4"], "failed_gpus": []}], [])
    assert _events(_applied(_inst(failed=["n4"])), _inst()) == ([{"kind": "repair", "repaired_nodes": ["n4"]}], [])
    gone = _inst(jobs=[{"id": "1", "current": {"gpus": 16, "nodes": ["n1", "n2"]}}])
    assert _events(_inst(), gone) == ([{"kind": "job_exit", "jobs": ["2"]}], [])
    new = {"id": "3", "current": {"gpus": 0, "nodes": []}}
    events, drift = _events(_inst(), _inst(jobs=_inst()["jobs"] + [new]))
    assert drift == [] and events[0]["kind"] == "job_arrival" and events[0]["jobs"] == ["3"]
    assert events[0]["_jobs"] == [new]


def test_what_slurm_did_by_itself_is_drift():
    moved = _inst(jobs=[{"id": "1", "current": {"gpus": 0, "nodes": []}},   # Slurm requeued it
                        {"id": "2", "current": {"gpus": 8, "nodes": ["n3"]}}])
    events, drift = _events(_inst(), moved)
    assert events == [] and drift and "job 1" in drift[0]
    events, drift = _events(_inst(), _inst(reserved={"n4": [0, 1]}))     # an unplanned job started
    assert events == [] and "n4" in drift[0]
    running = _inst(jobs=_inst()["jobs"] + [{"id": "3", "current": {"gpus": 8, "nodes": ["n4"]}}])
    assert "job 3" in _events(_inst(), running)[1][0]


def test_node_order_is_not_drift():
    """The coordinator lists a job's nodes as the plan placed them (n9, n10), the import sorts
    them as strings (n10, n9): the same set is no drift; another set is."""
    coord = _inst(jobs=[{"id": "1", "current": {"gpus": 16, "nodes": ["n3", "n4"]}}])
    slurm = _inst(jobs=[{"id": "1", "current": {"gpus": 16, "nodes": ["n4", "n3"]}}])
    assert _events(coord, slurm) == ([], [])
    other = _inst(jobs=[{"id": "1", "current": {"gpus": 16, "nodes": ["n2", "n3"]}}])
    assert "job 1" in _events(coord, other)[1][0]


def test_a_node_held_whole_by_unmanaged_work_is_not_failed():
    """An unplanned job takes all of a healthy node's GPUs: drift (the cluster is uploaded),
    never a failure; when it leaves, the node is simply free again."""
    whole = _inst(reserved={"n4": list(range(8))})
    events, drift = _events(_inst(), whole)
    assert events == [] and drift == ["node n4: GPUs held outside the plan changed"]
    assert _events(whole, whole) == ([], [])                     # uploaded: in sync, no failure
    events, drift = _events(whole, _inst())
    assert drift == [] and events == [{"kind": "repair", "repaired_nodes": ["n4"]}]


def test_only_slurms_verdict_fails_a_node_held_whole():
    """A node Slurm calls DOWN fails even where the coordinator knew it busy; a node the
    coordinator has failed and Slurm still calls out of service stays failed (no event)."""
    failed = _applied(_inst(failed=["n4"]))
    assert _events(failed, _inst(failed=["n4"])) == ([], [])
    assert _events(_inst(), _inst(failed=["n3"]))[0] == [
        {"kind": "failure", "failed_nodes": ["n3"], "failed_gpus": []}]


def test_a_node_other_work_leaves_is_no_repair():
    """With the coordinator's failed nodes known, a node held whole by other work that is free
    again is drift (an upload), and only a node that had failed is repaired."""
    whole = _inst(reserved={"n4": list(range(8))})
    events, drift = _events(whole, _inst(), failed=set())
    assert events == [] and drift == ["nodes ['n4']: GPUs held outside the plan are free again"]
    assert _events(whole, _inst(), failed={"n4"}) == ([{"kind": "repair", "repaired_nodes": ["n4"]}], [])
