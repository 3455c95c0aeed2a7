"""auto's greedy placement in whole tp groups: whenever it answers, the plan is the exact optimum
(the node-level brute force and milp agree), valid, and every share is a whole number of groups."""

import math

import numpy as np
import pytest

from unicron_plan import api
from unicron_plan.core.problem import build_problem
from unicron_plan.schema import Instance
from unicron_plan.io import parse_model
from unicron_plan.solvers.dp import relaxation
from unicron_plan.solvers.group_place import place_groups

from brute_nodes import node_brute
from randgen import random_instance
from randgen_ip import add_constraints


def _tp_only(seed):
    rng = np.random.default_rng(seed)
    base = random_instance(rng, max_nodes=3, max_jobs=3, gpu_types=int(rng.integers(1, 3)))
    for job in base["jobs"]:
        if rng.random() < 0.9:
            job["tp"] = int(rng.choice([2, 4]))
    inst = add_constraints(rng, base, node_level=False, churn=False, p=0.3)  # drops tps the input breaks
    return parse_model(Instance, inst)


@pytest.mark.parametrize("seed", range(120))
def test_group_placement_is_exact_when_it_answers(seed):
    try:
        inst = _tp_only(seed)
    except Exception:
        pytest.skip("no valid constrained instance for this seed")
    from unicron_plan.errors import InfeasibleError

    try:
        problem = build_problem(inst)
        counts, value = relaxation(problem)
    except InfeasibleError:
        pytest.skip("infeasible constrained instance")
    placement = place_groups(problem, counts)
    if placement is None or not any(j.tp > 1 and counts[j.id] > 0 for j in problem.jobs):
        return  # auto goes on to the exact placement model; or nothing here is about groups
    for j in problem.jobs:
        assert sum(placement[j.id].values()) == counts[j.id]
        assert all(g % max(j.tp, 1) == 0 for g in placement[j.id].values())
    plan = api.solve(inst, solver="auto")
    assert api.validate_plan(inst, plan).valid
    ref = node_brute(inst)
    assert ref is not None
    assert math.isclose(plan.objective, ref[0], rel_tol=1e-9, abs_tol=1e-6), (seed, plan.objective, ref[0])
    assert math.isclose(plan.objective, value, rel_tol=1e-9, abs_tol=1e-6)


def test_whole_pod_cluster_goes_through_groups_fast():
    """Many jobs of tp 4 and 8 on 8-GPU nodes, one node with 6 usable GPUs: tp does not hold by
    itself there, the greedy groups place the DP's counts and the plan is proven optimal."""
    import time

    rng = np.random.default_rng(7)
    nodes = [{"id": f"n{i:03d}", "gpu_type": "a", "gpus": 8, "failed_gpus": [0, 1] if i == 5 else [],
              "rack": f"r{i // 16}"} for i in range(64)]
    jobs, at = [], 0
    for k in range(12):
        tp = 8 if k % 3 else 4
        size = int(rng.integers(2, 6)) * 8
        table = {str(c): float(100 * c * (1 - c / 2000) * (1 + 0.01 * k)) for c in range(tp, 161, tp)}
        take = [nodes[i]["id"] for i in range(at, at + size // 8)] if at + size // 8 <= 64 and at != 5 else []
        current = {"gpus": size, "nodes": take} if take and 5 not in range(at, at + size // 8) else {"gpus": 0, "nodes": []}
        if current["gpus"]:
            at += size // 8
        jobs.append({"id": f"j{k}", "weight": 1.0, "tp": tp, "throughput": {"gpu_type": "a", "tflops": table},
                     "current": current})
    inst = {"schema_version": "1", "name": "pods",
            "cluster": {"gpu_types": {"a": {"peak_tflops": 312.0, "memory_gib": 80.0, "intra_node_gbps": 1600.0,
                                            "inter_node_gbps": 200.0}}, "nodes": nodes},
            "jobs": jobs, "event": {"kind": "failure", "failed_nodes": ["n010"], "failed_gpus": []},
            "cost": {"expected_run_seconds": 36000.0, "default_transition_seconds": 300.0}}
    plan = api.solve(inst, solver="auto")
    assert plan.solver.options["backend"] == "dp+place" and plan.status.solution == "optimal"
    assert plan.objective == pytest.approx(plan.bound)
