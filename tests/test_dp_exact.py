"""The DP agrees with brute force on thousands of tiny random instances."""

import math

import numpy as np
from hypothesis import HealthCheck, given, settings

from randgen import random_instance
from strategies import tiny_instances
from unicron_plan import solve, validate_plan
from unicron_plan.core.problem import build_problem
from unicron_plan.solvers import dp
from unicron_plan import load_instance


def _same(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-6)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tiny_instances())
def test_dp_matches_brute_force(inst):
    plan = solve(inst, solver="dp")
    brute = solve(inst, solver="brute")
    assert _same(plan.objective, brute.objective)
    assert plan.status.solution == "optimal" and plan.bound == plan.objective
    assert validate_plan(inst, plan).valid


def test_dp_matches_brute_force_seeded_larger():
    """Larger seeded instances (up to 5 nodes, 4 jobs, two GPU types)."""
    for seed in range(400):
        inst = random_instance(np.random.default_rng(seed), max_nodes=5, max_jobs=4,
                               gpu_types=1 + seed % 2, mtbf=seed % 3 == 0)
        assert _same(solve(inst).objective, solve(inst, solver="brute").objective), seed


def test_pareto_pruning_keeps_only_improving_counts():
    inst = load_instance({
        "schema_version": "1", "name": "p",
        "cluster": {"gpu_types": {"a": {"peak_tflops": 1, "memory_gib": 1, "intra_node_gbps": 1,
                                        "inter_node_gbps": 1}},
                    "nodes": [{"id": "n0", "gpu_type": "a", "gpus": 8}]},
        "jobs": [{"id": "j", "weight": 1.0,
                  "throughput": {"gpu_type": "a", "tflops": {"2": 10, "3": 10, "4": 8, "6": 20}},
                  "current": {"gpus": 0, "nodes": []}}],
        "cost": {"expected_run_seconds": 1.0, "default_transition_seconds": 0.0}})
    counts, gains = dp.pareto_options(build_problem(inst).jobs[0])
    assert counts.tolist() == [0, 2, 6]
    assert gains.tolist() == [0.0, 10.0, 20.0]


def test_a_failure_never_raises_the_optimum():
    """Removing GPUs (with zero transition cost, so only capacity matters) cannot help."""
    for seed in range(200):
        rng = np.random.default_rng(1000 + seed)
        inst = random_instance(rng, max_nodes=4, max_jobs=3)
        inst.pop("event", None)
        inst["cost"]["default_transition_seconds"] = 0.0
        for j in inst["jobs"]:
            j["transition_seconds"] = 0.0
        before = solve(inst).objective
        inst["event"] = {"kind": "failure", "failed_nodes": [inst["cluster"]["nodes"][0]["id"]],
                         "failed_gpus": []}
        after = solve(inst).objective
        assert after <= before + 1e-6, seed
