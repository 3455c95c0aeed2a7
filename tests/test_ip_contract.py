"""Contract tests: every registered solver x every library instance against its recorded optimum."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from brute_nodes import node_brute
from unicron_plan import api
from unicron_plan.core.constraints import dp_limitations
from unicron_plan.errors import SolverUnavailableError
from unicron_plan.core.problem import build_problem
from unicron_plan.solvers import REGISTRY

LIBRARY = sorted((Path(__file__).resolve().parent.parent / "instances").glob("*.json"))
SOLVERS = [s.name for s in REGISTRY]
#: Library instances whose jobs are all queued on tie-heavy curves (equal per-GPU value, linear steps,
#: near-linear noise): CBC and CP-SAT do not close their search on them within minutes.
TIE_HEAVY = {p.stem for p in LIBRARY if p.stem.startswith("adversarial-queued-")}
TIE_BOUND_SOLVERS = {"milp-cbc", "cpsat"}
#: The IP backends start from the DP's plan and never answer below it, so this limit only bounds how
#: long they search the ties; what the test asks of them then holds at any limit.
TIE_LIMIT_SECONDS = 3.0


@pytest.mark.long  # (every backend on every library instance: out of the default run for its time)
@pytest.mark.parametrize("path", LIBRARY, ids=[p.stem for p in LIBRARY])
@pytest.mark.parametrize("solver", SOLVERS)
def test_solver_matches_recorded_optimum(path, solver):
    inst = api.load_instance(path)
    assert inst.reference is not None, f"{path.name} has no recorded optimum"
    limits = dp_limitations(build_problem(inst))
    if solver in ("dp", "brute") and limits:
        with pytest.raises(SolverUnavailableError, match="auto"):
            api.solve(inst, solver=solver)
        return
    tie_heavy = solver in TIE_BOUND_SOLVERS and path.stem in TIE_HEAVY
    try:
        # The contract is exactness: no limit, except where a branch-and-bound backend is known to
        # search the ties of every-job-queued curves for minutes (then: a valid plan, never above the
        # optimum, and the optimum whenever it says optimal).
        plan = api.solve(inst, solver=solver, time_limit_seconds=TIE_LIMIT_SECONDS if tie_heavy else None)
    except SolverUnavailableError as exc:
        if solver == "brute" and "combinations" in str(exc):
            pytest.skip("too large for the brute force")
        raise
    assert api.validate_plan(inst, plan).valid
    if tie_heavy:
        assert plan.objective <= inst.reference.objective * (1 + 1e-9) + 1e-6
        if plan.status.solution != "optimal":
            return
    assert plan.status.solution == "optimal"
    assert math.isclose(plan.objective, inst.reference.objective, rel_tol=1e-9, abs_tol=1e-6)


IP_LIBRARY = [p for p in LIBRARY if p.stem.startswith("ip-")]


@pytest.mark.parametrize("path", IP_LIBRARY, ids=[p.stem for p in IP_LIBRARY])
def test_constraint_instances_verified_by_brute_force(path):
    inst = api.load_instance(path)
    value, _ = node_brute(inst)
    assert math.isclose(value, inst.reference.objective, rel_tol=1e-12)


def _strip(inst):
    data = inst.model_dump(exclude_none=True)
    data.pop("max_changed_jobs", None)
    data.pop("reference", None)
    for job in data["jobs"]:
        for f in ("tp", "pinned", "max_nodes", "same_rack", "min_gain_fraction"):
            job.pop(f, None)
    return data


@pytest.mark.parametrize("path", IP_LIBRARY, ids=[p.stem for p in IP_LIBRARY])
def test_each_constraint_changes_its_optimum(path):
    inst = api.load_instance(path)
    free = api.solve(_strip(inst), solver="dp")
    assert free.objective > inst.reference.objective + 1.0, "the constraint does not bind"


def test_auto_routes_by_constraint():
    here = Path(__file__).resolve().parent.parent / "instances"
    sep = api.solve(here / "tiny-one-job-two-nodes.json", solver="auto")
    assert sep.solver.options["backend"] == "dp"
    hyst = api.solve(here / "ip-hysteresis.json", solver="auto")
    assert hyst.solver.options["backend"] == "dp"  # hysteresis only filters counts
    tp = api.solve(here / "ip-tp-packing.json", solver="auto")
    assert tp.solver.options["backend"] in ("milp", "cpsat")  # the DP counts (12) do not pack
    churn = api.solve(here / "ip-max-changed-jobs.json", solver="auto")
    assert churn.solver.options["backend"] in ("milp", "cpsat")


def test_unknown_solver_lists_valid_ones():
    with pytest.raises(SolverUnavailableError) as exc:
        api.solve(LIBRARY[0], solver="gurobi")
    for name in SOLVERS:
        assert name in str(exc.value)
