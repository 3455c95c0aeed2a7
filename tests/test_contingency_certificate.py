"""A stored plan's certificate (the index's LP multipliers, checked in one pass over the table entries)
and the rule that solves afresh when answering from the index would cost more than solving."""

from __future__ import annotations

import copy
import itertools
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from randgen import random_instance
from unicron_plan import api
from unicron_plan.core.problem import build_problem
from unicron_plan.errors import InvalidInstanceError
from unicron_plan.io import dumps
from unicron_plan.plan import contingency
from unicron_plan.plan.contingency import build_contingency, write_contingency
from unicron_plan.solvers import brute, dp
from unicron_plan.solvers.contingency import certified_optimal, proven_optimal
from unicron_plan.tools.generate import generate_instance

ROOT = Path(__file__).resolve().parent.parent


def _with_failure(doc: dict, failed: list[str]) -> dict:
    d = copy.deepcopy(doc)
    d["event"] = {"kind": "failure", "failed_nodes": failed, "failed_gpus": []}
    return d


def _plans(problem, limit: int = 300):
    """Every count vector of ``problem``'s jobs (allowed counts, any total), at most ``limit``."""
    jobs = problem.jobs
    for k, combo in enumerate(itertools.product(*(j.counts.tolist() for j in jobs))):
        if k >= limit:
            return
        yield dict(zip((j.id for j in jobs), combo))


def test_the_certificate_never_claims_a_plan_brute_force_beats():
    """Every plan (up to 300) of 120 small random instances, with the right, a zero, a huge and a random
    multiplier: proven exactly when no plan is worth more (brute force), the certificate alone never wrong."""
    rng = np.random.default_rng(11)
    checked = proven = 0
    for k in range(120):
        doc = random_instance(rng, max_nodes=4, max_jobs=3 + k % 2)
        try:
            problem = build_problem(api.load_instance(doc))
            best = brute.solve(problem).objective
        except Exception:  # an instance whose rules admit no plan: nothing to prove
            continue
        if len(problem.capacity) != 1:
            continue
        gpu_type, capacity = next(iter(problem.capacity.items()))
        jobs = problem.jobs_of_type(gpu_type)
        lam = dp.lp_multiplier(dp.pareto_all(jobs), capacity)
        for counts in _plans(problem):
            fits = sum(counts.values()) <= capacity
            value = problem.objective(counts) if fits else None
            optimal = fits and value >= best - 1e-9 * (abs(best) + 1.0)
            for mult in (None, lam, 0.0, 10 * lam + 1.0, float(rng.uniform(0, 2 * lam + 1.0))):
                verdict = certified_optimal(jobs, capacity, counts, mult)
                if verdict:
                    assert optimal, (counts, mult, value, best)
                if not fits:
                    assert verdict is False
                whole = proven_optimal(problem, counts, {gpu_type: mult} if mult is not None else None) \
                    if fits else False
                assert whole == optimal or (whole and value >= best - 1e-6 * (abs(best) + 1.0)), (counts, mult)
                checked += 1
                proven += bool(verdict)
    assert checked > 2000 and proven > 100


def test_the_pass_over_the_options_a_multiplier_leaves_proves_only_optima():
    """Jagged tables, where no bound closes: the pass over the options the stored multiplier leaves
    proves the DP's optimum (exact: tests/test_dp_exact.py) and never a plan worth less, whatever the
    multiplier."""
    rng = np.random.default_rng(5)
    decided_by_the_pass = 0
    for gpus, m, seed in [(256, 4, 1), (256, 4, 2), (512, 8, 0), (512, 8, 3), (1024, 8, 1), (2048, 16, 3)]:
        problem = build_problem(api.load_instance(generate_instance(seed, gpus=gpus, jobs=m, failed_nodes=1)))
        gpu_type, capacity = next(iter(problem.capacity.items()))
        jobs = problem.jobs_of_type(gpu_type)
        lam = dp.lp_multiplier(dp.pareto_all(jobs), capacity)
        best = dp.solve(problem)
        plans = [best.counts]
        for _ in range(30):  # the optimum with one job moved to another allowed count, when it fits
            counts = dict(best.counts)
            j = jobs[int(rng.integers(len(jobs)))]
            counts[j.id] = int(rng.choice(j.counts))
            if sum(counts.values()) <= capacity:
                plans.append(counts)
        for counts in plans:
            value = problem.objective(counts)
            optimal = value >= best.objective - 1e-9 * (abs(best.objective) + 1.0)
            for mult in (lam, lam * 1.001, lam * 0.999, 0.0, float(rng.uniform(0, 2 * lam))):
                verdict = certified_optimal(jobs, capacity, counts, mult)
                assert not verdict or optimal, (gpus, m, seed, counts, mult)
                if verdict and certified_optimal(jobs, capacity, counts, mult, search=False) is None:
                    decided_by_the_pass += 1
        assert certified_optimal(jobs, capacity, best.counts, lam * 1.001) is not False
    assert decided_by_the_pass >= 4


@pytest.mark.parametrize("curves", ["queued-linear-step", "equal-per-gpu"])
def test_the_stored_multiplier_proves_a_linear_kind_alone(curves):
    """On tables whose bound closes, the index's multiplier proves the stored plan without the full proof."""
    doc = generate_instance(2, gpus=512, jobs=8, failed_nodes=0, curves=curves)
    inst = api.load_instance(doc)
    index = build_contingency(inst)
    assert set(index["multipliers"]) == {n.gpu_type for n in inst.cluster.nodes}
    key, entry = next(iter(index["failures"].items()))
    failed = api.load_instance(_with_failure(doc, entry["failed_nodes"]))
    problem = build_problem(failed)
    counts = index["plans"][entry["plan"]]["counts"]
    for gpu_type, capacity in problem.capacity.items():
        assert certified_optimal(problem.jobs_of_type(gpu_type), capacity, counts,
                                 index["multipliers"][gpu_type]) is True
    assert api.solve(failed, contingency=index).solver.name == "contingency"


def _index_dir(tmp_path: Path, doc: dict, edit=None) -> Path:
    inst = api.load_instance(doc)
    index = build_contingency(inst)
    if edit is not None:
        edit(index)
    where = tmp_path / "c"
    write_contingency(index, where, inst)
    return where


@pytest.mark.parametrize("multiplier", [0.0, 1e30, 123.456])
def test_an_edited_certificate_never_yields_a_worse_plan_as_optimal(tmp_path, multiplier):
    """An edited multiplier, with the stored plan kept or made worse: the answer is always the
    optimum (proven by the full proof, or solved afresh), never the worse plan."""
    doc = generate_instance(5, gpus=512, jobs=8, failed_nodes=0)
    fresh = {}
    for worse in (False, True):
        def edit(index, worse=worse):
            index["multipliers"] = {t: multiplier for t in index["multipliers"]}
            if worse:
                for stored in index["plans"].values():
                    jid = max(stored["counts"], key=stored["counts"].get)
                    stored["counts"][jid] = 0  # suspend the largest job: a plan, but not an optimal one
        where = _index_dir(tmp_path / str(worse), doc, edit)
        index = json.loads((where / contingency.INDEX_FILE).read_text())
        for key, entry in list(index["failures"].items())[:6]:
            failed = api.load_instance(_with_failure(doc, entry["failed_nodes"]))
            if key not in fresh:
                fresh[key] = api.solve(failed).objective
            plan = api.solve(failed, contingency=where, contingency_use="always")
            assert plan.objective == pytest.approx(fresh[key], rel=1e-9)
            if worse:
                assert plan.solver.name == "dp"
                assert "not proven optimal" in plan.solver.options["contingency_fallback"]


@pytest.mark.parametrize("bad", [-1.0, "x", [1.0]])
def test_a_malformed_multiplier_is_bad_input(tmp_path, bad):
    doc = generate_instance(5, gpus=256, jobs=4, failed_nodes=0)
    where = _index_dir(tmp_path, doc, lambda index: index.update(multipliers={"a800": bad}))
    failed = api.load_instance(_with_failure(doc, [doc["cluster"]["nodes"][1]["id"]]))
    with pytest.raises(InvalidInstanceError, match="multipliers"):
        api.solve(failed, contingency=where, contingency_use="always")


def _estimate(problem, where: Path) -> tuple[float, float]:
    """(warm, cold) CPU estimates from the sizes, by the documented formula."""
    w = contingency.WARM_CPU_SECONDS
    entries = sum(len(j.counts) for j in problem.jobs)
    keyed = (where / contingency.KEYED_FILE).is_file()
    size = (where / contingency.INDEX_FILE).stat().st_size
    warm = w["fixed"] + w["node"] * len(problem.state.nodes) + w["entry"] * entries \
        + w["keyed_byte" if keyed else "whole_byte"] * size
    return warm, contingency.DP_CPU_SECONDS_PER_ENTRY * entries


def test_the_cost_rule_follows_the_sizes_both_ways(tmp_path, monkeypatch):
    """The rule's decision is the estimate's (from sizes, never a clock): with the measured rates a DP
    solve of this instance is cheaper than reading and checking, so the index is not read; with a DP
    rate per entry above the warm path's (as for a dearer solve), it is used."""
    doc = generate_instance(3, gpus=1024, jobs=16, failed_nodes=0)
    where = _index_dir(tmp_path, doc)
    index = json.loads((where / contingency.INDEX_FILE).read_text())
    failed = api.load_instance(_with_failure(doc, next(iter(index["failures"].values()))["failed_nodes"]))
    warm, cold = _estimate(build_problem(failed), where)
    assert warm > cold  # the measured rates at this size
    plan = api.solve(failed, contingency=where)
    assert plan.solver.name == "dp"
    assert "estimated cheaper" in plan.solver.options["contingency_fallback"]
    assert api.solve(failed, contingency=where, contingency_use="always").solver.name == "contingency"
    assert api.solve(failed, contingency=index).solver.name == "contingency"  # held in memory: always tried

    monkeypatch.setattr(contingency, "DP_CPU_SECONDS_PER_ENTRY", 2 * contingency.WARM_CPU_SECONDS["entry"] + 1e-3)
    warm, cold = _estimate(build_problem(failed), where)
    assert warm <= cold
    assert api.solve(failed, contingency=where).solver.name == "contingency"
    (where / contingency.KEYED_FILE).unlink()  # the whole index to read: dearer per byte
    warm, cold = _estimate(build_problem(failed), where)
    assert (api.solve(failed, contingency=where).solver.name == "contingency") == (warm <= cold)


@pytest.mark.parametrize("name,solver", [("ip-max-nodes.json", None), ("jagged-128-4jobs.json", "milp")])
def test_the_cost_rule_reads_the_index_when_the_cold_solve_is_not_the_dp(tmp_path, name, solver):
    """Constraints the DP cannot express, or an IP backend asked for (the cold solve an IP): the index
    is read, and used wherever its plan is proven."""
    if solver is not None:
        pytest.importorskip("highspy")
    doc = json.loads((ROOT / "instances" / name).read_text())
    doc.pop("event", None)
    where = _index_dir(tmp_path, doc)
    index = json.loads((where / contingency.INDEX_FILE).read_text())
    if not index["failures"]:
        pytest.skip("no stored failure (no IP backend installed)")
    used = 0
    for entry in index["failures"].values():
        failed = api.load_instance(_with_failure(doc, entry["failed_nodes"]))
        problem = build_problem(failed)
        assert contingency.cold_is_cheaper(problem, solver, where) is None
        plan = api.solve(failed, solver=solver, contingency=where)
        assert "estimated" not in (plan.solver.options or {}).get("contingency_fallback", "")
        used += plan.solver.name == "contingency"
    assert used


def test_a_skipped_index_loads_none_of_its_modules(tmp_path):
    """When the rule solves afresh, the index's reader, SQLite and the contingency solver are not imported."""
    doc = generate_instance(3, gpus=256, jobs=4, failed_nodes=0)
    where = _index_dir(tmp_path, doc)
    path = tmp_path / "failed.json"
    path.write_text(dumps(_with_failure(doc, [doc["cluster"]["nodes"][2]["id"]])))
    code = ("import sys; from unicron_plan import api; "
            f"p = api.solve({str(path)!r}, contingency={str(where)!r}); "
            "print(p.solver.name, *(m in sys.modules for m in ('sqlite3', 'unicron_plan.schema.contingency', "
            "'unicron_plan.solvers.contingency')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == ["dp", "False", "False", "False"]


def test_a_key_listed_both_as_planned_and_infeasible_is_bad_input(tmp_path):
    doc = generate_instance(5, gpus=256, jobs=4, failed_nodes=0)
    where = _index_dir(tmp_path, doc, lambda index: None)
    index = json.loads((where / contingency.INDEX_FILE).read_text())
    key, entry = next(iter(index["failures"].items()))
    index["infeasible"][key] = {"failed_nodes": entry["failed_nodes"], "reason": "edited"}
    (where / contingency.INDEX_FILE).write_text(json.dumps(index))  # (the keyed file no longer matches it)
    failed = api.load_instance(_with_failure(doc, [doc["cluster"]["nodes"][1]["id"]]))
    with pytest.raises(InvalidInstanceError, match="listed in failures too"):
        api.solve(failed, contingency=where, contingency_use="always")


def test_a_multiplier_too_large_to_use_falls_back_without_warnings(tmp_path):
    import warnings

    doc = generate_instance(5, gpus=256, jobs=4, failed_nodes=0)
    where = _index_dir(tmp_path, doc, lambda index: index.update(multipliers={"a800": 1e308}))
    failed = api.load_instance(_with_failure(doc, [doc["cluster"]["nodes"][1]["id"]]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (lam x y overflowed with a numpy warning on stderr)
        plan = api.solve(failed, contingency=where, contingency_use="always")
    assert plan.objective == pytest.approx(api.solve(failed).objective, rel=1e-9)
