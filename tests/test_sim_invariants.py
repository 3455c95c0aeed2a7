"""Invariants after every event of the simulator, on at dense failure rates: no node holds more
GPUs than it has, and no job computes on a node that is down or failed-but-undetected."""

import copy

import numpy as np
import pytest

from simfixtures import ROOT, library, one_job_trace, stressed_128
from unicron_plan.io import parse_model
from unicron_plan.schema.scenario import Scenario
from unicron_plan.simulate.engine import Engine
from unicron_plan.simulate.policies import POLICIES, make_policy
from unicron_plan.simulate.trace import draw_events, planning_mtbf_hours

ROLLOUTS = ("rollout", "rollout-to-end")  # they fork the run at every decision: slow runs only


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
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in ROLLOUTS else n
                                  for n in sorted(POLICIES)])
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


SHIPPED = sorted(p.stem for p in (ROOT / "scenarios").glob("*.json"))


def _dense(stem: str, hours: float, max_nodes: int) -> dict:
    """A shipped scenario at a dense failure rate (one failure every 0.5 h on the cluster), cut to its first
    ``max_nodes`` nodes (on a mixed fleet the first of each GPU type, in equal shares; jobs on the rest
    start queued) and ``hours`` long."""
    sc = copy.deepcopy(library(stem))
    by_type: dict = {}
    for n in sc["cluster"]["nodes"]:
        by_type.setdefault(n["gpu_type"], []).append(n["id"])
    keep = {nid for ids in by_type.values() for nid in ids[:max_nodes // len(by_type)]}
    sc["cluster"]["nodes"] = [n for n in sc["cluster"]["nodes"] if n["id"] in keep]
    for j in sc["jobs"]:
        if not set(j["current"]["nodes"]) <= keep:
            j["current"] = {"gpus": 0, "nodes": []}
    sc["duration_hours"] = hours
    failures = sc.pop("failures", None) or {"repair_hours": {"median": 12.0, "sigma": 1.0},
                                             "severity_mix": {"sev1": 0.4, "sev2": 0.3, "sev3": 0.3}}
    sc.pop("trace", None)  # a trace scenario gets the same drawn failures
    failures.pop("node_mtbf_hours", None)
    failures["failure_every_hours"] = 0.5
    sc["failures"] = failures
    return sc


def _every_seed(stem: str, name: str, seeds: int, hours: float, max_nodes: int) -> None:
    sc = parse_model(Scenario, _dense(stem, hours, max_nodes))
    mtbf = planning_mtbf_hours(sc)
    for seed in range(seeds):
        events = draw_events(sc, np.random.default_rng(seed))
        Engine(sc, events, make_policy(name, sc), mtbf, checks=True).run()


# the reference re-plans uncached and the rollouts fork the run at every decision: slow runs only
FORKING = ("clairvoyant",) + ROLLOUTS


@pytest.mark.long
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in FORKING else n
                                  for n in sorted(POLICIES)])
@pytest.mark.parametrize("stem", SHIPPED)
def test_invariants_every_shipped_scenario_dense_20_seeds(stem, name):
    # Short and small enough for the default suite: 48 h, at most 16 nodes, 20 seeds (3 on a mixed fleet,
    # whose planner re-plans over GPU types; the slow variant runs 20).
    mixed = any("by_type" in j["throughput"] for j in library(stem)["jobs"])
    _every_seed(stem, name, seeds=3 if mixed else 20, hours=48.0, max_nodes=16)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(POLICIES))
@pytest.mark.parametrize("stem", SHIPPED)
def test_invariants_every_shipped_scenario_dense_full(stem, name):
    _every_seed(stem, name, seeds=20, hours=720.0, max_nodes=128)


def test_a_later_reaction_never_cuts_an_earlier_detection():
    # A SEV1 on n0 (detected after the policy's timeout) and, while it hangs, a SEV2 on n1 whose
    # reaction (a restart) ends before n0's failure is detected: the job must stay blocked.
    trace = [{"time_hours": 1.0, "kind": "failure", "node": "n0", "severity": "sev1"},
             {"time_hours": 1.001, "kind": "failure", "node": "n1", "severity": "sev3"}]
    for name in sorted(POLICIES):
        _run(one_job_trace(trace, duration=4.0), name)
