"""Property tests: the backends agree where they overlap, and every plan validates.

* separable problem (with the count-level constraints pinned and min_gain_fraction):
  dp == brute == milp == milp-cbc == cpsat == auto;
* with node-level constraints (tp, max_nodes, same_rack) and max_changed_jobs:
  milp == milp-cbc == cpsat == auto == the independent node-level brute force
  (tests/brute_nodes.py), infeasibility included.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from brute_nodes import node_brute
from randgen import random_instance
from randgen_ip import add_constraints, random_ip_instance
from unicron_plan import api
from unicron_plan.errors import InfeasibleError
from unicron_plan.io import parse_model
from unicron_plan.schema import Instance

SEPARABLE = ("dp", "brute", "milp", "milp-cbc", "cpsat", "auto")
NODE_LEVEL = ("milp", "milp-cbc", "cpsat", "auto")
SEEDS = st.integers(min_value=0, max_value=2**32 - 1)
FAST = settings(max_examples=250, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
SLOW = settings(max_examples=2000, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-6)


def _solve_all(inst, solvers):
    """{solver: plan or None (infeasible)}; each plan is re-validated here, not only in api.solve."""
    out = {}
    for name in solvers:
        try:
            plan = api.solve(inst, solver=name)
        except InfeasibleError:
            out[name] = None
            continue
        report = api.validate_plan(inst, plan)
        assert report.valid, (name, report.problems)
        assert plan.status.solution == "optimal" and plan.status.termination == "optimal", (name, plan.status)
        assert plan.bound >= plan.objective or _close(plan.bound, plan.objective)
        out[name] = plan
    return out


def check_separable(seed: int) -> None:
    rng = np.random.default_rng(seed)
    base = random_instance(rng, max_nodes=4, max_jobs=3, gpu_types=int(rng.integers(1, 3)))
    inst = parse_model(Instance, add_constraints(rng, base, node_level=False, churn=False))
    plans = _solve_all(inst, SEPARABLE)
    feasible = {k: v is not None for k, v in plans.items()}
    assert len(set(feasible.values())) == 1, feasible
    if plans["dp"] is None:
        return
    ref = plans["brute"].objective
    for name, plan in plans.items():
        assert _close(plan.objective, ref), (seed, name, plan.objective, ref)


def check_node_level(seed: int) -> None:
    rng = np.random.default_rng(seed)
    inst = parse_model(Instance, random_ip_instance(rng, max_nodes=3, max_jobs=3,
                                                    gpu_types=int(rng.integers(1, 3))))
    plans = _solve_all(inst, NODE_LEVEL)
    ref = node_brute(inst)
    for name, plan in plans.items():
        if ref is None:
            assert plan is None, (seed, name, "brute force says infeasible")
        else:
            assert plan is not None, (seed, name, "solver says infeasible", ref)
            assert _close(plan.objective, ref[0]), (seed, name, plan.objective, ref)


@FAST
@given(SEEDS)
def test_separable_backends_agree(seed):
    check_separable(seed)


@pytest.mark.long  # (out of the default run for its time: run by `pytest -m long`)
@FAST
@given(SEEDS)
def test_node_level_backends_agree_with_brute_force(seed):
    check_node_level(seed)


@pytest.mark.slow
@SLOW
@given(SEEDS)
def test_separable_backends_agree_many(seed):
    check_separable(seed)


@pytest.mark.slow
@SLOW
@given(SEEDS)
def test_node_level_backends_agree_many(seed):
    check_node_level(seed)
