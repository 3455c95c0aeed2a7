"""The whole-array forms of the steps after the read against the job-by-job forms they replace: the
(GPU type, rack) codes of the nodes, the flat tables, which jobs moved, and the validator's checks on a
plan held as arrays whose entries are in any order within a job."""

from __future__ import annotations

import copy
import random

import numpy as np
import pytest

from unicron_plan import api
from unicron_plan.core import cost
from unicron_plan.core.cluster import NodeArrays, _node_arrays
from unicron_plan.core.problem import FlatTables, build_problem, flat_tables, resolve_tables
from unicron_plan.plan.assemble import _moved_on_arrays, to_plan
from unicron_plan.plan.placement import HeldPlacement, place, place_held
from unicron_plan.plan.validate import _clean_jobs, _Held, validate_plan
from unicron_plan.schema import Placement
from unicron_plan.schema.nodes import NodeColumns
from unicron_plan.schema.placements import PlacementArrays
from unicron_plan.solvers import SolverOptions, get_solver
from unicron_plan.tools.generate import ADVERSARIAL, generate_instance

KINDS = ("synthetic", "model") + ADVERSARIAL


def _instances(count: int, seed: int):
    rng = random.Random(seed)
    for k in range(count):
        doc = generate_instance(k + 7 * seed, gpus=rng.choice([256, 512, 1024]), jobs=rng.randint(2, 12),
                                max_counts=rng.randint(5, 40), failed_nodes=rng.randint(0, 3),
                                curves=KINDS[k % len(KINDS)], placement=rng.choice(["shuffled", "ordered"]))
        for job in doc["jobs"]:
            if rng.random() < 0.3:
                job["weight"] = rng.choice([0.0, 0.5, 3.0, 1e-3, 7.25])
        yield api.load_instance(doc)


def _pairs_one_by_one(types, racks, gpus) -> NodeArrays:
    """The node arrays with a code per (GPU type, rack) pair found one node at a time, as a dict."""
    groups: dict = {}
    codes = [groups.setdefault(pair, len(groups)) for pair in zip(types, racks)]
    kinds = list(dict.fromkeys(t for t, _ in groups))
    n = len(codes)
    return NodeArrays(np.array(gpus, dtype=np.int64).reshape(n), np.asarray(codes, dtype=np.int64).reshape(n), groups,
                      kinds, np.asarray([kinds.index(t) for t, _ in groups], dtype=np.int64).reshape(len(groups)))


def test_the_nodes_group_codes_from_columns_are_those_of_the_pairs():
    rng = random.Random(1)
    for _ in range(400):
        n = rng.randint(0, 40)
        kinds = ["a", "b", "c", "d"][:rng.randint(1, 4)]
        types = [rng.choice(kinds) for _ in range(n)]
        racks = [rng.choice([None, "r1", "r2", "r3", "r10"]) for _ in range(n)]
        gpus = [rng.randint(0, 8) for _ in range(n)]
        columns = NodeColumns([f"n{k}" for k in range(n)], types, racks, gpus, {}, {}, {})
        want = _pairs_one_by_one(types, racks, columns.gpus)
        for got in (_node_arrays(types, racks, columns.gpus),
                    _node_arrays(columns.types, columns.racks, columns.gpus, columns.type_codes())):
            assert list(got.groups.items()) == list(want.groups.items())  # (the codes in order of first node)
            assert got.types == want.types
            for a, b in ((got.gpus, want.gpus), (got.group, want.group), (got.group_type, want.group_type)):
                assert a.dtype == b.dtype and np.array_equal(a, b)


def _flat_job_by_job(instance, tables) -> FlatTables:
    """The flat tables written one job at a time (weight x TFLOP/s of each job's slice)."""
    from unicron_plan.core.problem import _table_arrays

    arrays = [_table_arrays(job, tables[job.id]) for job in instance.jobs]
    off = np.zeros(len(arrays) + 1, dtype=np.int64)
    np.cumsum([len(keys) + 1 for keys, _ in arrays], out=off[1:])
    counts, f = np.zeros(int(off[-1]), dtype=np.int64), np.zeros(int(off[-1]))
    for job, (keys, vals), lo, hi in zip(instance.jobs, arrays, off[:-1].tolist(), off[1:].tolist()):
        counts[lo + 1:hi] = keys
        f[lo + 1:hi] = cost.waf(np.float64(job.weight), np.asarray(vals, dtype=float))
    return FlatTables(counts, f, off)


@pytest.mark.parametrize("seed", range(2))
def test_flat_tables_are_the_tables_weighted_job_by_job(seed):
    for instance in _instances(12, seed):
        tables = resolve_tables(instance)[0]
        got, want = flat_tables(instance, tables), _flat_job_by_job(instance, tables)
        assert np.array_equal(got.off, want.off)
        assert got.counts.dtype == want.counts.dtype and got.counts.tobytes() == want.counts.tobytes()
        assert got.f.dtype == want.f.dtype and got.f.tobytes() == want.f.tobytes()  # (the same bytes: -0.0 too)


def _solved(instance):
    problem = build_problem(instance)
    raw = get_solver("auto")(problem, SolverOptions(time_limit_seconds=30))
    return problem, raw


@pytest.mark.parametrize("seed", range(2))
def test_moved_on_the_arrays_is_moved_job_by_job(seed):
    rng = random.Random(seed)
    compared = 0
    for instance in _instances(10, seed + 20):
        problem, raw = _solved(instance)
        for trial in range(4):
            counts = dict(raw.counts)
            if trial:  # other counts the cluster holds: some jobs kept, some moved
                for j in problem.jobs:
                    if rng.random() < 0.3 and len(j.counts):
                        counts[j.id] = int(rng.choice(j.counts.tolist()))
            try:
                placement, held = place_held(problem, counts)
            except Exception:  # (counts over the capacity)
                continue
            if held is None:
                continue
            assert isinstance(placement, HeldPlacement) and dict(placement) == place(problem, counts)
            ys = [counts[j.id] for j in problem.jobs]
            got = _moved_on_arrays(problem, held, ys)
            want = [cost.is_moved(j.x, y, placement[j.id], problem.state.previous.get(j.id, {}))
                    for j, y in zip(problem.jobs, ys)]
            assert got is not None and got == want
            compared += 1
    assert compared >= 10


def _reordered(plan, rng: random.Random) -> tuple[list[list[tuple[str, int]]], list[list[str]]]:
    """Each job's entries (and its listed nodes) in another order: still a valid plan."""
    pairs, nodes = [], []
    for job in plan.jobs:
        entries = [(p.node, p.gpus) for p in job.placement]
        rng.shuffle(entries) if rng.random() < 0.5 else entries.reverse()
        pairs.append(entries)
        listed = list(job.nodes)
        if rng.random() < 0.5:
            listed = [n for n, _ in entries]
        nodes.append(listed)
    return pairs, nodes


@pytest.mark.parametrize("seed", range(2))
def test_the_validator_on_entries_in_any_order_reports_what_it_reports_on_the_models(seed):
    rng = random.Random(seed)
    fast = 0
    for instance in _instances(10, seed + 40):
        problem, raw = _solved(instance)
        made = to_plan(problem, raw, "auto", 0.0, arrays=False)
        ids = problem.state.node_ids()
        at = {n: k for k, n in enumerate(ids)}
        for _ in range(3):
            pairs, nodes = _reordered(made, rng)
            models = copy.deepcopy(made)
            for job, entries, listed in zip(models.jobs, pairs, nodes):
                job.placement = [Placement(node=n, gpus=g) for n, g in entries]
                job.nodes = listed
            held = copy.deepcopy(models)
            starts = np.zeros(len(pairs) + 1, dtype=np.int64)
            np.cumsum([len(p) for p in pairs], out=starts[1:])
            arrays = PlacementArrays(ids, starts, np.asarray([at[n] for p in pairs for n, _ in p], dtype=np.int64),
                                     np.asarray([g for p in pairs for _, g in p], dtype=np.int64))
            held.hold_placements(arrays)
            derived = problem.derived()
            got, want = validate_plan(instance, held, derived=derived), validate_plan(instance, models, derived=derived)
            assert (got.valid, got.problems, got.objective) == (want.valid, want.problems, want.objective)
            assert got.valid
            state = problem.state
            from unicron_plan.core.cost import d_run_seconds

            fast += _clean_jobs(instance, held, derived[0], state, _Held(arrays, state),
                                d_run_seconds(instance, state.nodes_in_service()), None) is not None
    assert fast  # (the whole-plan checks passed such plans without the job-by-job loop)


def test_held_checks_fall_back_where_the_arrays_do_not_decide():
    instance = next(_instances(1, 5))
    problem, raw = _solved(instance)
    plan = to_plan(problem, raw, "auto", 0.0)
    arrays = plan.placement_arrays()
    held = _Held(arrays, problem.state)
    assert held.distinct() is True and held.sums() == [j.gpus for j in plan.jobs]
    names = list(problem.state.node_ids()) + ["ghost"]
    node = arrays.node.copy()
    if len(node):
        node[0] = len(names) - 1  # a node outside the cluster: decided on the splits
        other = _Held(PlacementArrays(names, arrays.starts, node, arrays.gpus), problem.state)
        assert other.distinct() is None
    huge = _Held(PlacementArrays(arrays.names, arrays.starts, arrays.node, arrays.gpus * 0 + 2**61), problem.state)
    assert len(arrays.gpus) < 2 or huge.sums() is None


def test_positions_on_short_keys_are_the_dict_lookups():
    from unicron_plan.core.checks import _positions

    rng = random.Random(3)
    keyed = 0
    for _ in range(3000):
        alphabet = rng.choice(["ab\x00c\u00e9Z9-", "abcZ9-", "ab", "n0123456789"])
        longest = rng.choice([8, 8, 10])
        ids = list(dict.fromkeys("".join(rng.choice(alphabet) for _ in range(rng.randint(0, longest)))
                                 for _ in range(rng.randint(1, 30))))
        if rng.random() < 0.1:
            ids.append(rng.choice(ids))  # a repeated id: the dict's last position
        names = [rng.choice(ids) if rng.random() < 0.7 else
                 "".join(rng.choice(alphabet) for _ in range(rng.randint(0, longest))) for _ in range(rng.randint(0, 30))]
        at = dict(zip(ids, range(len(ids))))
        got = _positions(ids, at, names)
        assert got.dtype == np.int64 and got.tolist() == [at.get(s, -1) for s in names]
        keyed += len(at) == len(ids) and bool(names) and all(len(s) <= 8 and s.isascii() and "\x00" not in s
                                                            for s in ids + names)
    assert keyed > 300
