"""The plan's tail (placing, checking, writing) read off the placement arrays in C calls, against the
per-entry reads they replaced: the writer's join of every placement entry (io._placed_text) against
its loop over the jobs, the arrays' splits (a dict per job cut from one iterator) against list reads,
place_held's splits against place's, the entries' order against lexsort, ArrayTable.get against
Mapping.get, and whole plans on random instances of every curve kind, running and queued jobs, mixed
fleets: the same text as json.dumps of the models."""

from __future__ import annotations

import dataclasses
import json
import random

import numpy as np
import pytest

from unicron_plan import api
from unicron_plan.core.problem import build_problem
from unicron_plan.io import _BETWEEN, _placed_text, dumps
from unicron_plan.plan.placement import place, place_held
from unicron_plan.plan.validate import validate_plan
from unicron_plan.schema.placements import PlacementArrays, cut_dicts
from unicron_plan.solvers import SolverOptions, get_solver
from unicron_plan.tools.generate import ADVERSARIAL, generate_instance

KINDS = ("synthetic", "model") + ADVERSARIAL


def _placed_text_loop(parts, ends, prefixes, quoted, close):
    """The writer's text as it was written before: an entry string per entry, a join per job."""
    entries = [p + q for p, q in zip(prefixes, quoted)]
    between, last = close + _BETWEEN, close + "\n        }"
    out = [parts[0]]
    for a, b, part in zip(ends, ends[1:], parts[1:]):
        out.append('\n      "placement": [\n' + between.join(entries[a:b]) + last + '\n      ],\n' if b > a
                   else '\n      "placement": [],\n')
        out.append(part)
    return "".join(out)


def _word(rng: random.Random) -> str:
    return "".join(rng.choice('ab"\\\n{}[],: 0') for _ in range(rng.randint(0, 6)))


def test_the_join_of_every_entry_writes_the_text_of_the_loop_over_the_jobs():
    rng = random.Random(7)
    for case in range(3000):
        jobs = rng.choice([0, 1, 2, 3, rng.randint(4, 40)])
        empty = rng.random()  # the share of jobs without an entry (all, none, some)
        sizes = [0 if rng.random() < empty else rng.randint(1, 5) for _ in range(jobs)]
        ends = [0, *np.cumsum(sizes, dtype=np.int64).tolist()] if jobs else [0]
        total = ends[-1]
        parts = [_word(rng) for _ in range(jobs + 1)]
        prefixes = [rng.choice(["P1", "P8", "", "x"]) for _ in range(total)]
        quoted = [_word(rng) for _ in range(total)]
        close = rng.choice(['"', ""])
        got = _placed_text(parts, ends, prefixes, quoted, close)
        assert got == _placed_text_loop(parts, ends, prefixes, quoted, close), (case, sizes)


def test_node_ids_and_splits_are_the_list_reads():
    rng = np.random.default_rng(3)
    for case in range(400):
        n_names = int(rng.integers(1, 50))
        names = [f"n{k}" + ("\u00e9" if k % 7 == 0 else "") for k in range(n_names)]
        jobs = int(rng.integers(0, 12))
        sizes = rng.integers(0, 6, size=jobs)
        starts = np.zeros(jobs + 1, dtype=np.int64)
        np.cumsum(sizes, out=starts[1:])
        total = int(starts[-1])
        node = rng.integers(-n_names, n_names, size=total).astype(np.int64)  # repeats; negatives as a list reads them
        gpus = rng.integers(-3, 2**40, size=total).astype(np.int64)
        arrays = PlacementArrays(names, starts, node, gpus)
        ids = list(map(names.__getitem__, node.tolist()))
        assert arrays.node_ids() == ids and all(type(i) is str for i in arrays.node_ids())
        ends, counts = starts.tolist(), gpus.tolist()
        assert arrays.splits() == [dict(zip(ids[a:b], counts[a:b])) for a, b in zip(ends, ends[1:])]
        assert [list(s.items()) for s in arrays.splits()] == [  # (the order, a repeated node's last count)
            list(dict(zip(ids[a:b], counts[a:b])).items()) for a, b in zip(ends, ends[1:])]
    for starts in ([1, 3, 4], [0, 3, 1, 4], [2, 2], [0, 4, 4, 2]):  # not a running total from 0: slices as before
        node, gpus = np.array([0, 1, 0, 1]), np.array([5, 6, 7, 8])
        arrays = PlacementArrays(["a", "b"], np.array(starts), node, gpus)
        ids = ["a", "b", "a", "b"]
        assert arrays.splits() == [dict(zip(ids[a:b], gpus.tolist()[a:b])) for a, b in zip(starts, starts[1:])]
    arrays = PlacementArrays(["a", "b"], np.array([0, 1]), np.array([2]), np.array([1]))
    with pytest.raises(IndexError):  # a position beyond the names, as the list read raised
        arrays.node_ids()
    assert cut_dicts(iter([("a", 1), ("b", 2), ("a", 3)]), [0, 2, 1, 0]) == [{}, {"a": 1, "b": 2}, {"a": 3}, {}]


def _documents(count: int, seed: int):
    rng = random.Random(seed)
    for k in range(count):
        yield generate_instance(k + 100 * seed, gpus=rng.choice([256, 512, 1024]), jobs=rng.randint(1, 14),
                                max_counts=rng.randint(3, 40), failed_nodes=rng.randint(0, 3),
                                curves=KINDS[k % len(KINDS)], placement=rng.choice(["shuffled", "ordered"]))


def _with_idle(problem):
    """``problem`` with its state's idle GPUs listed and its previous splits in cluster order (as the
    simulator's states are): place_held then keeps a staying job's previous split itself."""
    state = problem.state
    order = state.order
    previous = {jid: dict(sorted(split.items(), key=lambda t: order[t[0]])) for jid, split in state.previous.items()}
    idle = state.usable_gpus()
    for split in previous.values():
        for nid, g in split.items():
            idle[nid] -= g
    idle = {nid: g for nid, g in idle.items() if g}
    return dataclasses.replace(problem, state=dataclasses.replace(state, previous=previous, idle=idle, in_order=True))


@pytest.mark.parametrize("seed", range(3))
def test_place_held_gives_places_splits_on_every_kind(seed):
    kept = 0
    for doc in _documents(2 * len(KINDS), seed):
        instance = api.load_instance(doc)
        problem = build_problem(instance)
        raw = get_solver("auto")(problem, SolverOptions(time_limit_seconds=30))
        placed = problem.with_types(raw.types) if raw.types else problem
        for p in (placed, _with_idle(placed)):
            want = place(p, raw.counts)
            got, held = place_held(p, raw.counts)
            assert [(j, list(s.items())) for j, s in got.items()] == [(j, list(s.items())) for j, s in want.items()]
            assert held is not None and held.splits() == [want[j.id] for j in p.jobs]
            previous = p.state.previous
            kept += sum(got[j] is previous.get(j) for j in got)
    assert kept  # (some stays kept as the previous split itself: the branch that passes over their entries)


@pytest.mark.parametrize("seed", range(3))
def test_solved_plans_are_written_as_json_dumps_writes_their_models(seed):
    for doc in _documents(2 * len(KINDS), seed + 10):
        instance = api.load_instance(doc)
        for limit in (None, 2.0):
            plan = api.solve(instance, time_limit_seconds=limit)
            assert plan.placement_arrays() is not None
            text = dumps(plan)
            assert validate_plan(instance, plan).valid
            plan.make_placements()  # (then written from its models)
            assert plan.placement_arrays() is None
            assert text == dumps(plan)
            assert text == json.dumps(plan.model_dump(mode="json", exclude_none=True), indent=2, sort_keys=True) + "\n"


def test_the_order_by_job_then_position_is_lexsorts():
    from unicron_plan.plan.placement import by_job_then_position

    rng = np.random.default_rng(5)
    combined = 0
    for case in range(600):
        n = int(rng.integers(0, 30))
        lengths = rng.integers(0, 8, size=n).astype(np.int64)
        size = int(rng.choice([1, 2, 7, 100, 2**40, 2**62]))
        total = int(lengths.sum())
        high = min(size, 2**62)
        pos = rng.integers(0, min(high, 50) if rng.random() < 0.5 else high, size=total).astype(np.int64)  # ties too
        if total and rng.random() < 0.15:
            pos[int(rng.integers(total))] = rng.choice([-1, size, -(2**62)])  # outside 0..size - 1
        job = np.repeat(np.arange(n, dtype=np.int64), lengths)
        want = np.lexsort((pos, job))
        got = by_job_then_position(pos, lengths, size)
        assert got.tolist() == want.tolist(), (case, lengths, pos, size)
        combined += bool(total) and n * size < 2**62 and 0 <= int(pos.min()) and int(pos.max()) < size
    assert combined > 100  # (the one stable sort taken, and lexsort for the others)


def test_an_array_tables_get_is_the_mappings():
    from collections.abc import Mapping

    from unicron_plan.schema.instance import ArrayTable

    rng = np.random.default_rng(9)
    for case in range(200):
        counts = np.unique(rng.integers(1, 60, size=int(rng.integers(1, 12)))).astype(np.int64)
        table = ArrayTable(counts, rng.random(len(counts)) * 100)
        for key in [*range(-1, 62), True, False, np.int64(3), np.int32(5), 3.0, "3", None, 2**70]:
            for default in (None, -1.5):
                got, want = table.get(key, default), Mapping.get(table, key, default)
                assert type(got) is type(want) and got == want, (case, key)
        assert table.get(int(counts[0])) == table[int(counts[0])]
