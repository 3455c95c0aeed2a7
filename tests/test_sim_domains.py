"""Correlated failures (rack and switch domains) and the automatic / manual repair mix."""

import copy

import numpy as np
import pytest

from simfixtures import library
from unicron_plan.errors import InvalidInstanceError
from unicron_plan.io import parse_model
from unicron_plan.schema.scenario import Scenario
from unicron_plan.simulate import load_scenario
from unicron_plan.simulate.engine import Engine
from unicron_plan.simulate.policies import POLICIES, make_policy
from unicron_plan.simulate.trace import domain_units, draw_events, planning_mtbf_hours


def _scenario(racks_of=4, **failures) -> dict:
    sc = copy.deepcopy(library("gpt3-mix-128-a800"))
    for k, n in enumerate(sc["cluster"]["nodes"]):  # 16 nodes in racks of `racks_of`
        n["rack"] = f"r{k // racks_of}"
    sc["failures"].update(failures)
    return sc


def _replay_states(events):
    """Check the drawn events are consistent: a node fails only while up, returns only while down (SEV1)."""
    down = set()
    for e in events:
        assert e.node not in down or e.kind == "repair", e
        if e.kind == "failure" and e.severity == "sev1":
            down.add(e.node)
        elif e.kind == "repair":
            assert e.node in down, e
            down.discard(e.node)


def test_a_rack_failure_takes_all_its_up_nodes_at_once_and_returns_them_together():
    sc = parse_model(Scenario, _scenario(node_mtbf_hours=1e8, domains=[{"kind": "rack", "mtbf_hours": 300.0}]))
    events = draw_events(sc, np.random.default_rng(1))
    racks = {n.id: n.rack for n in sc.cluster.nodes}
    by_time: dict = {}
    for e in events:
        by_time.setdefault((e.time, e.kind), []).append(e.node)
    assert by_time, "expected rack failures over 30 days at a rack MTBF of 300 h"
    for (t, kind), nodes in by_time.items():
        assert len({racks[n] for n in nodes}) == 1 and len(nodes) == 4, (t, kind, nodes)
    _replay_states(events)


def test_switch_units_group_racks_in_order():
    sc = parse_model(Scenario, _scenario(domains=[{"kind": "switch", "mtbf_hours": 500.0, "racks_per_switch": 3}]))
    units = domain_units(sc, "switch", 3)
    assert [len(u) for u in units] == [12, 4]
    assert units[0][:4] == [n.id for n in sc.cluster.nodes[:4]]


def test_node_and_domain_failures_never_overlap_on_a_node():
    sc = parse_model(Scenario, _scenario(node_mtbf_hours=150.0, domains=[
        {"kind": "rack", "mtbf_hours": 200.0}, {"kind": "switch", "mtbf_hours": 400.0, "racks_per_switch": 2,
                                                 "repair_hours": {"median": 2.0, "sigma": 0.5}}]))
    for seed in range(5):
        events = draw_events(sc, np.random.default_rng(seed))
        assert events == draw_events(sc, np.random.default_rng(seed))  # deterministic per seed
        _replay_states(events)


def test_the_repair_mix_shows_in_the_drawn_repair_times():
    mix = {"automatic_fraction": 0.75, "automatic_hours": {"median": 0.5, "sigma": 0.0},
           "manual_hours": {"median": 48.0, "sigma": 0.0}}
    sc = _scenario(node_mtbf_hours=20.0, repair=mix, severity_mix={"sev1": 1.0, "sev2": 0.0, "sev3": 0.0})
    del sc["failures"]["repair_hours"]
    sc["duration_hours"] = 2000.0
    scenario = parse_model(Scenario, sc)
    events = draw_events(scenario, np.random.default_rng(0))
    start = {}
    spans = []
    for e in events:
        if e.kind == "failure":
            start[e.node] = e.time
        else:
            spans.append((e.time - start.pop(e.node)) / 3600.0)
    spans = np.array(spans)
    assert set(np.round(spans, 6)) == {0.5, 48.0}
    assert 0.65 < np.mean(spans == 0.5) < 0.85  # about 3 in 4 automatic


def test_bad_domains_and_repairs_are_named():
    with pytest.raises(InvalidInstanceError) as exc:
        parse_model(Scenario, _scenario(domains=[{"kind": "switch", "mtbf_hours": 10.0}]))
    assert "racks_per_switch" in str(exc.value)
    with pytest.raises(InvalidInstanceError) as exc:
        parse_model(Scenario, _scenario(repair={"automatic_fraction": 0.5, "automatic_hours": {"median": 1, "sigma": 0},
                                                "manual_hours": {"median": 5, "sigma": 0}}))
    assert "repair_hours" in str(exc.value)
    with pytest.raises(InvalidInstanceError) as exc:
        parse_model(Scenario, _scenario(domains=[{"kind": "rack", "mtbf_hours": 1e-6}]))
    assert "domains[0].mtbf_hours" in str(exc.value)


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_invariants_hold_with_rack_failures_at_a_dense_rate(name):
    doc = _scenario(domains=[{"kind": "rack", "mtbf_hours": 150.0}])
    doc["failures"].pop("node_mtbf_hours")
    doc["failures"]["failure_every_hours"] = 3.0
    doc["duration_hours"] = 120.0
    sc = load_scenario(doc)
    eng = Engine(sc, draw_events(sc, np.random.default_rng(5)), make_policy(name, sc),
                 planning_mtbf_hours(sc), checks=True)
    r = eng.run()
    assert r["failures"] > 20 and r["weighted_tflop"] > 0
