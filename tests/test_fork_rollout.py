"""Forking a run onto sampled futures (unicron_plan/simulate/fork.py), the rollout policy, and the fork
analysis of the families' losing seeds (scenarios/sweeps/forks.py)."""

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from unicron_plan.simulate import fork
from unicron_plan.simulate.engine import Engine
from unicron_plan.simulate.policies import RolloutPolicy, apply_plan, make_policy
from unicron_plan.simulate.run import load_scenario
from unicron_plan.simulate.trace import draw_events, planning_mtbf_hours
from unicron_plan.tools.families import FAMILIES, family_scenario

ROOT = Path(__file__).resolve().parent.parent


def _forks():
    spec = importlib.util.spec_from_file_location("forks_sweep", ROOT / "scenarios" / "sweeps" / "forks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _scenario(family="jagged", seed=7, hours=240.0):
    return load_scenario(family_scenario(family, seed, 1024, duration_hours=hours))


@pytest.mark.parametrize("family,seed", [("jagged", 7), ("min-counts", 1), ("near-linear", 3)])
def test_a_sampled_future_starts_from_each_nodes_state(family, seed):
    sc = _scenario(family, seed)
    events = draw_events(sc, np.random.default_rng(seed))
    t = events[len(events) // 2].time
    past = [e for e in events if e.time <= t]
    fut = fork.future_events(sc, past, t, np.random.default_rng(5))
    assert fut == fork.future_events(sc, past, t, np.random.default_rng(5))  # seeded
    assert fut != fork.future_events(sc, past, t, np.random.default_rng(6))
    assert all(t < e.time < sc.duration_hours * 3600.0 for e in fut)
    assert [e.time for e in fut] == sorted(e.time for e in fut)
    assert min(e.order for e in fut) > max(e.order for e in past)
    down = {n for n, (out, _) in fork.node_states(past, t).items() if out}
    for node in {e.node for e in fut}:  # per node, failures and repairs alternate from its state now
        mine = [e for e in fut if e.node == node]
        out = node in down
        for e in mine:
            assert (e.kind == "repair") == out
            out = e.kind == "failure" and e.severity == "sev1"
    short = fork.future_events(sc, past, t, np.random.default_rng(5), end=t + 3600.0)
    assert all(e.time < t + 3600.0 for e in short)


def test_a_sampled_future_needs_a_failure_model_without_domains():
    sc = _scenario()
    with pytest.raises(ValueError):
        fork.future_events(sc.model_copy(update={"failures": None}), [], 0.0, np.random.default_rng(0))


@pytest.mark.parametrize("horizon", ["lifetime", "cluster"])
def test_a_fork_continued_on_the_actual_future_gives_back_the_run(horizon):
    forks = _forks()
    sc = _scenario("min-counts", 1)
    events = draw_events(sc, np.random.default_rng(1))
    log, total = forks.replan_log(sc, events, horizon)
    assert len(log) > 3
    for k in (1, len(log) // 2, len(log) - 1):
        snap, args = forks.paused_at(sc, events, horizon, k)
        t = log[k][0]
        assert snap.t == t
        got = forks.continued(snap, args, [e for e in events if e.time > t], sc.duration_hours * 3600.0)
        assert got == pytest.approx(total, rel=1e-12)
        assert snap.t == t  # the snapshot itself is not moved by a continuation


def test_a_fork_does_not_touch_the_run_it_was_taken_from():
    sc = _scenario()
    events = draw_events(sc, np.random.default_rng(7))
    policy = make_policy("unicron", sc)
    eng = Engine(sc, events, policy, planning_mtbf_hours(sc))
    taken = {}
    plain = policy.replan

    def replan(e, failed, repaired, charge):
        if charge and "copy" not in taken:
            taken["copy"] = fork.fork(e)
            taken["state"] = (e.t, e.output, [dict(j.alloc) for j in e.jobs], list(e._heap))
        plain(e, failed, repaired, charge)

    policy.replan = replan
    eng.run()
    copy = taken["copy"]
    t, output, allocs, heap = taken["state"]
    assert (copy.t, copy.output, [j.alloc for j in copy.jobs]) == (t, output, allocs)
    fork.continue_on(copy, [], sc.duration_hours * 3600.0)  # a copy run on without failures
    assert eng.t == sc.duration_hours * 3600.0 and copy.t == eng.t
    assert all(j._hook.__self__ is copy._touched for j in copy.jobs)


def _rollout_run(sc, seed, policy):
    events = draw_events(sc, np.random.default_rng(seed))
    return Engine(sc, events, policy, planning_mtbf_hours(sc), checks=True).run()


def test_the_rollout_returns_one_of_the_candidates_and_keeps_the_engine_invariants():
    sc = _scenario("near-linear", 0, hours=240.0)
    policy = make_policy("rollout", sc)
    policy.futures, policy.window_hours = 2, 24.0
    seen = []
    plain = policy.values

    def values(eng, plans, failed, repaired):
        out = plain(eng, plans, failed, repaired)
        seen.append((plans, out))
        return out

    policy.values = values
    chosen = []  # (the plan chosen, the candidates and their values) at each decision
    decide = policy.decide

    def recorded(eng, failed, repaired):
        before = len(seen)
        plan = decide(eng, failed, repaired)
        if len(seen) > before:
            chosen.append((plan, *seen[-1]))
        return plan

    policy.decide = recorded
    result = _rollout_run(sc, 0, policy)
    assert result["weighted_tflop"] > 0
    assert policy.decisions == len(seen) == len(chosen) > 0
    for plan, plans, vals in chosen:  # distinct candidates; the chosen one has the best sum (the first of ties)
        assert 1 < len(plans) <= len(RolloutPolicy.CANDIDATES) and len(vals) == len(plans)
        assert all(a[0] != b[0] for i, a in enumerate(plans) for b in plans[i + 1:])
        k = next(i for i, p in enumerate(plans) if p is plan)
        assert vals[k] == max(vals) and all(v < vals[k] for v in vals[:k])


def test_with_identical_futures_the_rollout_picks_the_best_candidate_on_that_future(monkeypatch):
    sc = _scenario("min-counts", 1, hours=240.0)
    events = draw_events(sc, np.random.default_rng(1))
    policy = make_policy("rollout", sc)
    policy.futures, policy.window_hours = 3, 48.0
    checked = []
    plain = policy.values

    def values(eng, plans, failed, repaired):
        end = min(eng.t + policy.window_hours * 3600.0, sc.duration_hours * 3600.0)
        future = [e for e in events if eng.t < e.time < end]  # the same future K times
        monkeypatch.setattr(fork, "future_events", lambda *a, **k: list(future))
        out = plain(eng, plans, failed, repaired)
        monkeypatch.undo()
        alone = []  # each candidate on that future, forked and continued one by one
        for plan in plans:
            copy = fork.fork(eng, policy._subs[policy.horizon])
            apply_plan(copy.policy, copy, plan, failed, repaired)
            alone.append(fork.continue_on(copy, list(future), end))
        assert out == pytest.approx([3 * v for v in alone], rel=1e-12)
        checked.append(alone)
        return out

    policy.values = values
    Engine(sc, events, policy, planning_mtbf_hours(sc)).run()
    assert checked and policy.decisions == len(checked)


def test_the_rollout_is_repeatable_and_its_plans_are_the_dps():
    sc = _scenario("near-linear", 3, hours=120.0)
    a, b = (make_policy("rollout", sc) for _ in range(2))
    for p in (a, b):
        p.futures, p.window_hours = 2, 24.0
    ra, rb = _rollout_run(sc, 3, a), _rollout_run(sc, 3, b)
    assert ra == rb and a.decisions == b.decisions
    never = make_policy("rollout", sc)  # one candidate: always the base horizon's plan, unicron "lifetime"
    never.CANDIDATES = ("lifetime",)
    lifetime = load_scenario(dict(family_scenario("near-linear", 3, 1024, duration_hours=120.0),
                                  cost={"horizon": "lifetime"}))
    assert _rollout_run(sc, 3, never) == _rollout_run(lifetime, 3, make_policy("unicron", lifetime))
    assert never.decisions == 0


def test_the_fork_analysis_verdicts_follow_the_intervals_and_the_file_matches_its_script():
    forks = _forks()
    committed = json.loads((ROOT / "benchmarks" / "results-forks-1024.json").read_text())["seeds"]
    assert committed
    for r in committed:
        if r.get("replan") is None:
            continue
        assert r["actual_check"] is True
        lo, hi = r["ci95_rel"]
        assert r["verdict"] == ("gamble" if lo > 0 else "mistake" if hi < 0 else "even")
        assert r["actual_rel"] < 0  # every seed analysed is one lifetime lost
        assert len(r["diffs_rel"]) == r["futures"]
    # the latest divergence (the shortest forks) re-run with 2 futures: its first two futures again
    r = max((r for r in committed if r.get("replan")), key=lambda r: r["hours_at"])
    now = forks.fork_seed(r["family"], r["gpus"], r["seed"], r["duration_hours"], r["fixed"], futures=2)
    assert now["replan"] == r["replan"] and now["actual"] == r["actual"] and now["actual_check"]
    assert now["diffs_rel"] == pytest.approx(r["diffs_rel"][:2], rel=1e-9, abs=1e-15)


def test_the_fork_analysis_picks_the_seeds_lifetime_loses():
    forks = _forks()
    lines = [{"family": "jagged", "gpus": 1024, "seed": s, "duration_hours": 1.0,
              "weighted_tflop": {"cluster": 1.0, "job": 2.0, "event": 1.5, "lifetime": v}}
             for s, v in enumerate((2.0, 1.9, 3.0))]
    assert forks.losing_seeds(lines) == [("jagged", 1024, 1, 1.0, "job")]


def test_rollout_to_end_continues_each_fork_with_the_horizon_of_its_plan(monkeypatch):
    sc = _scenario("near-linear", 0, hours=120.0)
    policy = make_policy("rollout-to-end", sc)
    policy.futures = 2
    used = []
    plain = fork.fork

    def recorded(eng, base=None, share=()):
        used.append((base.horizon, eng.t))
        return plain(eng, base, share)

    monkeypatch.setattr(fork, "fork", recorded)
    result = _rollout_run(sc, 0, policy)
    assert result["weighted_tflop"] > 0 and policy.decisions > 0
    assert len({h for h, _ in used}) > 1  # forks continued by more than the base horizon
    assert set(h for h, _ in used) <= {"lifetime", "event", "job", "cluster"}


def test_without_a_failure_model_to_sample_the_rollout_plans_as_its_base():
    from unicron_plan.simulate.run import simulate

    data = family_scenario("near-linear", 0, 1024, duration_hours=120.0)
    sc = load_scenario(data)
    events = draw_events(sc, np.random.default_rng(0))
    trace = [{"time_hours": e.time / 3600.0, "kind": e.kind, "node": e.node,
              **({"severity": e.severity, "error": e.error} if e.kind == "failure" else {})} for e in events]
    replayed = load_scenario(dict({k: v for k, v in data.items() if k != "failures"}, trace=trace))
    lifetime = load_scenario(dict(replayed.model_dump(exclude_none=True), cost={"horizon": "lifetime"}))
    out = simulate(replayed, ["rollout"], 0)["policies"]["rollout"]
    assert out == simulate(lifetime, ["unicron"], 0)["policies"]["unicron"]


def test_the_bound_is_above_the_rollouts_on_small_runs():
    from unicron_plan.simulate.bound import upper_bound

    for seed in range(3):
        data = family_scenario(FAMILIES[seed], seed, (64, 128, 256)[seed], duration_hours=100.0)
        data["failures"]["node_mtbf_hours"] = 100.0  # many failures per run
        sc = load_scenario(data)
        events = draw_events(sc, np.random.default_rng(seed))
        bound = upper_bound(sc, events, make_policy("unicron", sc).healthy_factor())
        for name in ("rollout", "rollout-to-end"):
            policy = make_policy(name, sc)
            policy.futures = 2
            result = Engine(sc, events, policy, planning_mtbf_hours(sc), checks=True).run()
            assert 0 < result["weighted_tflop"] <= bound * (1 + 1e-12), (seed, name)
