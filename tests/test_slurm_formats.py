"""Slurm documents of every version the adapter reads, the hostlist reader's bounds, and
exports that no name can turn into a command (the script runs against fake scontrol,
squeue and sinfo that record their arguments)."""

from __future__ import annotations

import copy
import json
import os
import shlex
import stat
import subprocess
from pathlib import Path

import hostlist
import pytest
from hypothesis import given, settings, strategies as st

from unicron_plan.errors import InvalidInstanceError
from unicron_plan.integrations.common import Cost, GpuMap
from unicron_plan.integrations.slurm import (Step, doc_version, expand, export_slurm, import_slurm,
                                             render_script)

HERE = Path(__file__).parent
REAL = HERE / "fixtures" / "slurm-22.05"   # captured from scripts/slurm-testbed (Debian 12, Slurm 22.05.8)
COST = Cost(expected_run_seconds=36000)
COMMENT = "unicron-plan: weight=1 throughput=8:100,16:190,24:280,32:360,40:440,48:520"


def _real() -> tuple[dict, dict]:
    return (json.loads((REAL / "sinfo.json").read_text()), json.loads((REAL / "squeue.json").read_text()))


def _import(nodes, jobs):
    return import_slurm(nodes, jobs, cost=COST, gpu_map=GpuMap(), rack_feature="rack")


def test_real_2205_capture_is_read():
    """sinfo --json / squeue --json of the testbed: n7 is drained (state "mixed",
    state_flags ["DRAIN"]) and holds an unplanned 4-GPU job; job 3 is held by its owner (JobHeldUser),
    so it is left out; requeued held by the planner, it is planned."""
    nodes, jobs = _real()
    assert doc_version(nodes) == doc_version(jobs) == "v0.0.38"
    inst = _import(nodes, jobs)
    assert inst["event"]["failed_nodes"] == ["n7"]
    by_node = {n["id"]: n for n in inst["cluster"]["nodes"]}
    assert by_node["n1"]["rack"] == "rack1"
    n7 = next(n for n in nodes["nodes"] if n["name"] == "n7")
    n7["state_flags"] = []  # in service: the unplanned job's 4 GPUs are withheld from the plan
    assert {n["id"]: n["failed_gpus"] for n in _import(nodes, jobs)["cluster"]["nodes"]}["n7"] == [0, 1, 2, 3]
    by_job = {j["id"]: j for j in inst["jobs"]}
    assert by_job["1"]["current"] == {"gpus": 24, "nodes": ["n1", "n2", "n3"]}
    assert "3" not in by_job
    held = {j["job_id"] for j in jobs["jobs"] if j["job_state"] == "PENDING"}
    assert held == {3}
    next(j for j in jobs["jobs"] if j["job_id"] == 3)["state_description"] = "job requeued in held state"
    assert {j["id"]: j for j in _import(nodes, jobs)["jobs"]}["3"]["current"] == {"gpus": 0, "nodes": []}


def test_2205_without_tres_accounting_counts_gpus_from_gres_detail():
    """Without AccountingStorageTRES=gres/gpu, tres_alloc_str has no gres/gpu: the GPUs come
    from gres_detail (or tres_per_node) and the unplanned job's GPUs stay withheld."""
    nodes, jobs = _real()
    next(n for n in nodes["nodes"] if n["name"] == "n7")["state_flags"] = []
    for j in jobs["jobs"]:
        j["tres_alloc_str"] = ",".join(p for p in j["tres_alloc_str"].split(",") if not p.startswith("gres/"))
    inst = _import(nodes, jobs)
    assert {n["id"]: len(n["failed_gpus"]) for n in inst["cluster"]["nodes"]}["n7"] == 4
    assert {j["id"]: j["current"]["gpus"] for j in inst["jobs"]}["1"] == 24
    for j in jobs["jobs"]:
        j["gres_detail"] = []
    inst = _import(nodes, jobs)  # tres_per_node (gres:gpu:h100:8) times the node count
    assert {j["id"]: j["current"]["gpus"] for j in inst["jobs"]}["2"] == 24
    assert {n["id"]: len(n["failed_gpus"]) for n in inst["cluster"]["nodes"]}["n7"] == 4


@pytest.mark.parametrize("state, flag", [("idle", "DRAIN"), ("down", "NOT_RESPONDING"), ("idle", "FAIL")])
def test_2205_state_flags_fail_a_node(state, flag):
    nodes, jobs = _real()
    n8 = next(n for n in nodes["nodes"] if n["name"] == "n8")
    n8["state"], n8["state_flags"] = state, [flag]
    assert "n8" in _import(nodes, jobs)["event"]["failed_nodes"]


# --- documents written from the Slurm REST/JSON reference (data_parser v0.0.39 .. v0.0.42) -----

def _noval(n):
    return {"set": True, "infinite": False, "number": n}


def _newer(version: str) -> tuple[dict, dict]:
    """The testbed's cluster as ``scontrol show nodes --json`` / ``squeue --json`` of a
    newer Slurm print it: node ``state`` a list of the base state and every flag, ``features``
    a list; v0.0.39 prints ``job_state`` as a string, v0.0.40+ as a list; ``hold`` a boolean;
    numbers such as ``priority`` as ``{"set", "infinite", "number"}``; ``tres_per_node``
    ``gres/gpu:TYPE:N``."""
    release = {"v0.0.39": "23.02.7", "v0.0.40": "23.11.10", "v0.0.41": "24.05.4", "v0.0.42": "24.11.1"}[version]
    major, minor, micro = release.split(".")
    meta = {"plugin": {"type": "", "name": "", "data_parser": f"data_parser/{version}"},
            "slurm": {"version": {"major": major, "minor": minor, "micro": micro}, "release": release}}
    nodes = []
    for i in range(1, 9):
        state = ["MIXED"] if i <= 7 else ["IDLE"]
        if i == 7:
            state = ["MIXED", "DRAIN"]
        nodes.append({"name": f"n{i}", "hostname": "vm", "state": state, "gres": "gpu:h100:8(S:0)",
                      "gres_used": "gpu:h100:8(IDX:0-7)", "features": [f"rack{(i - 1) // 4 + 1}"],
                      "active_features": [f"rack{(i - 1) // 4 + 1}"], "reason": "gpu-xid-79" if i == 7 else "",
                      "tres": "cpu=8,mem=1000M,billing=8,gres/gpu=8", "cpus": 8})
    as_state = (lambda s: s) if version == "v0.0.39" else (lambda s: [s])

    def job(jid, state, hl, per, comment, hold=False):
        n = len(hostlist.expand_hostlist(hl)) if hl else 0
        return {"job_id": jid, "name": "wrap", "job_state": as_state(state), "nodes": hl, "comment": comment,
                "hold": hold, "priority": _noval(0 if hold else 4294901759),
                "state_reason": "JobHeldUser" if hold else "None",
                "tres_alloc_str": f"cpu={n},node={n},billing={n},gres/gpu={per * n}" if n else "",
                "gres_detail": [f"gpu:h100:{per}(IDX:0-{per - 1})"] * n, "tres_per_node": f"gres/gpu:h100:{per}",
                "node_count": _noval(max(n, 1))}

    jobs = [job(1, "RUNNING", "n[1-3]", 8, COMMENT), job(2, "RUNNING", "n[4-6]", 8, COMMENT.replace("=1", "=2", 1)),
            job(3, "PENDING", "", 8, "unicron-plan: weight=1 throughput=8:100,16:190", hold=True),
            job(4, "RUNNING", "n7", 4, "")]
    return {"nodes": nodes, "meta": meta, "errors": []}, {"jobs": jobs, "meta": meta, "errors": []}


@pytest.mark.parametrize("version", ["v0.0.39", "v0.0.40", "v0.0.41", "v0.0.42"])
def test_newer_versions_read_like_the_real_capture(version):
    nodes, jobs = _newer(version)
    assert doc_version(nodes) == version
    assert _import(nodes, jobs) == _import(*_real())


def test_held_job_on_every_version():
    """A job the planner held (requeued held) is not planned onto nodes it does not hold: on 22.05
    the hold is only in state_reason; on v0.0.40+ in ``hold``. The export releases it when the
    plan starts it."""
    from unicron_plan import api

    for nodes, jobs in (_real(), _newer("v0.0.40")):
        for j in jobs["jobs"]:
            if j["job_id"] == 2:   # job 2 ends: its nodes go to the held job 3 and to job 1
                j["job_state"] = "COMPLETED" if isinstance(j["job_state"], str) else ["COMPLETED"]
            if j["job_id"] == 3:
                j["state_description"] = "job requeued in held state"
        plan = api.solve(_import(nodes, jobs))
        steps = export_slurm(plan, jobs, nodes)
        assert any(s.kind == "place" and s.job == 3 for s in steps)
        assert ["scontrol", "release", "3"] in [c for s in steps for c in s.commands()]


# --- hostlists -------------------------------------------------------------------------------

_hostlists = st.lists(st.tuples(st.sampled_from(["n", "gpu", "a-b", "x.y"]), st.integers(0, 300),
                                st.integers(0, 4), st.sampled_from([0, 3])), min_size=1, max_size=6)


@given(_hostlists)
@settings(max_examples=60, deadline=None)
def test_expand_agrees_with_python_hostlist(parts):
    text = ",".join(f"{p}[{str(lo).zfill(w)}-{str(lo + k).zfill(w)}]" for p, lo, k, w in parts)
    assert expand(text, "Job 1", "nodes") == hostlist.expand_hostlist(text, allow_duplicates=True)


def test_hostlist_of_1000_bracket_groups_is_bounded_and_linear():
    """python-hostlist recurses once per bracket group (RecursionError at 1,000); the reader
    is linear, and refuses a product of groups larger than MAX_HOSTS before building it."""
    assert expand("n" + "[1]" * 1000, "Job 1", "nodes") == ["n" + "1" * 1000]
    assert len(expand(",".join(f"n{i}[1-2]" for i in range(1000)), "Job 1", "nodes")) == 2000
    with pytest.raises(InvalidInstanceError, match="more than 100000 hosts"):
        expand("n" + "[1-2]" * 1000, "Job 1", "nodes")
    with pytest.raises(InvalidInstanceError, match="not a hostlist"):
        expand("n[" * 1000, "Job 1", "nodes")
    with pytest.raises(InvalidInstanceError, match="more than 100000 hosts"):
        expand("n[1-999999999999]", "Job 1", "nodes")


# --- names that must never become commands -----------------------------------------------------

HOSTILE = ["gpu0013$(touch PWNED)", "n`touch PWNED`", "-rf", "--all", "n[1-2]", "n*", "n;touch PWNED",
           "n|touch PWNED", "n\ntouch PWNED", "n'x", 'n"x', "n x", ".hidden",
           "n1\n"]  # a trailing newline: a pattern ending in "$" would admit it


@pytest.mark.parametrize("name", HOSTILE)
def test_import_refuses_names_slurm_refuses(name, tmp_path):
    from typer.testing import CliRunner

    from unicron_plan.cli import app

    nodes, jobs = _real()
    nodes["nodes"][7]["name"] = name
    (tmp_path / "n.json").write_text(json.dumps(nodes))
    (tmp_path / "j.json").write_text(json.dumps(jobs))
    r = CliRunner().invoke(app, ["import", "slurm", "--nodes", str(tmp_path / "n.json"), "--jobs",
                                 str(tmp_path / "j.json"), "--expected-run-seconds", "3600"])
    assert r.exit_code == 2, r.output
    assert "is not a Slurm node name" in r.output and "\n" not in r.output.strip()


FAKE = """#!/usr/bin/env python3
import json, os, sys
with open(os.environ["ARGV_LOG"], "a") as f:
    f.write(json.dumps([os.path.basename(sys.argv[0])] + sys.argv[1:]) + "\\n")
race = os.environ.get("FAKE_START_RACE")  # StartTime=now refused; the job then runs (or not: "pending")
if race and os.path.basename(sys.argv[0]) == "scontrol" and "StartTime=now" in sys.argv:
    open(race, "w").close()
    sys.exit(1)
if os.path.basename(sys.argv[0]) == "squeue":
    started = race and os.path.exists(race) and not os.environ.get("FAKE_STILL_PENDING")
    print("RUNNING n1" if started else "PENDING ")  # every job pending, on no node
if os.path.basename(sys.argv[0]) == "sinfo" and "%E" in sys.argv:
    print(os.environ.get("FAKE_REASON", "none"))
"""


def _run_with_fakes(script: str, tmp_path: Path, exit_code: int = 0) -> list[list[str]]:
    """Run the script in a directory full of glob bait, with scontrol/squeue/sinfo replaced by
    programs that record their argument vectors; return the recorded scontrol calls."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool in ("scontrol", "squeue", "sinfo"):
        p = bindir / tool
        p.write_text(FAKE)
        p.chmod(p.stat().st_mode | stat.S_IXUSR)
    work = tmp_path / "work"
    work.mkdir()
    for bait in ("n1", "n2", "n-x", "-rf", "NodeName=n1"):
        (work / bait).write_text("")
    (tmp_path / "apply.sh").write_text(script)
    log = tmp_path / "argv.log"
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "ARGV_LOG": str(log)}
    r = subprocess.run(["sh", str(tmp_path / "apply.sh")], cwd=work, env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == exit_code, r.stderr
    assert not list(tmp_path.rglob("PWNED")) and not (Path.cwd() / "PWNED").exists()
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    return [c for c in calls if c[0] == "scontrol"]


def test_exported_script_passes_every_name_as_one_word(tmp_path):
    """Steps carrying hostile names (as if a check had been bypassed) and a hostile operator
    reason: each reaches scontrol as exactly the argument vector of the step."""
    steps = [Step("drain", node=name, reason=f"{name}; $(touch PWNED) `touch PWNED` *") for name in HOSTILE]
    steps += [Step("hold", job=5), Step("shrink", job=6, nodes=["n1", "n?", "-rf"]), Step("suspend", job=7),
              Step("requeue", job=8, nodes=["n*", "n$(touch PWNED)"]),
              Step("place", job=8, nodes=["n*", "n$(touch PWNED)"]), Step("start", job=8)]
    calls = _run_with_fakes(render_script(steps), tmp_path)
    expected = [argv for s in steps[:len(HOSTILE) + 2] for argv in s.commands()]
    # the fake squeue says every job is pending: the suspension holds job 7, job 8 is not requeued
    expected += [["scontrol", "hold", "7"]] + steps[-2].commands() + steps[-1].commands()
    assert calls == expected
    assert ["scontrol", "update", "JobId=8", "NumNodes=2-2", "ReqNodeList=n$(touch PWNED),n*"] in calls


def test_script_start_refused_because_the_job_started_is_not_a_failure(tmp_path, monkeypatch):
    """Slurm may start a placed job itself between the script's read and its StartTime=now,
    which Slurm then refuses ("no longer pending"): the job runs, the script goes on. Refused
    while the job is still pending, the script fails."""
    steps = [Step("start", job=8), Step("hold", job=9)]
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    monkeypatch.setenv("FAKE_START_RACE", str(tmp_path / "started"))
    calls = _run_with_fakes(render_script(steps), tmp_path / "a")
    assert calls == steps[0].commands()   # job 9 reads as running too: not held
    monkeypatch.setenv("FAKE_START_RACE", str(tmp_path / "started-b"))
    monkeypatch.setenv("FAKE_STILL_PENDING", "1")
    calls = _run_with_fakes(render_script(steps), tmp_path / "b", exit_code=1)
    assert calls == steps[0].commands()


def test_export_of_a_real_plan_quotes_the_operator_reason(tmp_path):
    """The reason comes from the cluster (any text an operator typed); the drain keeps it and
    adds ours, and the shell never reads it."""
    from unicron_plan import api

    nodes, jobs = _real()
    n8 = next(n for n in nodes["nodes"] if n["name"] == "n8")
    n8["state"], n8["state_flags"], n8["reason"] = "down", ["NOT_RESPONDING"], "xid 79 $(touch PWNED) `id` n[1-2]"
    plan = api.solve(_import(nodes, jobs))
    steps = export_slurm(plan, jobs, nodes)
    drains = [s for s in steps if s.kind == "drain"]
    assert [s.node for s in drains] == ["n8"]  # n7 is drained already: left alone
    assert drains[0].reason == "xid 79 $(touch PWNED) `id` n[1-2]; unicron-plan: failed"
    calls = _run_with_fakes(render_script(steps), tmp_path)
    assert calls[0] == ["scontrol", "update", "NodeName=n8", "State=DRAIN",
                        "Reason=xid 79 $(touch PWNED) `id` n[1-2]; unicron-plan: failed"]


def test_plan_with_a_hostile_node_name_is_refused():
    from unicron_plan import api

    nodes, jobs = _real()
    plan = api.solve(_import(nodes, jobs))
    bad = copy.deepcopy(plan)
    bad.drained_nodes = ["n7", "-rf"]
    with pytest.raises(InvalidInstanceError, match="not a Slurm node name"):
        export_slurm(bad, jobs, nodes)


def test_a_plan_that_drains_a_node_it_places_a_job_on_is_refused():
    # Scripts run as root: a plan whose drained_nodes were edited to name healthy nodes the plan itself
    # uses never turns into drains of those nodes.
    from unicron_plan import api

    nodes, jobs = _real()
    plan = api.solve(_import(nodes, jobs))
    used = next(p.node for pj in plan.jobs if pj.gpus for p in pj.placement)
    bad = copy.deepcopy(plan)
    bad.drained_nodes = [*(plan.drained_nodes or []), used]
    with pytest.raises(InvalidInstanceError, match=f"'{used}' is drained, yet the plan places job"):
        export_slurm(bad, jobs, nodes)
    with pytest.raises(InvalidInstanceError, match="drained, yet"):
        export_slurm(bad, jobs)
    assert export_slurm(plan, jobs, nodes)  # the plan as made: its steps


def test_drain_without_nodes_file_reads_the_reason_when_it_runs(tmp_path, monkeypatch):
    """Without the nodes file the script reads the node's reason (sinfo %E) and adds ours: an
    operator's reason, whatever it contains, is kept and never read by the shell."""
    from unicron_plan import api

    nodes, jobs = _real()
    n8 = next(n for n in nodes["nodes"] if n["name"] == "n8")
    n8["state"], n8["state_flags"] = "down", ["NOT_RESPONDING"]
    plan = api.solve(_import(nodes, jobs))
    plan.drained_nodes = ["n8"]  # (n7, drained already, left out: without the nodes file it would be drained again)
    steps = export_slurm(plan, jobs, None)
    monkeypatch.setenv("FAKE_REASON", "xid 79 $(touch PWNED) `id` n[1-2]")
    calls = _run_with_fakes(render_script(steps), tmp_path)
    assert calls[0] == ["scontrol", "update", "NodeName=n8", "State=DRAIN",
                        "Reason=xid 79 $(touch PWNED) `id` n[1-2]; unicron-plan: failed"]


def test_script_quotes_hostlists():
    script = render_script([Step("shrink", job=6, nodes=["n1", "n2"])])
    assert shlex.join(["scontrol", "update", "JobId=6", "NodeList=n[1-2]"]) in script
    assert "'NodeList=n[1-2]'" in script


@pytest.mark.parametrize("which", ["nodes", "jobs"])
def test_a_document_reporting_slurms_errors_is_refused_not_read_as_empty(which):
    # Slurm 22.05 exits 0 with an errors array and no jobs (or nodes) when slurmctld does not answer:
    # import and export refuse it, never an empty cluster
    nodes, jobs = _real()
    doc = nodes if which == "nodes" else jobs
    doc["errors"] = [{"error_number": 1007, "description": "Unable to contact slurm controller (connect failure)"}]
    doc[which] = []
    with pytest.raises(InvalidInstanceError, match=f"{which} errors: Slurm reported 1 error"):
        _import(nodes, jobs)
    if which == "jobs":
        from unicron_plan import api

        good_nodes, good_jobs = _real()
        plan = api.solve(_import(good_nodes, good_jobs))
        with pytest.raises(InvalidInstanceError, match="jobs errors"):
            export_slurm(plan, jobs, good_nodes)
