"""`failures.failure_every_hours`: the cluster-wide failure rate knob (dense failure injection)."""

import copy

import numpy as np
import pytest

from simfixtures import library, stressed_128
from unicron_plan.errors import InvalidInstanceError
from unicron_plan.io import parse_model
from unicron_plan.schema.scenario import Scenario
from unicron_plan.simulate import load_scenario, simulate
from unicron_plan.simulate.sweep import patched
from unicron_plan.simulate.trace import draw_events, planning_mtbf_hours


def _scenario(**failures) -> dict:
    sc = copy.deepcopy(library("gpt3-mix-128-a800"))
    sc["failures"].pop("node_mtbf_hours")
    sc["failures"].update(failures)
    sc["cost"].pop("node_mtbf_hours", None)
    return sc


def test_the_realised_cluster_failure_rate_is_the_requested_one():
    # SEV3 only: nodes never leave, so failures are a Poisson process of rate 1 / failure_every_hours.
    sc = _scenario(failure_every_hours=3.0, severity_mix={"sev1": 0.0, "sev2": 0.0, "sev3": 1.0})
    sc["duration_hours"] = 3000.0
    scenario = parse_model(Scenario, sc)
    counts = [len(draw_events(scenario, np.random.default_rng(seed))) for seed in range(3)]
    for n in counts:  # expected 1000, standard deviation about 32
        assert 900 <= n <= 1100, counts
    assert planning_mtbf_hours(scenario) == pytest.approx(3.0 * len(sc["cluster"]["nodes"]))


def test_failure_every_hours_sets_the_rate_in_place_of_node_mtbf_hours():
    nodes = len(library("gpt3-mix-128-a800")["cluster"]["nodes"])
    both = parse_model(Scenario, _scenario(failure_every_hours=5.0, node_mtbf_hours=99999.0))
    node_rate = parse_model(Scenario, _scenario(node_mtbf_hours=5.0 * nodes))
    a = draw_events(both, np.random.default_rng(7))
    b = draw_events(node_rate, np.random.default_rng(7))
    assert a == b and len(a) > 10


def test_a_failure_model_needs_a_rate():
    with pytest.raises(InvalidInstanceError) as exc:
        parse_model(Scenario, _scenario())
    assert "node_mtbf_hours" in str(exc.value)


@pytest.mark.parametrize("value", [0, -3, "3"])
def test_bad_failure_every_hours_is_named(value):
    with pytest.raises(InvalidInstanceError) as exc:
        parse_model(Scenario, _scenario(failure_every_hours=value))
    assert "failure_every_hours" in str(exc.value)


def test_too_dense_a_rate_is_refused_before_drawing():
    sc = _scenario(failure_every_hours=0.001)
    sc["duration_hours"] = 87_600.0
    with pytest.raises(InvalidInstanceError) as exc:
        parse_model(Scenario, sc)
    assert "failure_every_hours" in str(exc.value)


def test_a_sweep_can_vary_the_cluster_failure_rate():
    base = stressed_128(hours=48.0)
    runs = {}
    for every in (100.0, 2.0):
        sc = load_scenario(patched(base, {"failures.failure_every_hours": every}))
        runs[every] = simulate(sc, ["unicron", "megatron"], seed=3)["policies"]
    assert runs[2.0]["unicron"]["failures"] > runs[100.0]["unicron"]["failures"]
    assert runs[2.0]["megatron"]["weighted_tflop"] < runs[100.0]["megatron"]["weighted_tflop"]
