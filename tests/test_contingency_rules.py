"""Contingency indexes exact under the full rules: mixed fleets with node-level and churn constraints and
hysteresis (against an enumeration, or the mixed solver where enumeration cannot express a rule), nodes
already down as a whole, and the solver's contract (its module, dp's public steps)."""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest

from brute_nodes import combine, local_splits, node_options, problem_without_precheck
from randgen_ip import add_constraints
from unicron_plan import api
from unicron_plan.plan.contingency import build_contingency, candidate_failures
from unicron_plan.tools.mixedgen import mixed_instance


def _with_failure(doc: dict, failed: list[str]) -> dict:
    d = copy.deepcopy(doc)
    d["event"] = {"kind": "failure", "failed_nodes": list(failed)}
    return d


def _off_type_options(job, terms, problem, nodes, racks, t: str, hit: bool) -> list:
    """brute_nodes' options of one job on GPU type ``t`` other than its own: every count above 0 is a
    change that pays the transition (the job moves), under tp, max_nodes, same_rack and, unhit,
    min_gain_fraction; re-derived from the instance."""
    table = {int(k): v for k, v in job.throughput.by_type[t].items()}
    there = dataclasses.replace(terms, gpu_type=t, table=table, off_type=True)
    tp = job.tp or 1
    stay = terms.f_of(job.current.gpus) * problem.d_run
    caps = [n.healthy_after if n.gpu_type == t else 0 for n in nodes]
    out = []
    for c in sorted(k for k in table if 0 < k <= problem.capacity.get(t, 0) and k % tp == 0):
        g = there.gain_of(c)
        if job.min_gain_fraction is not None and not hit and g < (1 + job.min_gain_fraction) * stay:
            continue
        out += [(g, 1, a, c, t) for a in local_splits(job, c, caps, tp, racks)]
    return out


def mixed_node_brute(instance) -> float | None:
    """The optimal objective of a (possibly mixed-fleet) instance by exhaustive enumeration of every job's
    GPU type, count and split over the nodes (tests/brute_nodes.py on the job's own type, every other
    type it names added), or None when no plan fits."""
    problem = problem_without_precheck(instance)
    state = problem.state
    nodes = [n for n in state.nodes.values() if not n.drained and n.healthy_after > 0]
    racks = [n.rack if n.rack is not None else ("node", n.id) for n in nodes]
    own = node_options(instance, problem, nodes)
    options = []
    for job, terms, mine in zip(instance.jobs, problem.jobs, own):
        opts = [(g, ch, a, c, job.throughput.gpu_type) for g, ch, a, c in mine]
        if job.throughput.by_type and not job.pinned:
            for t in job.throughput.by_type:
                if t != job.throughput.gpu_type:
                    opts += _off_type_options(job, terms, problem, nodes, racks, t, state.hit[job.id])
        options.append([o[:4] for o in opts])
    limit = instance.max_changed_jobs if instance.max_changed_jobs is not None else len(options)
    found = combine(options, tuple(n.healthy_after for n in nodes), limit)
    return None if found is None else found[0]


def _reference(doc: dict, failed: list[str]) -> float | None:
    """The failure's optimum by enumeration of types, counts and node splits (None: no plan)."""
    return mixed_node_brute(api.load_instance(_with_failure(doc, failed)))


def _mixed_doc(seed: int) -> dict:
    rng = np.random.default_rng(seed)
    doc = mixed_instance(seed, types=2, nodes_per_type=2, gpus_per_node=4, jobs=3, event=False,
                         constraints=True)
    for job in doc["jobs"]:  # hit jobs' moves to another type must not meet their hysteresis
        if rng.random() < 0.5:
            job["min_gain_fraction"] = float(rng.choice([0.05, 0.5, 2.0]))
    return add_constraints(rng, doc, node_level=True, churn=True, p=0.4)


def _check(doc: dict) -> int:
    """Every key of the index holds its failure's optimum (or is infeasible as the reference says);
    returns the number of entries checked."""
    index = build_contingency(api.load_instance(doc), racks=True)
    keys = set(index["failures"]) | set(index["infeasible"])
    left = set(index["stats"].get("not_stored", {}))  # no proven optimum: solved when they happen
    assert keys | left == {k for k, _ in candidate_failures(api.load_instance(doc), racks=True)}
    assert len(left) <= len(keys)
    for key, entry in index["infeasible"].items():
        assert _reference(doc, entry["failed_nodes"]) is None, key
    for key, entry in index["failures"].items():
        want = _reference(doc, entry["failed_nodes"])
        assert want is not None, key
        assert entry["objective"] == pytest.approx(want, rel=1e-9, abs=1e-6), (key, doc)
    return len(keys)


@pytest.mark.parametrize("block", range(4))
def test_mixed_fleet_index_is_exact_under_every_rule(block):
    # 4 x 15 random two-type instances with tp, max_nodes, same_rack, max_changed_jobs, pinned and
    # min_gain_fraction; the index built before this fix stored objectives above the optimum (churn,
    # locality, tp ignored) and below it (a hit job's move filtered by its hysteresis)
    checked = sum(_check(_mixed_doc(1000 + 15 * block + k)) for k in range(15))
    assert checked > 0


def test_hit_job_moving_to_another_type_is_exempt_from_its_hysteresis():
    # Job a runs on both t0 nodes; n0 fails. Staying on t0 it keeps 4 GPUs (worth little); on t1 it is
    # worth much more. Its min_gain_fraction 5 would forbid the move of an unhit job, not of a hit one.
    spec = {"peak_tflops": 312.0, "memory_gib": 80.0, "intra_node_gbps": 600.0, "inter_node_gbps": 25.0}
    doc = {
        "schema_version": "1", "name": "hit-move",
        "cluster": {"gpu_types": {"t0": spec, "t1": spec},
                    "nodes": [{"id": "n0", "gpu_type": "t0", "gpus": 4}, {"id": "n1", "gpu_type": "t0", "gpus": 4},
                              {"id": "m0", "gpu_type": "t1", "gpus": 4}, {"id": "m1", "gpu_type": "t1", "gpus": 4}]},
        "jobs": [{"id": "a", "weight": 1.0, "min_gain_fraction": 5.0,
                  "throughput": {"gpu_type": "t0", "by_type": {"t0": {"4": 10.0, "8": 100.0},
                                                               "t1": {"8": 300.0}}},
                  "current": {"gpus": 8, "nodes": ["n0", "n1"]}}],
        "cost": {"expected_run_seconds": 36000.0, "default_transition_seconds": 60.0},
    }
    index = build_contingency(api.load_instance(doc))
    entry = index["failures"]["node:n0"]
    assert index["plans"][entry["plan"]] == {"counts": {"a": 8}, "types": {"a": "t1"}}
    assert entry["objective"] == pytest.approx(_reference(doc, ["n0"]))


def _down_node_doc() -> dict:
    """8 nodes, n00001 with every GPU failed already (its jobs moved off), a binding max_changed_jobs."""
    from unicron_plan.tools.generate import generate_instance

    doc = generate_instance(3, gpus=64, jobs=4, failed_nodes=0)
    doc["cluster"]["nodes"][1]["failed_gpus"] = list(range(8))
    for job in doc["jobs"]:
        if "n00001" in job["current"]["nodes"]:
            job["current"] = {"gpus": 0, "nodes": []}
    doc["max_changed_jobs"] = 1
    return doc


def test_a_node_down_as_a_whole_with_a_binding_churn_limit():
    # the binding max_changed_jobs sends every failure to auto; without it, the grouped DP
    doc = _down_node_doc()
    for churn in (True, False):
        if not churn:
            doc.pop("max_changed_jobs")
        inst = api.load_instance(doc)
        index = build_contingency(inst, racks=True)
        names = {n for e in (*index["failures"].values(), *index["infeasible"].values()) for n in e["failed_nodes"]}
        assert "n00001" not in names  # `solve` refuses an event naming it: no key may
        assert "node:n00002" in index["failures"]
        for key, entry in index["failures"].items():  # every stored key is an event solve accepts
            plan = api.solve(api.load_instance(_with_failure(doc, entry["failed_nodes"])), contingency=index)
            assert plan.objective == pytest.approx(entry["objective"], rel=1e-9), key


def test_cli_contingency_with_a_down_node_and_binding_churn_exits_0(tmp_path):
    from typer.testing import CliRunner

    from unicron_plan.cli import app
    from unicron_plan.io import dumps

    doc = _down_node_doc()
    path = tmp_path / "i.json"
    path.write_text(dumps(doc))
    res = CliRunner().invoke(app, ["contingency", str(path), "--out", str(tmp_path / "c"), "-q", "--racks"])
    assert res.exit_code == 0, res.output


def test_no_module_outside_solvers_uses_dps_private_functions():
    import ast
    from pathlib import Path

    import unicron_plan

    root = Path(unicron_plan.__file__).parent
    for path in root.rglob("*.py"):
        if path.parent.name == "solvers":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "unicron_plan.solvers.dp":
                assert not [a.name for a in node.names if a.name.startswith("_")], path
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "dp":
                assert not node.attr.startswith("_") or node.attr.startswith("__"), (path, node.attr)


@pytest.mark.parametrize("placement", ["shuffled", "ordered"])
@pytest.mark.parametrize("scale", [0.0, 1.0, float("inf")], ids=["alone", "by-cost", "tables"])
def test_groups_alone_or_on_the_tables_equal_a_fresh_solve(placement, scale, monkeypatch):
    # Every group solved on its own (scale 0), on the prefix/suffix tables (inf), or each where its
    # work is smaller (1): every stored entry is the optimum, with jobs placed either way
    from unicron_plan.core.problem import build_problem
    from unicron_plan.solvers import contingency as solver, dp
    from unicron_plan.tools.generate import generate_instance

    monkeypatch.setattr(solver, "ALONE_COST_SCALE", scale)
    monkeypatch.setattr(solver, "DIRECT_GROUPS", 0)
    for kind in ("identical", "near-linear"):
        doc = generate_instance(5, gpus=512, jobs=12, nodes_per_rack=8, demand=1.3, curves=kind,
                                placement=placement, failed_nodes=0)
        index = build_contingency(api.load_instance(doc), racks=True)
        assert index["stats"]["method"] == "groups"
        for key, entry in index["failures"].items():
            problem = build_problem(api.load_instance(_with_failure(doc, entry["failed_nodes"])))
            expected = dp.solve(problem).objective
            assert entry["objective"] == pytest.approx(expected, rel=1e-12), (kind, key)
            assert problem.objective(index["plans"][entry["plan"]]["counts"]) == pytest.approx(expected, rel=1e-12)


def test_can_beat_agrees_with_the_dp_optimum_on_random_options():
    # The proof of a stored plan: never True at the optimum, always True below it (whole-node steps
    # and single GPUs, tight and loose capacities)
    from unicron_plan.solvers import dp

    rng = np.random.default_rng(7)
    for trial in range(300):
        step = int(rng.choice([1, 8]))
        options = []
        for _ in range(int(rng.integers(1, 7))):
            counts = np.unique(rng.integers(1, 9, size=int(rng.integers(1, 5)))) * step
            gains = np.sort(rng.uniform(0, 100, size=len(counts))) if rng.random() < 0.5 else \
                rng.uniform(0, 100, size=len(counts))
            options.append(dp.pareto_arrays(np.concatenate([[0], counts]), np.concatenate([[0.0], gains])))
        capacity = int(rng.integers(0, 40)) * step + int(rng.integers(0, step))
        _, best = dp.solve_options(options, capacity)
        assert not dp.can_beat(options, capacity, best), trial
        assert dp.can_beat(options, capacity, best - 1e-3 * (abs(best) + 1.0)), trial
        assert dp.can_beat(options, capacity, best - 1e-3 * (abs(best) + 1.0), search=False), trial
