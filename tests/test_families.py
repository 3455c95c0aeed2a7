"""Scenario families (unicron_plan/tools/families.py) and the simulator's lifetime and clairvoyant planners."""

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from unicron_plan.cli import app
from unicron_plan.io import dumps
from unicron_plan.simulate.engine import Engine
from unicron_plan.simulate.policies import make_policy, mean_repair_seconds
from unicron_plan.simulate.run import load_scenario, simulate
from unicron_plan.simulate.trace import draw_events, planning_mtbf_hours
from unicron_plan.tools.families import FAMILIES, family_scenario


@pytest.mark.parametrize("family", FAMILIES)
def test_a_family_scenario_is_seeded_valid_and_within_its_ranges(family):
    a = family_scenario(family, 3, 1024)
    assert dumps(a) == dumps(family_scenario(family, 3, 1024))
    assert dumps(a) != dumps(family_scenario(family, 4, 1024))
    load_scenario(a)
    f = a["failures"]
    assert 1000.0 <= f["node_mtbf_hours"] <= 6332.5
    assert f.get("weibull_shape") in (None, 0.7, 1.5)
    medians = [f["repair_hours"]["median"]] if "repair_hours" in f else \
        [f["repair"]["automatic_hours"]["median"], f["repair"]["manual_hours"]["median"]]
    assert all(5 / 60 - 1e-3 <= m <= 24.0 for m in medians)
    held = sum(j["current"]["gpus"] for j in a["jobs"])
    assert 0 < held <= 1024
    for job in a["jobs"]:
        assert 60.0 <= job["transition_seconds"] <= 1000.0 and job["weight"] in (1.0, 1.5, 2.0)
        counts = job["throughput"]["compact"]["counts"]
        assert counts == sorted(counts) and len(counts) <= 64
        if family == "min-counts":
            assert all(c % counts[0] == 0 for c in counts) and counts[0] >= 32


def test_families_draw_every_kind_of_failure_and_repair_model():
    seen = set()
    for seed in range(40):
        f = family_scenario("jagged", seed, 1024)["failures"]
        seen.add(("weibull" if "weibull_shape" in f else "exponential", "mix" if "repair" in f else "single"))
    assert seen == {(a, b) for a in ("weibull", "exponential") for b in ("mix", "single")}


def test_cli_generate_family(tmp_path):
    out = tmp_path / "s.json"
    r = CliRunner().invoke(app, ["generate", str(out), "--scenario", "--family", "near-linear", "--gpus", "1024",
                                 "--seed", "2", "-q"])
    assert r.exit_code == 0, r.output
    assert json.loads(out.read_text()) == json.loads(dumps(family_scenario("near-linear", 2, 1024)))
    r = CliRunner().invoke(app, ["generate", str(out), "--family", "near-linear"])
    assert r.exit_code == 2 and "--scenario" in r.output


def test_the_lifetime_planner_expects_the_mean_of_the_repair_model():
    f = load_scenario(family_scenario("jagged", 1, 1024)).failures
    if f.repair_hours is not None:
        expected = f.repair_hours.median * 3600 * np.exp(f.repair_hours.sigma ** 2 / 2)
    else:
        m = f.repair
        expected = sum(share * r.median * 3600 * np.exp(r.sigma ** 2 / 2) for share, r in
                       ((m.automatic_fraction, m.automatic_hours), (1 - m.automatic_fraction, m.manual_hours)))
    assert mean_repair_seconds(f) == pytest.approx(expected)
    # the draws agree with it (lognormal means, 20,000 draws: within 5%)
    rng = np.random.default_rng(0)
    from unicron_plan.simulate.trace import _repair_hours
    drawn = np.mean([_repair_hours(f.repair_hours, f.repair, rng) for _ in range(20_000)]) * 3600
    assert drawn == pytest.approx(expected, rel=0.05)


def test_lifetime_and_clairvoyant_plans_keep_the_engine_invariants():
    data = family_scenario("min-counts", 1, 1024, duration_hours=240.0)
    data["cost"] = {"horizon": "lifetime"}
    scenario = load_scenario(data)
    events = draw_events(scenario, np.random.default_rng(1))
    assert any(e.kind == "repair" for e in events)
    for name in ("unicron", "clairvoyant", "lookahead"):
        result = Engine(scenario, events, make_policy(name, scenario), planning_mtbf_hours(scenario),
                        checks=True).run()
        assert result["weighted_tflop"] > 0


def test_the_clairvoyant_reads_the_runs_future():
    data = family_scenario("jagged", 7, 1024, duration_hours=240.0)
    out = simulate(load_scenario(data), ["clairvoyant", "unicron"], 7)
    c, u = (out["policies"][p]["weighted_tflop"] for p in ("clairvoyant", "unicron"))
    assert c > 0 and u > 0
    policy = make_policy("clairvoyant")
    scenario = load_scenario(data)
    events = draw_events(scenario, np.random.default_rng(7))
    eng = Engine(scenario, events, policy, planning_mtbf_hours(scenario))
    node = next(e.node for e in events if e.kind == "repair")
    fail = next(e.time for e in events if e.node == node and e.kind == "failure" and e.severity == "sev1")
    back = next(e.time for e in events if e.node == node and e.kind == "repair" and e.time > fail)
    eng.t = fail
    assert policy._next(eng, node, 1) == pytest.approx(back - fail)
    assert policy._next(eng, node, 0) > 0


def _run(policy, scenario, seed):
    events = draw_events(scenario, np.random.default_rng(seed))
    return Engine(scenario, events, policy, planning_mtbf_hours(scenario), checks=True).run()


def test_the_lookahead_solves_pairs_after_failures_and_is_lifetime_where_it_falls_back():
    data = family_scenario("min-counts", 9, 1024, duration_hours=240.0)
    lifetime = load_scenario(dict(data, cost={"horizon": "lifetime"}))
    scenario = load_scenario(data)
    exact = make_policy("lookahead", scenario)
    a = _run(exact, scenario, 9)
    assert exact.exact > 0 and exact.fallback == 0  # 1,024 GPUs: every failure by the DP over pairs
    small = make_policy("lookahead", scenario)
    small.PAIR_CELL_OPS = 0  # no table small enough: the lifetime objective at every re-plan
    b = _run(small, scenario, 9)
    c = _run(make_policy("unicron", lifetime), lifetime, 9)
    assert small.exact == 0 and small.fallback > 0
    assert b["weighted_tflop"] == c["weighted_tflop"] and b["reconfigurations"] == c["reconfigurations"]
    assert a["weighted_tflop"] != b["weighted_tflop"]  # the pairs change some plan of this run


def test_a_free_setup_starts_at_the_best_rate():
    from unicron_plan.simulate.bound import best_rate_table

    data = family_scenario("min-counts", 10, 1024, duration_hours=1.0)
    scenario = load_scenario(dict(data, cost={"horizon": "cluster"}))
    best, step = best_rate_table(scenario, 1024)
    rates = {}
    for free in (False, True):
        policy = make_policy("unicron", scenario)
        policy.free_setup = free
        eng = Engine(scenario, [], policy, planning_mtbf_hours(scenario))
        policy.setup(eng)
        rates[free] = sum(j.f() for j in eng.jobs)
    assert rates[True] == pytest.approx(best[1024 // step], rel=1e-12)
    assert rates[False] < rates[True]  # charged, the time-0 plan keeps some of the scenario's allocation


def test_the_families_sweep_runs_only_missing_columns_and_reports_the_gap_to_the_bound(tmp_path, capsys):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "scenarios" / "sweeps" / "families.py"
    spec = importlib.util.spec_from_file_location("families_sweep", path)
    sweep = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sweep)
    out = tmp_path / "f.jsonl"
    common = ["run", str(out), "--gpus", "1024", "--seeds", "1", "--families", "jagged", "--duration-hours", "48",
              "--workers", "1"]
    sweep.main(common + ["--columns", "greedy,job,bound"])
    first = json.loads(out.read_text())["weighted_tflop"]
    assert set(first) == {"greedy", "job", "bound"} and first["bound"] >= max(first["greedy"], first["job"])
    sweep.main(common + ["--columns", "greedy,lookahead"])
    lines = out.read_text().splitlines()
    assert len(lines) == 1  # compacted: one line per key
    second = json.loads(lines[0])["weighted_tflop"]
    assert set(second) == {"greedy", "job", "bound", "lookahead"} and second["greedy"] == first["greedy"]
    rows = sweep.summarise(sweep.read_lines([out]))
    job = rows[0]["columns"]["job"]
    assert job["gap_closed"] == pytest.approx((first["job"] - first["greedy"]) / (first["bound"] - first["greedy"]))
    assert "cluster" not in rows[0]["columns"]  # not run: n/a in the table
    assert "n/a" in sweep.table(rows)
    with pytest.raises(SystemExit):
        sweep.main(common + ["--columns", "nonsense"])


@pytest.mark.parametrize("name", ["gpt3-mix-128-a800", "gpt3-mix-128-a800-perf-dense", "gpt3-mix-1024-a800"])
def test_the_shipped_scenarios_start_the_same_with_a_free_or_a_charged_setup(name):
    # what keeps every recorded result of the shipped scenarios when the time-0 plan became free
    from pathlib import Path

    base = load_scenario(Path(__file__).resolve().parent.parent / "scenarios" / f"{name}.json")
    for horizon in ("cluster", "event", "lifetime"):
        scenario = base.model_copy(update={"cost": base.cost.model_copy(update={"horizon": horizon})})
        starts = []
        for free in (False, True):
            policy = make_policy("unicron", scenario)
            policy.free_setup = free
            eng = Engine(scenario, [], policy, planning_mtbf_hours(scenario))
            policy.setup(eng)
            starts.append({j.id: dict(j.alloc) for j in eng.jobs})
        assert starts[0] == starts[1], horizon
