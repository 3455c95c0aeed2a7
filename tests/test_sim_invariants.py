"""Invariants after every event of the simulator, on at dense failure rates: no node holds more
GPUs than it has, and no job computes on a node that is down or failed-but-undetected."""

import numpy as np
import pytest

from simfixtures import one_job_trace, stressed_128
from unicron_plan.io import parse_model
from unicron_plan.schema.scenario import Scenario
from unicron_plan.simulate.engine import Engine
from unicron_plan.simulate.policies import POLICIES, make_policy
from unicron_plan.simulate.trace import draw_events, planning_mtbf_hours


def _run(doc, name, seed=0):
    sc = parse_model(Scenario, doc)
    events = draw_events(sc, np.random.default_rng(seed))
    eng = Engine(sc, events, make_policy(name), planning_mtbf_hours(sc), checks=True)
    return eng, eng.run()


# n1 fails and is detected; n0 fails; n1 returns before n0's failure is detected.
REPAIR_WHILE_ANOTHER_FAILURE_IS_UNDETECTED = [
    {"time_hours": 1.0, "kind": "failure", "node": "n1", "severity": "sev1"},
    {"time_hours": 2.0, "kind": "failure", "node": "n0", "severity": "sev1"},
    {"time_hours": 2.05, "kind": "repair", "node": "n1"},
]


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_no_policy_runs_on_an_undetected_failed_node_after_a_repair(name):
    _run(one_job_trace(REPAIR_WHILE_ANOTHER_FAILURE_IS_UNDETECTED, duration=6.0), name)


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("name", sorted(POLICIES))
def test_invariants_hold_at_a_dense_failure_rate(name, seed):
    # 16 nodes with a node MTBF of 100 h over 120 h: about 19 failures a run, with repairs.
    _, result = _run(stressed_128(mtbf=100.0, hours=120.0), name, seed)
    assert result["weighted_tflop"] > 0


def test_the_checks_can_fail():
    eng, _ = _run(one_job_trace([], duration=1.0), "unicron")
    eng.jobs[0].alloc = {"n0": 9}
    with pytest.raises(AssertionError, match="9 GPUs placed on node 'n0' of 8"):
        eng.check_invariants()
    eng.jobs[0].alloc = {"n0": 8}
    eng.jobs[0].blocks = []
    eng.down.add("n0")
    with pytest.raises(AssertionError, match="computes on failed node"):
        eng.check_invariants()
