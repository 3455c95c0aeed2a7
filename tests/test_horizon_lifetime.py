"""The "lifetime" horizon (docs/model.md, "The lifetime horizon"): each change valued over the expected
lifetime of the job's new allocation, with the repair under way; exact in the DP."""

import itertools
import math

import numpy as np
import pytest

from randgen import random_instance
from unicron_plan import load_instance, solve, validate_plan
from unicron_plan.core import cost
from unicron_plan.core.cluster import build_state
from unicron_plan.errors import InvalidInstanceError
from unicron_plan.faults import faultdata


def _same(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-6)


def _lifetime_instance(seed: int) -> dict:
    """A random instance under "lifetime" whose event is its failure (with repair estimates on some of
    its nodes, a cost default on some seeds), a repair of its failed GPUs, or none."""
    rng = np.random.default_rng(10_000 + seed)
    inst = random_instance(rng, max_nodes=5, max_jobs=4, gpu_types=1 + seed % 2, mtbf=True)
    inst["cost"]["horizon"] = "lifetime"
    which = seed % 4
    event = inst.get("event")
    if which in (0, 1) and event is not None:
        lost = list(event["failed_nodes"]) + [fg["node"] for fg in event["failed_gpus"]]
        given = {n: float(rng.choice([60.0, 900.0, 3600.0, 43_200.0])) for n in lost if rng.random() < 0.6}
        if given:
            event["expected_repair_seconds"] = given
        if which == 1:
            inst["cost"]["expected_repair_seconds"] = float(rng.choice([300.0, 7200.0]))
    elif which == 2:
        failed = [{"node": n["id"], "gpu": g} for n in inst["cluster"]["nodes"] for g in n["failed_gpus"]]
        if failed:
            inst["event"] = {"kind": "repair", "repaired_gpus": failed}
        else:
            inst.pop("event", None)
    else:
        inst.pop("event", None)
    return inst


def _brute_objective(data: dict) -> float:
    """The best objective by enumeration of every count vector, each term written out from the
    derivation (nothing of core/cost.py but the cluster state: capacity, hit jobs, H, previous nodes)."""
    inst = load_instance(data)
    state = build_state(inst)
    mtbf = data["cost"]["node_mtbf_hours"] * 3600.0
    h = max(state.nodes_in_service(), 1)
    d_run = mtbf / h
    event = data.get("event")
    repair = math.inf
    if event is not None and event["kind"] == "failure":
        default = data["cost"].get("expected_repair_seconds", faultdata.REPAIR_MEAN_SECONDS)
        lost = list(event["failed_nodes"]) + [fg["node"] for fg in event["failed_gpus"]]
        given = event.get("expected_repair_seconds", {})
        repair = min((given.get(n, default) for n in lost), default=default)
    default_d = data["cost"].get("default_transition_seconds") or 0.0
    options, terms = [], []
    for job in data["jobs"]:
        table = {int(k): v * job["weight"] for k, v in job["throughput"]["tflops"].items()}
        x = job["current"]["gpus"]
        held = max(sum(1 for g in state.previous.get(job["id"], {}).values() if g > 0), 1)
        lam = held / mtbf
        if math.isinf(repair):
            life, q = 1 / lam, 0.0
        else:
            life, q = -math.expm1(-lam * repair) / lam, math.exp(-lam * repair)
        d = job.get("transition_seconds", default_d) * d_run / life
        f_x = table.get(x, 0.0)
        hit = state.hit[job["id"]]

        def g(y, table=table, x=x, f_x=f_x, hit=hit, d=d, q=q):
            f_y = table.get(y, 0.0)
            changed = y != x or hit
            return f_y * d_run - changed * f_x * d - (changed and y != x) * f_x * d * q
        options.append([0] + sorted(table))
        terms.append(g)
    cap = state.capacity()
    types = [job["throughput"]["gpu_type"] for job in data["jobs"]]
    best = -math.inf
    for ys in itertools.product(*options):
        used = {}
        for t, y in zip(types, ys):
            used[t] = used.get(t, 0) + y
        if all(used[t] <= cap.get(t, 0) for t in used):
            best = max(best, sum(g(y) for g, y in zip(terms, ys)))
    return best


def test_lifetime_dp_matches_an_independent_brute_force_and_validates():
    kinds, differ = set(), 0
    for seed in range(200):
        data = _lifetime_instance(seed)
        inst = load_instance(data)
        kinds.add(None if inst.event is None else inst.event.kind)
        plan = solve(inst)
        assert _same(plan.objective, _brute_objective(data)), seed
        assert _same(plan.objective, solve(inst, solver="brute").objective), seed
        assert plan.status.solution == "optimal" and plan.bound == plan.objective
        report = validate_plan(inst, plan)
        assert report.valid, (seed, report.problems)
        data["cost"]["horizon"] = "job"
        differ += not _same(plan.objective, solve(load_instance(data)).objective)
    assert kinds == {None, "failure", "repair"}
    assert differ > 0  # it is not the job horizon under another name


def test_without_a_repair_to_wait_for_lifetime_is_the_job_horizon():
    for seed in range(2, 120, 4):  # repairs (or no event): nothing given now is taken back by a return
        data = _lifetime_instance(seed)
        a = solve(load_instance(data))
        data["cost"]["horizon"] = "job"
        b = solve(load_instance(data))
        assert _same(a.objective, b.objective) and [j.gpus for j in a.jobs] == [j.gpus for j in b.jobs]


def test_lifetime_terms_limits():
    # R infinite: the job horizon (scale nodes / H, nothing charged again)
    assert cost.lifetime_terms(1000.0, 4, 100, math.inf) == pytest.approx((0.04, 0.0))
    # R -> 0: L -> R and q -> 1: the change lives R seconds and is charged twice
    scale, repeat = cost.lifetime_terms(1000.0, 4, 100, 1e-3)
    assert scale == pytest.approx(1000.0 * 3600 / 100 / 1e-3, rel=1e-3) and repeat == pytest.approx(scale, rel=1e-3)
    # long R: close to the job horizon
    scale, repeat = cost.lifetime_terms(1000.0, 4, 100, 1e9)
    assert scale == pytest.approx(0.04) and repeat == pytest.approx(0.0, abs=1e-9)


def _sixty_four(repair_seconds: float) -> dict:
    """A job that runs only on 64 GPUs loses a node of its 8; a second job holds the 8 GPUs it would
    need and has a flat curve (56 or 64 GPUs earn nearly the same)."""
    nodes = [{"id": f"n{k}", "gpu_type": "a", "gpus": 8} for k in range(16)]
    return {
        "schema_version": "1", "name": "sixty-four",
        "cluster": {"gpu_types": {"a": {"peak_tflops": 1, "memory_gib": 1, "intra_node_gbps": 1,
                                        "inter_node_gbps": 1}}, "nodes": nodes},
        "jobs": [{"id": "only64", "weight": 1.0, "throughput": {"gpu_type": "a", "tflops": {"64": 6400.0}},
                  "current": {"gpus": 64, "nodes": [f"n{k}" for k in range(8)]}, "transition_seconds": 600.0},
                 {"id": "flat", "weight": 1.0, "throughput": {"gpu_type": "a", "tflops": {"56": 5590.0, "64": 5600.0}},
                  "current": {"gpus": 64, "nodes": [f"n{k}" for k in range(8, 16)]}, "transition_seconds": 600.0}],
        "event": {"kind": "failure", "failed_nodes": ["n0"], "expected_repair_seconds": {"n0": repair_seconds}},
        "cost": {"node_mtbf_hours": 2000.0, "horizon": "lifetime"}}


def test_the_repair_under_way_decides_whether_to_take_gpus_from_another_job():
    # 12 h repair: taking 8 GPUs from the flat job keeps 6,400 TFLOP/s running for hours: worth it.
    long = solve(load_instance(_sixty_four(12 * 3600.0)))
    assert {j.id: j.gpus for j in long.jobs} == {"only64": 64, "flat": 56}
    # 5-minute repair: the flat job's change would be undone (and paid again) within minutes: wait.
    short = solve(load_instance(_sixty_four(300.0)))
    assert {j.id: j.gpus for j in short.jobs} == {"only64": 0, "flat": 64}
    for plan, data in ((long, _sixty_four(12 * 3600.0)), (short, _sixty_four(300.0))):
        assert validate_plan(load_instance(data), plan).valid


def test_a_repair_estimate_must_name_a_failed_node():
    data = _sixty_four(300.0)
    data["event"]["expected_repair_seconds"] = {"n5": 300.0}
    with pytest.raises(InvalidInstanceError, match="expected_repair_seconds"):
        load_instance(data)
    data["event"]["expected_repair_seconds"] = {"n0": -1.0}
    with pytest.raises(InvalidInstanceError):
        load_instance(data)


def test_lifetime_needs_node_mtbf():
    data = _sixty_four(300.0)
    data["cost"] = {"expected_run_seconds": 3600.0, "horizon": "lifetime"}
    with pytest.raises(InvalidInstanceError, match="cost"):
        load_instance(data)


def test_ip_backends_solve_the_lifetime_objective_unchanged():
    pytest.importorskip("scipy")
    for seed in range(0, 60, 2):  # failures (with repair estimates) and repairs
        data = _lifetime_instance(seed)
        inst = load_instance(data)
        dp, milp = solve(inst), solve(inst, solver="milp")
        assert _same(dp.objective, milp.objective), seed
        assert validate_plan(inst, milp).valid


def test_a_node_repair_estimate_needs_a_failed_gpu_and_is_read_after_an_arrival():
    data = _sixty_four(300.0)
    spare = {"id": "n16", "gpu_type": "a", "gpus": 8, "expected_repair_seconds": 600.0}
    data["cluster"]["nodes"].append(spare)
    with pytest.raises(InvalidInstanceError, match="expected_repair_seconds"):
        load_instance(data)
    spare["failed_gpus"] = [0]
    data["event"] = {"kind": "job_arrival", "jobs": ["new"]}
    data["jobs"].append({"id": "new", "weight": 1.0, "current": {"gpus": 0, "nodes": []},
                         "throughput": {"gpu_type": "a", "tflops": {"8": 800.0}}, "transition_seconds": 60.0})
    inst = load_instance(data)
    assert cost.pending_repair_seconds(inst) == 600.0
    spare.pop("expected_repair_seconds")
    assert cost.pending_repair_seconds(load_instance(data)) == math.inf
    plan = solve(inst)
    assert validate_plan(inst, plan).valid


def test_a_lifetime_contingency_answer_equals_a_fresh_solve():
    # Precomputed failures charge the change undone at the return (the repeat term) as a fresh solve does.
    from unicron_plan.plan.contingency import build_contingency

    checked = 0
    for seed in range(40):
        rng = np.random.default_rng(20_000 + seed)
        data = random_instance(rng, max_nodes=5, max_jobs=4, gpu_types=1 + seed % 2, mtbf=True)
        data.pop("event", None)
        data["cost"]["horizon"] = "lifetime"
        data["cost"]["expected_repair_seconds"] = float(rng.choice([120.0, 3600.0, 43_200.0]))
        inst = load_instance(data)
        index = build_contingency(inst, racks=False)
        for key, entry in index["failures"].items():
            failed = dict(data, event={"kind": "failure", "failed_nodes": entry["failed_nodes"], "failed_gpus": []})
            fresh = solve(load_instance(failed))
            assert _same(entry["objective"], fresh.objective), (seed, key)
            assert _same(entry["objective"], _brute_objective(failed)), (seed, key)
            checked += 1
    assert checked > 40
