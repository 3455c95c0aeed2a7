"""A refuted or abandoned IP engine returns the best plan the code holds, on every IP backend.

The engine is replaced by one that claims ``optimal`` for the keep-or-suspend plan (refuted), stops
with no plan (abandoned), or fails (error). The answer must then be the best plan held without the
engine: the DP's optimum where the DP is exact (also when the model had no start from it), the
DP's start at node level, the mixed solver's plan on mixed fleets (placed, with node-level
constraints), never keep-or-suspend when a better plan is known."""

from __future__ import annotations

import math

import numpy as np
import pytest

from randgen import random_instance
from randgen_ip import random_ip_instance
from test_mixed_constraints import constrained_mixed
from unicron_plan import api
from unicron_plan.core.constraints import dp_limitations
from unicron_plan.core.problem import build_problem
from unicron_plan.errors import UnicronError
from unicron_plan.solvers import SolverOptions, auto, cpsat, get_solver, ipmodel, milp, mixed, mixed_place
from unicron_plan.tools.mixedgen import mixed_instance

MODES = ("refuted", "abandoned", "error")
BACKENDS = ("milp", "milp-cbc", "cpsat")


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-6)


@pytest.fixture
def engine(monkeypatch):
    """``engine(mode)``: every IP engine (HiGHS, CBC, CP-SAT) answers as ``mode`` says on the models
    of a solve; placement models (counts fixed: ``ipmodel.build_placement``) are solved for real."""
    claims: dict[int, list[int]] = {}   # model -> keep-or-suspend values, taken before a start replaces the hint
    placements: list = []               # placement models (kept alive, so their ids stay theirs)
    real_build, real_placement = mixed_place.build, ipmodel.build_placement
    real_milp, real_cpsat = milp.run, cpsat.run

    def build(problem, deadline=None):
        copies = real_build(problem, deadline)
        claims[id(copies.model)] = copies.model.hint_values()
        return copies

    def build_placement(*a, **kw):
        placements.append(real_placement(*a, **kw))
        return placements[-1]

    monkeypatch.setattr(mixed_place, "build", build)
    monkeypatch.setattr(ipmodel, "build_placement", build_placement)

    def placing(model) -> bool:
        return any(model is m for m in placements)

    def force(mode: str):
        def answer(model):
            if mode == "refuted":   # keep-or-suspend claimed optimal, with its own value as the bound
                values = claims.get(id(model)) or model.hint_values()
                value = math.fsum(c * values[v] for v, c in model.objective.items())
                return {"termination": "optimal", "has_solution": True, "bound": value}, values
            if mode == "abandoned":
                return {"termination": "time_limit", "has_solution": False, "bound": math.inf}, None
            return {"termination": "error", "has_solution": False, "bound": math.inf, "highs_status": "forced"}, None

        def milp_run(model, options, backend="highs", preprocess=True, start=None):
            return real_milp(model, options, backend, preprocess, start) if placing(model) else answer(model)

        def cpsat_run(model, options):
            return real_cpsat(model, options) if placing(model) else (*answer(model), {"cpsat_status": mode})

        monkeypatch.setattr(milp, "run", milp_run)
        monkeypatch.setattr(cpsat, "run", cpsat_run)

    return force


def _drop_the_start(monkeypatch):
    """The model gets no start from the DP (as when its counts could not be written as the model's values)."""
    real_seed = milp.seed

    def seed(problem, model, deadline):
        relaxed = real_seed(problem, model, deadline)
        model.start = None
        return relaxed

    monkeypatch.setattr(milp, "seed", seed)


def _instances(make, keep, want: int, seeds: int = 400) -> list[dict]:
    """The first ``want`` instances ``make(seed)`` for which ``keep(instance doc, problem)`` holds."""
    out = []
    for seed in range(seeds):
        doc = make(seed)
        try:
            problem = build_problem(api.load_instance(doc))
        except UnicronError:
            continue
        if keep(doc, problem):
            out.append(doc)
            if len(out) == want:
                break
    assert len(out) == want, "the generator no longer gives such instances"
    return out


def _better_than_keep_or_suspend(problem, value: float) -> bool:
    kept = ipmodel.keep_or_suspend(problem)
    return kept is None or value > problem.objective(*kept) + 1e-6 * max(1.0, abs(value))


def _count_level(seed):
    return random_instance(np.random.default_rng(seed), max_nodes=4, max_jobs=3)


def _keep_count_level(doc, problem):
    if problem.alternatives or dp_limitations(problem):
        return False
    from unicron_plan.solvers import dp

    return _better_than_keep_or_suspend(problem, dp.solve(problem).objective)


COUNT_LEVEL = _instances(_count_level, _keep_count_level, 3)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("start", ["start", "no start"])
def test_single_type_answers_the_dp_optimum_when_the_engine_fails(engine, monkeypatch, backend, mode, start):
    """Nothing but the capacity binds: the DP's optimum is held (its plan, placed at assembly), so a
    refuted or abandoned engine answers with it, with or without the model's start."""
    from unicron_plan.solvers import dp

    if start == "no start":
        _drop_the_start(monkeypatch)
    engine(mode)
    for doc in COUNT_LEVEL:
        problem = build_problem(api.load_instance(doc))
        truth = dp.solve(problem).objective
        raw = get_solver(backend)(problem, SolverOptions(time_limit_seconds=30))
        assert _close(raw.objective, truth), (backend, mode, start, raw.objective, truth, raw.options)
        assert raw.options.get("fallback") != "keep-or-suspend"
        plan = api.solve(doc, solver=backend, time_limit_seconds=30)
        assert _close(plan.objective, truth) and api.validate_plan(doc, plan).valid


def _node_level(seed):
    return random_ip_instance(np.random.default_rng(seed), max_nodes=3, max_jobs=3)


def _keep_node_level(doc, problem):
    if problem.alternatives or not dp_limitations(problem):
        return False
    model = ipmodel.build(problem)
    milp.seed(problem, model, None)
    known = milp._known_plans(problem, model)
    return bool(known) and known[0][0] == "dp" and _better_than_keep_or_suspend(problem, known[0][2])


NODE_LEVEL = _instances(_node_level, _keep_node_level, 3)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode", MODES)
def test_node_level_answers_the_dps_start_when_the_engine_fails(engine, backend, mode):
    """Node-level constraints: the DP's counts placed in whole tp groups (the model's start) are held,
    better than keep-or-suspend: the answer is never below them."""
    engine(mode)
    for doc in NODE_LEVEL:
        problem = build_problem(api.load_instance(doc))
        model = ipmodel.build(problem)
        milp.seed(problem, model, None)
        held = milp._known_plans(problem, model)[0][2]
        raw = get_solver(backend)(problem, SolverOptions(time_limit_seconds=30))
        assert raw.objective >= held - 1e-9 * max(1.0, abs(held)), (backend, mode, raw.objective, held, raw.options)
        assert raw.options.get("fallback") != "keep-or-suspend"
        assert raw.solution != "optimal" or raw.options.get("proof")   # the engine proved nothing


def _mixed(seed):
    return mixed_instance(seed, types=2, jobs=3)


def _keep_mixed(doc, problem):
    if not problem.alternatives or mixed._limitations(problem):
        return False
    counts, types, value, bound, stopped, _ = mixed.solve_types(problem)
    return not stopped and _better_than_keep_or_suspend(problem, value)


MIXED = _instances(_mixed, _keep_mixed, 3)


def _at_the_count_level_optimum(docs: list[dict], backend: str, mode: str):
    """(doc, the backend's answer) for each doc, the answer checked to be the mixed solver's optimum."""
    for doc in docs:
        problem = build_problem(api.load_instance(doc))
        truth = mixed.solve_types(problem)[2]
        raw = get_solver(backend)(problem, SolverOptions(time_limit_seconds=30))
        assert _close(raw.objective, truth), (backend, mode, raw.objective, truth, raw.options)
        yield doc, raw


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode", MODES)
def test_mixed_fleets_answer_the_mixed_optimum_when_the_engine_fails(engine, backend, mode):
    """Mixed fleets (solvers/mixed_ip.py): the mixed solver's exact optimum is held: the answer."""
    engine(mode)
    for doc, raw in _at_the_count_level_optimum(MIXED, backend, mode):
        assert raw.options.get("fallback") in (None, "mixed")
        assert mode != "refuted" or raw.options.get("optimal_claim_refuted") or raw.options.get("incumbent_discarded")


def _constrained(seed):
    return constrained_mixed(seed, 2, 3)


def _keep_constrained(doc, problem):
    """Node-level or churn limits that bind, and the count-level optimum placed under them (the
    router's own answer comes from there), better than keep-or-suspend."""
    if not problem.alternatives or not mixed._limitations(problem):
        return False
    raw = mixed.solve(problem, SolverOptions(time_limit_seconds=30), single=auto.solve_single)
    return raw.options.get("backend") == "mixed+place" and _better_than_keep_or_suspend(problem, raw.objective)


CONSTRAINED = _instances(_constrained, _keep_constrained, 3)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode", MODES)
def test_mixed_fleets_with_node_level_constraints_answer_the_mixed_plan_when_the_engine_fails(engine, backend, mode):
    """Mixed fleets with node-level or churn constraints on an IP backend (solvers/mixed_place.py):
    the count-level optimum, placed, is held; the engine's failure changes nothing."""
    engine(mode)
    for doc, raw in _at_the_count_level_optimum(CONSTRAINED, backend, mode):
        assert raw.solution == "optimal" and raw.options.get("fallback") is None
        plan = api.solve(doc, solver=backend, time_limit_seconds=30)
        assert _close(plan.objective, raw.objective) and api.validate_plan(doc, plan).valid
