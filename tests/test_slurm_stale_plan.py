"""The Slurm export's script: one that fails never leaves a job it held or requeue-held held."""

from __future__ import annotations

import copy

import hostlist

from test_slurm_formats import COST, _real, _run_with_fakes
from unicron_plan import api
from unicron_plan.integrations.common import GpuMap
from unicron_plan.integrations.slurm import export_slurm, import_slurm, render_script

THROUGHPUT = "8:100,16:190,24:280,32:360,40:440,48:520,56:600,64:680"


def _node(name, state="idle", flags=(), partitions=("gpu",), **extra):
    n = copy.deepcopy(_real()[0]["nodes"][0])
    n.update(name=name, state=state, state_flags=list(flags), gres="gpu:h100:8", features="rack1",
             active_features="rack1", reason="", partitions=list(partitions))
    n.update(extra)
    return n


def _job(jid, nodes, state="RUNNING", weight=1, comment=None, **extra):
    j = copy.deepcopy(_real()[1]["jobs"][0])
    count = len(hostlist.expand_hostlist(nodes))
    j.update(job_id=jid, nodes=nodes, job_state=state, state_reason="None", node_count=count, tasks=count,
             tres_per_node="gres:gpu:h100:8", tres_alloc_str=f"cpu={count},node={count},gres/gpu={8 * count}",
             gres_detail=["gpu:h100:8(IDX:0-7)"] * count, partition="gpu", resv_name="",
             comment=comment if comment is not None else f"unicron-plan: weight={weight} throughput={THROUGHPUT}")
    j.update(extra)
    return j


def _docs(nodes, jobs):
    n, j = _real()
    n["nodes"], j["jobs"] = nodes, jobs
    return n, j


def _cluster():
    """n1 failed under job 1 (n1-n3), job 2 on n4-n6, n7 and n8 idle: the plan grows job 1 onto
    n2-n8 and suspends job 2, and drains n1."""
    nodes = [_node("n1", "down")] + [_node(f"n{i}", "mixed") for i in range(2, 7)] + [_node("n7"), _node("n8")]
    jobs = [_job(1, "n[1-3]", weight=2), _job(2, "n[4-6]")]
    return nodes, jobs


def _plan(nodes, jobs):
    plan = api.solve(import_slurm(*_docs(nodes, jobs), cost=COST, gpu_map=GpuMap(), rack_feature="rack"))
    by_id = {pj.id: pj for pj in plan.jobs}
    assert plan.drained_nodes == ["n1"]
    assert by_id["1"].action == "grow" and sorted(p.node for p in by_id["1"].placement) == [f"n{i}" for i in
                                                                                           range(2, 9)]
    assert by_id["2"].action == "suspend"
    return plan


FAIL_AFTER_HOLDS = """#!/usr/bin/env python3
import json, os, sys
tool = os.path.basename(sys.argv[0])
with open(os.environ["ARGV_LOG"], "a") as f:
    f.write(json.dumps([tool] + sys.argv[1:]) + "\\n")
if tool == "squeue":
    job = sys.argv[sys.argv.index("-j") + 1]
    print({"2": "RUNNING n[4-6]", "3": "PENDING "}.get(job, "RUNNING n[1-3]"))
if tool == "scontrol" and sys.argv[1:2] == ["update"] and "JobId=1" in sys.argv:
    sys.exit(1)
"""


def test_a_failed_script_releases_every_job_it_held(tmp_path, monkeypatch):
    """Job 3 pending (the plan keeps it idle: held), job 2 suspended (requeue-held), job 1's
    placement fails: the script releases 3, 2 and 1 before it exits 1."""
    import test_slurm_formats

    nodes, jobs = _cluster()
    plan = _plan(nodes, jobs)
    steps = export_slurm(plan, *reversed(_docs(nodes, jobs)))
    from unicron_plan.integrations.slurm import Step

    steps.insert(1, Step("hold", job=3))
    monkeypatch.setattr(test_slurm_formats, "FAKE", FAIL_AFTER_HOLDS)
    calls = _run_with_fakes(render_script(steps), tmp_path, exit_code=1)
    assert ["scontrol", "hold", "3"] in calls and ["scontrol", "requeuehold", "2"] in calls
    released = {c[2] for c in calls if c[1] == "release"}
    assert {"1", "2", "3"} <= released
    last_hold = max(i for i, c in enumerate(calls) if c[1] in ("hold", "requeuehold"))
    assert calls[-len(released):] == [["scontrol", "release", j] for j in ("3", "1", "2")]
    assert last_hold < len(calls) - len(released)
