"""What the agent tells the coordinator: each change Slurm shows as one event, anything
else as drift (no Slurm needed)."""

from __future__ import annotations

import copy

from unicron_plan.integrations.agent import AgentConfig, SlurmAgent


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


def _events(coord, slurm):
    agent = SlurmAgent.__new__(SlurmAgent)
    agent.cfg = AgentConfig()
    return agent._events(coord, slurm)


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
