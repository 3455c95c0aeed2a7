"""The planning horizon (docs/model.md, "Planning horizon"): 'cluster' is the paper's objective,
'job' scales each job's transition by the nodes it holds over H; both are exact in the DP."""

import math

import numpy as np
import pytest

from randgen import random_instance
from unicron_plan import load_instance, solve, validate_plan
from unicron_plan.core import cost
from unicron_plan.core.cluster import build_state
from unicron_plan.core.problem import build_problem
from unicron_plan.errors import InvalidInstanceError


def _same(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-6)


def _with_horizon(seed: int, horizon: str | None) -> dict:
    inst = random_instance(np.random.default_rng(seed), max_nodes=5, max_jobs=4, gpu_types=1 + seed % 2, mtbf=True)
    if horizon is not None:
        inst["cost"]["horizon"] = horizon
    return inst


def test_job_horizon_dp_matches_brute_force_and_validates():
    differ = 0
    for seed in range(300):
        inst = load_instance(_with_horizon(seed, "job"))
        plan, brute = solve(inst), solve(inst, solver="brute")
        assert _same(plan.objective, brute.objective), seed
        assert plan.status.solution == "optimal" and plan.bound == plan.objective
        report = validate_plan(inst, plan)
        assert report.valid, (seed, report.problems)
        differ += not _same(plan.objective, solve(load_instance(_with_horizon(seed, None))).objective)
    assert differ > 0  # the horizon changes some optima (it is not a no-op)


def test_cluster_horizon_is_the_default_and_the_papers_objective():
    for seed in range(50):
        a = solve(load_instance(_with_horizon(seed, None)))
        b = solve(load_instance(_with_horizon(seed, "cluster")))
        assert a.objective == b.objective and [j.gpus for j in a.jobs] == [j.gpus for j in b.jobs]


def test_job_horizon_scales_each_penalty_by_nodes_held_over_h():
    for seed in range(60):
        inst = load_instance(_with_horizon(seed, "job"))
        problem = build_problem(inst)
        state = build_state(inst)
        h = state.nodes_in_service()
        for job, terms in zip(inst.jobs, problem.jobs):
            held = sum(1 for g in state.previous.get(job.id, {}).values() if g > 0)
            assert terms.d_trans == pytest.approx(cost.d_trans_seconds(inst, job) * max(held, 1) / max(h, 1))


def test_a_repaired_node_is_given_back_under_the_job_horizon():
    # An 8-node job may grow onto the repaired node (+12.5% throughput) for a 600 s transition.
    # Cluster horizon: 60 h / 65 nodes = 3,323 s, and 0.125 x 3,323 s = 415 s < 600 s: refused.
    # Job horizon: 60 h / 8 nodes = 27,000 s, and 0.125 x 27,000 s = 3,375 s > 600 s: accepted.
    nodes = [{"id": f"n{k}", "gpu_type": "a", "gpus": 8} for k in range(65)]
    nodes[8]["failed_gpus"] = list(range(8))
    inst = {
        "schema_version": "1", "name": "repair",
        "cluster": {"gpu_types": {"a": {"peak_tflops": 1, "memory_gib": 1, "intra_node_gbps": 1,
                                        "inter_node_gbps": 1}}, "nodes": nodes},
        "jobs": [{"id": "j", "weight": 1.0, "throughput": {"gpu_type": "a", "tflops": {"64": 64.0, "72": 72.0}},
                  "current": {"gpus": 64, "nodes": [f"n{k}" for k in range(8)]}}],
        "event": {"kind": "repair", "repaired_nodes": ["n8"]},
        "cost": {"node_mtbf_hours": 60.0, "default_transition_seconds": 600.0}}
    assert solve(load_instance(inst)).jobs[0].gpus == 64  # the paper's horizon keeps the node idle
    inst["cost"]["horizon"] = "job"
    plan = solve(load_instance(inst))
    assert plan.jobs[0].gpus == 72  # its own horizon (60 h / 8 nodes) pays for the transition
    assert validate_plan(load_instance(inst), plan).valid


def test_job_horizon_needs_node_mtbf():
    inst = _with_horizon(0, "job")
    inst["cost"] = {"expected_run_seconds": 3600.0, "horizon": "job"}
    with pytest.raises(InvalidInstanceError, match="cost"):
        load_instance(inst)


def _with_event_kind(seed: int, horizon: str | None) -> dict:
    """A random instance whose event is its failure, a repair of its failed GPUs, or none (by seed)."""
    inst = _with_horizon(seed, horizon)
    which = seed % 3
    if which == 1:
        failed = [{"node": n["id"], "gpu": g} for n in inst["cluster"]["nodes"] for g in n["failed_gpus"]]
        if failed:
            inst["event"] = {"kind": "repair", "repaired_gpus": failed}
        else:
            inst.pop("event", None)
    elif which == 2:
        inst.pop("event", None)
    return inst


def test_event_horizon_dp_matches_brute_force_and_validates():
    kinds = set()
    for seed in range(300):
        inst = load_instance(_with_event_kind(seed, "event"))
        kinds.add(None if inst.event is None else inst.event.kind)
        plan, brute = solve(inst), solve(inst, solver="brute")
        assert _same(plan.objective, brute.objective), seed
        assert plan.status.solution == "optimal" and plan.bound == plan.objective
        report = validate_plan(inst, plan)
        assert report.valid, (seed, report.problems)
    assert kinds == {None, "failure", "repair"}


def test_event_horizon_is_the_cluster_horizon_after_a_failure_and_the_jobs_otherwise():
    seen = {"cluster": 0, "job": 0}
    for seed in range(150):
        data = _with_event_kind(seed, "event")
        inst = load_instance(data)
        same_as = "cluster" if inst.event is not None and inst.event.kind == "failure" else "job"
        seen[same_as] += 1
        other = load_instance(data | {"cost": data["cost"] | {"horizon": same_as}})
        a, b = build_problem(inst), build_problem(other)
        assert [j.d_trans for j in a.jobs] == [j.d_trans for j in b.jobs], seed
        assert _same(solve(inst).objective, solve(other).objective), seed
    assert min(seen.values()) > 20


def test_event_horizon_needs_node_mtbf():
    inst = _with_horizon(0, "event")
    inst["cost"] = {"expected_run_seconds": 3600.0, "horizon": "event"}
    with pytest.raises(InvalidInstanceError, match="cost"):
        load_instance(inst)


@pytest.mark.parametrize("horizon", ["job", "event"])
def test_contingency_plans_equal_the_solve_of_each_failure(horizon):
    # The contingency table is built from the state before any failure; each of its plans must be the
    # optimum of that failure solved directly, whose transitions are charged with the horizon after it.
    from unicron_plan.plan.contingency import build_contingency
    from unicron_plan.schema.instance import Event

    checked = 0
    for seed in range(40):
        data = _with_horizon(seed, horizon)
        data.pop("event", None)
        inst = load_instance(data)
        index = build_contingency(inst)
        for entry in index["failures"].values():
            failed = inst.model_copy(update={"event": Event(kind="failure", failed_nodes=entry["failed_nodes"])})
            assert _same(entry["objective"], solve(failed).objective), (seed, entry["failed_nodes"])
            checked += 1
    assert checked > 40


def test_only_unicron_reads_the_horizon():
    # scenarios/sweeps/horizon.py runs the other policies once per seed for every horizon label
    # (cost.horizon, and the planner's node MTBF of the "-sev1" labels)
    import copy

    from simfixtures import stressed_128
    from unicron_plan.simulate.sweep import run_task

    base = stressed_128(mtbf=300.0, hours=120.0)
    others = ["megatron", "oobleck", "varuna", "bamboo", "greedy", "equal-share"]
    runs = []
    for h, mtbf in (("cluster", None), ("job", None), ("event", None), ("event", 300.0 / 0.3664)):
        sc = copy.deepcopy(base)
        sc.setdefault("cost", {})["horizon"] = h
        if mtbf is not None:
            sc["cost"]["node_mtbf_hours"] = mtbf
        runs.append(run_task(sc, others + ["unicron"], 3))
    assert all({p: r[p] for p in others} == {p: runs[0][p] for p in others} for r in runs)
    assert len({r["unicron"] for r in runs}) > 1  # the horizon does move unicron here


def _sweep_tool():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "scenarios" / "sweeps" / "horizon.py"
    spec = importlib.util.spec_from_file_location("horizon_sweep_tool", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_sweep_tool_sev1_label_gives_the_planner_the_sev1_failures_mtbf():
    tool = _sweep_tool()
    data = {"failures": {"node_mtbf_hours": 1000.0, "severity_mix": {"sev1": 0.25, "sev2": 0.5, "sev3": 0.25}}}
    assert tool.horizon_patch(data, "event") == {"cost.horizon": "event"}
    assert tool.horizon_patch(data, "event-sev1") == {"cost.horizon": "event", "cost.node_mtbf_hours": 4000.0}


def test_sweep_tool_report_puts_the_default_beside_the_papers_horizon(tmp_path, capsys):
    import json
    import types

    tool = _sweep_tool()
    policies = ["unicron", "megatron", "oobleck", "varuna", "bamboo", "greedy", "equal-share"]
    lines = []
    for seed, (event, cluster) in enumerate([(1.01, 0.99), (1.02, 1.0), (1.0, 0.98)]):
        base = {p: 1.0 for p in policies}
        for h, u in (("event", event), ("cluster", cluster)):
            lines.append({"gpus": 128, "node_mtbf_hours": 1000.0, "horizon": h, "replication": seed, "seed": seed,
                          "weighted_tflop": {**base, "unicron": u}})
    path = tmp_path / "runs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    tool.report(types.SimpleNamespace(files=[str(path)], plot=None))
    out = capsys.readouterr().out
    row = next(r for r in out.splitlines() if r.startswith("| 128 | 1000 | 3 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[3].startswith("1.01000 [") and cells[3].endswith("3/3")  # event / greedy: mean, all won
    assert cells[5].startswith("0.99000 [") and cells[5].endswith("1/3")  # cluster / greedy: won on 1 of 3
