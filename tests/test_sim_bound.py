"""The simulator's upper bound (simulate/bound.py): at least every policy's realised weighted TFLOP on
many random small runs, and its rate table equal to enumeration."""

import itertools

import numpy as np
import pytest

from unicron_plan.simulate.bound import best_rate_table, capacity_epochs, upper_bound
from unicron_plan.simulate.policies import POLICIES, make_policy
from unicron_plan.simulate.run import load_scenario, simulate
from unicron_plan.simulate.trace import SimEvent, draw_events
from unicron_plan.tools.families import FAMILIES, family_scenario


def _small(seed: int):
    data = family_scenario(FAMILIES[seed % 3], seed, [64, 128, 256][seed % 3], duration_hours=200.0)
    data["failures"]["node_mtbf_hours"] = [30.0, 100.0, 400.0][seed % 3]  # many failures per run
    return load_scenario(data)


@pytest.mark.long  # (out of the default run for its time: run by `pytest -m long`)
def test_the_bound_is_above_every_policy_on_random_runs():
    # type-bound is for mixed fleets; the rollouts (which fork the run) are checked in test_fork_rollout.py
    policies = [p for p in POLICIES if p not in ("type-bound", "rollout", "rollout-to-end")]
    for seed in range(24):
        sc = _small(seed)
        res = simulate(sc, policies, seed)
        events = draw_events(sc, np.random.default_rng(seed))
        bound = upper_bound(sc, events, max(make_policy(p, sc).healthy_factor() for p in policies))
        assert res["events"] > 0
        for p in policies:
            assert res["policies"][p]["weighted_tflop"] <= bound * (1 + 1e-12), (seed, p)


def test_the_rate_table_equals_enumeration():
    for seed in range(6):
        sc = _small(seed)
        full = sum(n.gpus for n in sc.cluster.nodes)
        best, step = best_rate_table(sc, full)
        options = [[(0, 0.0)] + [(c, j.weight * v) for c, v in j.throughput.table_view().items()] for j in sc.jobs]
        for cap in sorted({full, full - 8, full // 2, 8}):
            want = max(sum(v for _, v in pick) for pick in itertools.product(*options)
                       if sum(c for c, _ in pick) <= cap)
            assert best[cap // step] == pytest.approx(want, rel=1e-12), (seed, cap)


def test_capacity_epochs_follow_failures_and_repairs():
    sc = _small(0)
    n0, n1 = sc.cluster.nodes[0].id, sc.cluster.nodes[1].id
    full = sum(n.gpus for n in sc.cluster.nodes)
    events = [SimEvent(100.0, 0, "failure", n0, "sev1", "x"), SimEvent(150.0, 1, "failure", n1, "sev2", "x"),
              SimEvent(200.0, 2, "failure", n1, "sev1", "x"), SimEvent(300.0, 3, "repair", n0),
              SimEvent(400.0, 4, "repair", n1)]
    epochs = capacity_epochs(sc, events)
    assert epochs[:4] == [(0.0, 100.0, full), (100.0, 200.0, full - 8), (200.0, 300.0, full - 16),
                          (300.0, 400.0, full - 8)]
    assert epochs[4] == (400.0, sc.duration_hours * 3600.0, full)
    with pytest.raises(ValueError, match="out of service"):
        capacity_epochs(sc, events[:1] + [SimEvent(120.0, 9, "failure", n0, "sev1", "x")])
