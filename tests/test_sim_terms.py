"""The simulator's problem builder (simulate/terms.py) returns the Problem core.problem.tabulate
returns, to the last bit, and its DP on the flat options the counts of dp.solve, at every re-plan of
random small runs (every horizon, constrained jobs, capacity below the largest counts); the runs'
results equal those of the planner policies built on tabulate and dp.solve alone."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from unicron_plan.core import problem as core_problem
from unicron_plan.errors import InvalidInstanceError
from unicron_plan.simulate import policies, terms
from unicron_plan.simulate.run import load_scenario, simulate
from unicron_plan.solvers import dp
from unicron_plan.tools.generate import generate_scenario


def _scenario(seed: int, horizon: str | None, curves: str = "synthetic", constrained: bool = False,
              dips: bool = False, gpus: int = 512, jobs: int = 12, max_counts: int = 80):
    doc = generate_scenario(seed, duration_hours=150.0, gpus=gpus, jobs=jobs, curves=curves, max_counts=max_counts)
    doc["failures"]["node_mtbf_hours"] = 60.0
    if dips:  # jobs whose own count is worth less than a smaller one: an option only as the count they keep
        doc["cost"]["default_transition_seconds"] = 20000.0
        for job in doc["jobs"][:8]:
            table, x = job["throughput"]["tflops"], job["current"]["gpus"]
            below = [v for c, v in table.items() if int(c) < x]
            if below and str(x) in table:
                table[str(x)] = 0.95 * max(below)
    if horizon is not None:
        doc["cost"]["horizon"] = horizon
    if constrained:  # counts a constraint removes: the jobs' terms are no longer table prefixes
        for job in doc["jobs"][:4]:
            job["min_gain_fraction"] = 0.2
    return load_scenario(doc)


def _same(a, b) -> bool:
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (a != a and b != b)
    return a == b


def assert_same_problem(p, q) -> None:
    """Every field of the two problems equal, every array to the last bit."""
    assert (p.d_run, p.capacity, p.max_changed_jobs, p.alternatives) == (q.d_run, q.capacity, q.max_changed_jobs,
                                                                          q.alternatives)
    assert p.state is q.state and p.instance is q.instance and len(p.jobs) == len(q.jobs)
    for a, b in zip(p.jobs, q.jobs):
        assert type(a) in (type(b), terms.KeptTerms) and type(b) is core_problem.JobTerms
        for f in dataclasses.fields(a):
            assert _same(getattr(a, f.name), getattr(b, f.name)), (a.id, f.name)


@pytest.fixture
def checked(monkeypatch):
    """Every RunTerms problem and DP answer compared with tabulate's and dp.solve's; counts the checks."""
    seen = {"problems": 0, "flat": 0, "dp": 0}
    build, counts = terms.RunTerms.tabulate, terms.RunTerms.dp_counts

    def tabulate(self, instance, state, changed=None, hit_at=None):
        p = build(self, instance, state, changed, hit_at)
        assert_same_problem(p, core_problem.tabulate(instance, state, self.tables, self.layouts, self.flat))
        seen["problems"] += 1
        seen["flat"] += self.flat_options(p) is not None
        return p

    def dp_counts(self, problem):
        out = counts(self, problem)
        if out is not None:
            assert out == dp.solve(problem).counts
            seen["dp"] += 1
        return out

    monkeypatch.setattr(terms.RunTerms, "tabulate", tabulate)
    monkeypatch.setattr(terms.RunTerms, "dp_counts", dp_counts)
    return seen


@pytest.mark.parametrize("horizon", [None, "cluster", "job", "lifetime"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_replan_equals_tabulate_and_the_dp(checked, seed, horizon):
    sc = _scenario(seed, horizon, curves=["synthetic", "equal-per-gpu", "linear-step"][seed])
    out = simulate(sc, ["unicron", "greedy"], seed)
    plans = out["policies"]["unicron"]["plans"] + out["policies"]["greedy"]["plans"]
    assert plans > 10 and checked["problems"] == plans
    if horizon == "lifetime":  # tabulate itself
        assert checked["flat"] == 0
    else:
        assert checked["flat"] == plans and checked["dp"] >= out["policies"]["unicron"]["plans"] - 1  # not time 0


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_own_counts_below_a_smaller_counts_worth_stay_options(monkeypatch, checked, seed):
    # the time-0 plan charged as the instance would: the jobs start on the counts that dip
    monkeypatch.setattr(policies.UnicronPolicy, "free_setup", False)
    sc = _scenario(seed, "cluster", dips=True)
    out = simulate(sc, ["unicron"], seed)
    assert checked["dp"] >= out["policies"]["unicron"]["plans"] - 1 > 10


@pytest.mark.parametrize("seed", [0, 1])
def test_greedy_keyed_by_the_counts_that_fit_gives_the_plain_greedy(monkeypatch, seed):
    from test_sim_greedy_memo import plain_greedy

    seen, replayed = [], []
    choose, replay = policies.GreedyPolicy.choose, policies.GreedyPolicy._replayed

    def checked_choose(self, problem):
        out = choose(self, problem)
        assert out == plain_greedy(problem)
        seen.append(self._terms.flat_options(problem) is not None)
        return out

    def counted_replay(self, flat, capacity):
        out = replay(self, flat, capacity)
        replayed.append(out is not None)
        return out

    monkeypatch.setattr(policies.GreedyPolicy, "choose", checked_choose)
    monkeypatch.setattr(policies.GreedyPolicy, "_replayed", counted_replay)
    # every job's largest count well below the capacity: the counts that fit recur
    sc = _scenario(seed, None, curves="near-linear" if seed else "synthetic", gpus=1024, jobs=24, max_counts=40)
    simulate(sc, ["greedy"], seed)
    assert sum(seen) > 10  # keyed by the counts that fit
    assert sum(replayed) > 5  # answered from the recorded run with no limit (simulate/greedy.py)


def test_constrained_jobs_equal_tabulate(checked):
    sc = _scenario(3, None, constrained=True)
    out = simulate(sc, ["unicron"], 3)
    assert checked["problems"] == out["policies"]["unicron"]["plans"] > 10
    assert checked["dp"] == 0  # the DP path needs jobs without constraints: dp.solve


@pytest.mark.parametrize("seed", [0, 1])
def test_runs_equal_the_runs_on_tabulate_alone(monkeypatch, seed):
    sc = _scenario(seed, None, curves="linear-step" if seed else "synthetic")
    names = ["unicron", "greedy", "clairvoyant"]
    fast = simulate(sc, names, seed)
    monkeypatch.setattr(terms.RunTerms, "tabulate", lambda self, instance, state, changed=None, hit_at=None: self._reference(instance, state))
    slow = simulate(sc, names, seed)
    assert json.dumps(fast, sort_keys=True) == json.dumps(slow, sort_keys=True)


def test_an_overflowing_gain_is_reported_as_tabulate_reports_it():
    sc = _scenario(0, None)
    pol = policies.make_policy("unicron", sc)
    from unicron_plan.simulate.engine import Engine
    from unicron_plan.simulate.trace import draw_events, planning_mtbf_hours

    eng = Engine(sc, draw_events(sc, np.random.default_rng(0)), pol, planning_mtbf_hours(sc))
    base = pol._base(eng)
    tables, layouts = core_problem.resolve_tables(base)
    huge = base.model_copy(update={"jobs": [base.jobs[0].model_copy(update={"weight": 1e308}), *base.jobs[1:]]})
    with np.errstate(over="ignore"):
        flat = core_problem.flat_tables(huge, tables)
    run_terms = terms.RunTerms(huge, tables, layouts, flat)
    state = core_problem.build_state(huge)
    with pytest.raises(InvalidInstanceError) as ours:
        run_terms.tabulate(huge, state)
    with pytest.raises(InvalidInstanceError) as theirs:
        core_problem.tabulate(huge, state, tables, layouts, flat)
    assert str(ours.value) == str(theirs.value)


KINDS = ["synthetic", "identical", "linear-step", "near-linear", "dense", "equal-per-gpu",
         "queued-linear-step", "queued-equal-per-gpu", "queued-near-linear"]


@pytest.mark.parametrize("kind", KINDS)
def test_random_instances_same_problem_counts_objective_and_bound(kind):
    """On generated instances with failures (every curve kind of one GPU type, running and queued
    jobs), the flat-options DP gives dp.solve's counts, so its objective, and dp.solve proves them
    optimal (bound = objective)."""
    from unicron_plan.api import load_instance
    from unicron_plan.core.cluster import build_state
    from unicron_plan.core.checks import check_instance
    from unicron_plan.tools.generate import generate_instance

    for seed in range(6):
        inst = load_instance(generate_instance(seed, gpus=512, jobs=14, curves=kind, max_counts=120,
                                               failed_nodes=1 + seed % 3))
        tables, layouts = core_problem.resolve_tables(inst)
        flat = core_problem.flat_tables(inst, tables)
        state = build_state(inst, check_instance(inst, tables))
        run_terms = terms.RunTerms(inst, tables, layouts, flat)
        p = run_terms.tabulate(inst, state)
        q = core_problem.tabulate(inst, state, tables, layouts, flat)
        assert_same_problem(p, q)
        counts = run_terms.dp_counts(p)
        assert counts is not None
        raw = dp.solve(q)
        assert counts == raw.counts and raw.bound == raw.objective
        assert q.objective(counts) == pytest.approx(raw.objective, rel=1e-12, abs=1e-9)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_placement_from_the_stays_found_with_arrays_equals_placement(monkeypatch, seed):
    """RunTerms.placement_start + place gives, at every re-plan, the placement place() makes from
    scratch: the same splits, the staying jobs' previous dicts themselves, in the same order."""
    from unicron_plan.plan import placement as pl

    seen = []
    start = terms.RunTerms.placement_start

    def checked(self, problem, counts, **kwargs):
        out = start(self, problem, counts, **kwargs)
        if out is not None:
            ref = pl.place(problem, counts)
            got = dict(problem.state.previous)
            got.update(pl.place(problem, counts, (dict(out[0]), {k: {} for k in out[1]}, list(out[2]))))
            assert got == ref and list(got) == list(ref)
            assert all((got[k] is v) == (v is problem.state.previous[k]) for k, v in ref.items())
            seen.append(len(out[1]))
        return out

    monkeypatch.setattr(terms.RunTerms, "placement_start", checked)
    sc = _scenario(seed, None, curves=["synthetic", "near-linear", "linear-step"][seed])
    out = simulate(sc, ["unicron", "greedy"], seed)
    assert len(seen) >= out["policies"]["unicron"]["plans"] + out["policies"]["greedy"]["plans"] - 2 > 10
    assert 0 < sum(seen) < len(seen) * 12  # some jobs stay, some move


def test_counts_that_fit_without_a_search_where_every_count_fits():
    """RunTerms._fits: where the capacity reaches every count it takes every entry without a search,
    the same as the search over the flat keys (capacities on both sides of the largest count)."""
    from unicron_plan.api import load_instance
    from unicron_plan.tools.generate import generate_instance

    inst = load_instance(generate_instance(2, gpus=512, jobs=14, curves="synthetic", max_counts=120, failed_nodes=1))
    tables, layouts = core_problem.resolve_tables(inst)
    run_terms = terms.RunTerms(inst, tables, layouts, core_problem.flat_tables(inst, tables))
    (gtype,) = run_terms.type_set
    top = run_terms.scale - 1
    for cap in [0, 1, 8, top // 2, top - 1, top, top + 1, 10 * top]:
        searched = np.searchsorted(run_terms.keys, run_terms.first_key + min(cap, top), side="right") - run_terms.starts
        got = run_terms._fits({gtype: cap})
        assert got.dtype == searched.dtype and got.tolist() == searched.tolist(), cap
    assert run_terms._fits({gtype: top}).tolist() == run_terms.sizes.tolist()


@pytest.fixture
def late(monkeypatch):
    """Each RunTerms problem compared with tabulate's only after the policy used it (at the next build,
    while it is still valid), so its gains are written when the policy first reads them, or never; the
    DP's gains worked out at its options alone (RunTerms._gains_at) compared with the written buffer's."""
    seen = {"problems": 0, "unread": 0, "at": 0}
    build, gains_at = terms.RunTerms.tabulate, terms.RunTerms._gains_at
    last: dict = {}

    def check(self):
        p, q = last.pop(id(self), (None, None))
        if p is not None:
            seen["unread"] += self._shared.pending is not None
            assert_same_problem(p, q)
            seen["problems"] += 1

    def tabulate(self, instance, state, changed=None, hit_at=None):
        check(self)
        p = build(self, instance, state, changed, hit_at)
        last[id(self)] = (p, core_problem.tabulate(instance, state, self.tables, self.layouts, self.flat))
        return p

    def checked_gains_at(self, at, job_at, f_at, off):
        out = gains_at(self, at, job_at, f_at, off).copy()
        if self._shared.pending is not None:
            self._shared.fill()
            assert out.tobytes() == self._gains[at].tobytes()
            seen["at"] += 1
        return out

    monkeypatch.setattr(terms.RunTerms, "tabulate", tabulate)
    monkeypatch.setattr(terms.RunTerms, "_gains_at", checked_gains_at)
    return seen


@pytest.mark.parametrize("horizon", [None, "cluster", "job"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gains_written_late_or_at_the_options_alone_equal_tabulate(late, seed, horizon):
    sc = _scenario(seed, horizon, curves=["synthetic", "equal-per-gpu", "linear-step"][seed], dips=seed == 1)
    out = simulate(sc, ["unicron", "greedy"], seed)
    plans = out["policies"]["unicron"]["plans"] + out["policies"]["greedy"]["plans"]
    assert late["problems"] >= plans - 2  # (the last problem of each run is checked by no next build)
    assert late["at"] >= out["policies"]["unicron"]["plans"] - 1  # the DP's gains at its options alone
    assert late["unread"] >= out["policies"]["greedy"]["plans"] - 1  # the greedy baseline reads no gain


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_dp_counts_dict_made_from_the_last_one_equals_a_fresh_one(monkeypatch, seed):
    """dp_counts' dict (a copy of its last one with the moved counts rewritten) equals the dict made
    afresh from the DP's counts, keys in job order, at every re-plan; each call's is a new dict, and
    the caller changing it (as a policy may) changes nothing the next call returns."""
    found, seen = [], {"calls": 0, "moved": 0}
    solve = terms.solve_type_joined

    def solve_type_joined(*args, **kwargs):
        out = solve(*args, **kwargs)
        found.append(list(out[0]))
        return out

    counts, returned = terms.RunTerms.dp_counts, []

    def dp_counts(self, problem):
        found.clear()
        out = counts(self, problem)
        if out is not None:
            fresh = dict(zip(self.ids, [int(v) for v in found[-1]]))
            assert list(out.items()) == list(fresh.items())
            assert all(type(v) is int for v in out.values())
            assert all(out is not r for r in returned)
            if returned:
                seen["moved"] += sum(returned[-1][1][k] != v for k, v in fresh.items())
            seen["calls"] += 1
            returned.append((out, fresh))
            # what the caller does with its dict is its own business
            out[self.ids[0]] = -1
            out.pop(self.ids[-1])
            out["not a job"] = 3
            return dict(fresh)
        return out

    monkeypatch.setattr(terms, "solve_type_joined", solve_type_joined)
    monkeypatch.setattr(terms.RunTerms, "dp_counts", dp_counts)
    sc = _scenario(seed, None, curves=["synthetic", "equal-per-gpu", "linear-step"][seed], jobs=24)
    simulate(sc, ["unicron"], seed)
    assert seen["calls"] > 10 and seen["moved"] > 0


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_placement_start_reads_the_dp_counts_array_only_for_the_dict_handed_on(monkeypatch, seed):
    """plan passes placement_start the DP's counts as an array where its policy's choose is
    UnicronPolicy.choose (the dict dp_counts returned, unchanged): equal to the counts read by the job
    ids at every re-plan; a policy of its own choose (here one that changes the dict) is read by the ids."""
    start, given, current = terms.RunTerms.placement_start, {}, []

    def checked(self, problem, counts, y=None):
        if y is not None:
            assert np.array_equal(y, np.fromiter(map(counts.__getitem__, self.ids), dtype=np.int64, count=self.m))
            assert self.dp_counts_array(counts) is y and self.dp_counts_array(dict(counts)) is None
        name = "unicron" if type(current[-1]) is policies.UnicronPolicy else "other"
        given.setdefault(name, []).append(y is not None)
        return start(self, problem, counts, y)

    planned = policies.PlannerPolicy.plan

    def plan(self, *args, **kwargs):
        current.append(self)
        return planned(self, *args, **kwargs)

    class Changing(policies.UnicronPolicy):
        name = "changing"

        def choose(self, problem):
            out = super().choose(problem)
            k = next((k for k, v in out.items() if v > 0), None)
            if k is not None:
                out[k] = 0
            return out

    monkeypatch.setitem(policies.POLICIES, "changing", Changing)
    monkeypatch.setitem(policies.MODEL_OF, "changing", "unicron")
    monkeypatch.setattr(terms.RunTerms, "placement_start", checked)
    monkeypatch.setattr(policies.PlannerPolicy, "plan", plan)
    sc = _scenario(seed, None, curves=["synthetic", "equal-per-gpu", "linear-step"][seed])
    out = simulate(sc, ["unicron", "changing"], seed)
    assert sum(given["unicron"]) >= out["policies"]["unicron"]["plans"] - 2 > 10
    assert not any(given["other"]) and len(given["other"]) > 10
