"""The validator's whole-plan pass (plan.validate._clean_jobs) against its job-by-job loop: on the library's
instances and random ones, their solved plans and random corruptions of them (placements held as arrays,
so that the pass is tried), the same report: validity, the problems in order, the objective's bits and the
recomputed reasons."""

from __future__ import annotations

import random
import struct

import numpy as np
import pytest

from unicron_plan import api, load_instance
from unicron_plan.io import dumps
from unicron_plan.plan import validate
from unicron_plan.schema import Plan
from unicron_plan.schema.placements import PlacementArrays
from unicron_plan.tools.generate import generate_instance

from conftest import ROOT

_PATHS = sorted((ROOT / "instances").glob("*.json"))


def _held(plan: Plan, entries: "list[list[tuple[str, int]]]", names: "list[str] | None" = None) -> None:
    """Hold ``entries`` (each job's (node, GPUs) in order, nodes may repeat) as the plan's placement arrays."""
    names = names if names is not None else sorted({n for job in entries for n, _ in job})
    at = {n: k for k, n in enumerate(names)}
    starts = np.zeros(len(entries) + 1, dtype=np.int64)
    np.cumsum([len(e) for e in entries], out=starts[1:])
    node = np.array([at[n] for e in entries for n, _ in e], dtype=np.int64)
    gpus = np.array([g for e in entries for _, g in e], dtype=np.int64)
    plan.hold_placements(PlacementArrays(names, starts, node, gpus))


def _copy(plan: Plan) -> "tuple[Plan, list]":
    """A fresh copy of ``plan`` (its jobs' placements held as arrays) and each job's entries."""
    fresh = Plan.model_validate_json(dumps(plan))
    entries = [[(p.node, p.gpus) for p in job.placement] for job in fresh.jobs]
    _held(fresh, entries)
    return fresh, entries


def _report(inst, plan, loop: bool, monkeypatch):
    with monkeypatch.context() as m:
        if loop:
            m.setattr(validate, "_clean_jobs", lambda *a, **k: None)
        else:
            real = validate._clean_jobs
            m.setattr(validate, "_clean_jobs", lambda *a, **k: _taken.append(real(*a, **k)) or _taken[-1])
        r = validate.validate_plan(inst, plan)
    return r.valid, r.problems, struct.pack("<d", r.objective), r.reasons


_taken: list = []


def _corrupt(rng: random.Random, inst, plan: Plan, entries: list) -> None:
    """One random change of ``plan`` (its fields, or its entries held again as arrays)."""
    jobs = plan.jobs
    k = rng.randrange(len(jobs))
    pj = jobs[k]
    kind = rng.randrange(24)
    node_ids = [n.id for n in inst.cluster.nodes]
    if kind == 0:
        pj.gpus = pj.gpus + rng.choice([-1, 1, 8])
    elif kind == 1:
        pj.action = rng.choice(["keep", "grow", "shrink", "restart", "suspend", "resume", "idle"])
    elif kind == 2:
        pj.waf_tflops = pj.waf_tflops * (1 + rng.choice([1e-12, 1e-6, 1e-3]))
    elif kind == 3:
        pj.transition_penalty = pj.transition_penalty + rng.choice([1e-9, 1.0, 1e6])
    elif kind == 4:
        pj.transition_seconds = rng.choice([None, 0.0, 30.0, pj.transition_seconds])
    elif kind == 5:
        pj.gain = rng.choice([None, (pj.gain or 0.0) * (1 + 1e-12), (pj.gain or 0.0) + 1.0, float("nan")])
    elif kind == 6:
        pj.hit = rng.choice([None, True, False])
    elif kind == 7:
        pj.previous_gpus = pj.previous_gpus + 1
    elif kind == 8:
        nodes = list(pj.nodes)
        rng.shuffle(nodes)
        pj.nodes = nodes if rng.random() < 0.7 else nodes[1:] + rng.sample(node_ids, 1)
    elif kind == 9 and entries[k]:  # a node listed twice
        node, g = entries[k][0]
        entries[k] = entries[k] + [(node, 0 if rng.random() < 0.5 else g)]
        _held(plan, entries)
    elif kind == 10:  # an unknown node
        entries[k] = entries[k] + [("no-such-node", 1)]
        _held(plan, entries)
    elif kind == 11 and entries[k]:  # a share moved to another node
        node, g = entries[k][0]
        entries[k] = [(rng.choice(node_ids), g)] + entries[k][1:]
        pj.nodes = list(dict.fromkeys(n for n, _ in entries[k]))
        _held(plan, entries)
    elif kind == 12:  # the jobs in another order
        order = list(range(len(jobs)))
        rng.shuffle(order)
        plan.jobs = [jobs[i] for i in order]
        _held(plan, [entries[i] for i in order])
    elif kind == 13 and len(jobs) > 1:  # a job left out
        plan.jobs = jobs[:k] + jobs[k + 1:]
        _held(plan, entries[:k] + entries[k + 1:])
    elif kind == 14:
        types = list(inst.cluster.gpu_types)
        pj.gpu_type = rng.choice([None, inst.jobs[k].throughput.gpu_type] + types)
    elif kind == 15:
        pj.placement_left_to = rng.choice([None, "scheduler", "x"])
    elif kind == 16:
        plan.objective = plan.objective + rng.choice([1e-12, 1.0])
    elif kind == 17:
        pj.waf_tflops = rng.choice([float("inf"), float("nan"), 0.0, 10**20])
    elif kind == 18:  # the same plan, its nodes from another list of names
        _held(plan, entries, names=list(reversed(sorted({n for e in entries for n, _ in e}))) + ["extra"])
    elif kind == 19:
        pj.id = rng.choice([jobs[0].id, "other"])
    elif kind == 20 and entries[k]:  # one GPU more on a node, the count kept
        node, g = entries[k][0]
        entries[k] = [(node, g + 1)] + entries[k][1:]
        _held(plan, entries)
    elif kind == 21 and len(entries[k]) > 1:  # one GPU moved between two of its nodes (a tp or a pinned job's rule)
        (a, g), (b, h) = entries[k][:2]
        entries[k] = [(a, g - 1), (b, h + 1)] + entries[k][2:]
        _held(plan, entries)
    elif kind == 22:  # a node with no GPU added (a max_nodes or a same_rack job's rule)
        extra = rng.choice(node_ids)
        if extra not in pj.nodes:
            entries[k] = entries[k] + [(extra, 0)]
            pj.nodes = list(pj.nodes) + [extra]
            _held(plan, entries)


def _instances():
    out = [load_instance(p) for p in _PATHS]
    for seed in range(6):
        out.append(load_instance(generate_instance(seed, gpus=256 * (1 + seed % 3), jobs=8 * (1 + seed % 3),
                                                   nodes_per_rack=8)))
    return out


_INSTANCES = None


def _cases():
    global _INSTANCES
    if _INSTANCES is None:
        _INSTANCES = [(inst, api.solve(inst, time_limit_seconds=10)) for inst in _instances()]
    return _INSTANCES


@pytest.mark.parametrize("seed", range(3))
def test_the_whole_plan_pass_reports_as_the_loop(seed, monkeypatch):
    rng = random.Random(seed)
    taken = differs = 0
    for inst, solved in _cases():
        for trial in range(12):
            plan, entries = _copy(solved)
            for _ in range(0 if trial == 0 else rng.randrange(1, 3)):
                try:
                    _corrupt(rng, inst, plan, entries)
                except (ValueError, TypeError):  # (a change the model refuses)
                    pass
            _taken.clear()
            fast = _report(inst, plan, False, monkeypatch)
            slow = _report(inst, plan, True, monkeypatch)
            assert fast == slow, (inst.name, fast[1], slow[1])
            taken += bool(_taken) and _taken[0] is not None
            differs += not fast[0]
            if trial == 0:
                assert fast[0], (inst.name, fast[1])
    assert taken > 40 and differs > 100  # (clean plans taken by the pass, and many refused)


def test_a_solved_plan_takes_the_pass_with_the_same_objective(monkeypatch):
    inst = load_instance(generate_instance(3, gpus=512, jobs=16, nodes_per_rack=8))
    plan = api.solve(inst)
    assert plan.placement_arrays() is not None
    _taken.clear()
    fast = _report(inst, plan, False, monkeypatch)
    assert _taken and _taken[0] is not None and fast[0]
    assert fast == _report(inst, plan, True, monkeypatch)


def test_isclose_is_math_isclose():
    import math

    rng = random.Random(5)
    special = [0.0, -0.0, 1e-6, -1e-6, 1.0, 1.0 + 1e-9, 1e300, -1e300, 1.7976931348623157e308, float("inf"),
               float("-inf"), float("nan"), 5e-324, 2.0**53]
    a = special + [rng.uniform(-10, 10) * 10 ** rng.randrange(-12, 12) for _ in range(3000)]
    b = [x * (1 + rng.choice([0, 1e-10, 1e-9, 2e-9, 1e-6])) + rng.choice([0, 1e-7, 1e-6, 2e-6]) for x in a]
    b = b + special * 0
    pairs = list(zip(a, b)) + [(x, y) for x in special for y in special]
    got = validate._isclose(np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs]))
    want = [math.isclose(x, y, rel_tol=validate.REL_TOL, abs_tol=1e-6) for x, y in pairs]
    assert got.tolist() == want


def test_moved_on_arrays_is_is_moved():
    """``_moved`` against :func:`cost.is_moved` on the dicts: 400 random sets of splits (zero shares, the
    same pairs in another order, one share or one node changed, a GPU moved between two nodes, extra and
    missing nodes, counts kept or not)."""
    from types import SimpleNamespace

    from unicron_plan.core import cost
    from unicron_plan.core.cluster import SplitArrays

    rng = random.Random(7)
    for _ in range(400):
        n, m = rng.randrange(1, 30), rng.randrange(0, 12)
        names = [f"n{k}" for k in range(n)]
        now, before = [], []
        for _ in range(m):
            prev = {p: rng.randrange(1, 9) for p in rng.sample(range(n), rng.randrange(0, min(n, 5) + 1))}
            split = dict(prev)
            change = rng.randrange(7)
            if change == 1 and split:
                split[rng.choice(list(split))] += rng.choice([-1, 1])
            elif change == 2:
                split[rng.randrange(n)] = rng.randrange(0, 3)
            elif change == 3 and split:
                del split[rng.choice(list(split))]
            elif change == 5 and len(split) > 1:  # one GPU moved between two nodes: the same count
                a, b = rng.sample(list(split), 2)
                split[a], split[b] = split[a] - 1, split[b] + 1
            elif change == 4:
                items = list(split.items())
                rng.shuffle(items)
                split = dict(items)
            now.append(split)
            before.append(prev)
        xs = [sum(p.values()) for p in before]
        ys = [sum(s.values()) if rng.random() < 0.8 else rng.randrange(0, 20) for s in now]
        starts = np.zeros(m + 1, dtype=np.int64)
        np.cumsum([len(s) for s in now], out=starts[1:])
        p_starts = np.zeros(m + 1, dtype=np.int64)
        np.cumsum([len(p) for p in before], out=p_starts[1:])
        arrays = SimpleNamespace(starts=starts, gpus=np.array([g for s in now for g in s.values()], dtype=np.int64))
        held = SimpleNamespace(arrays=arrays, order={k: k for k in range(n)}, lengths=[len(s) for s in now],
                               pos=np.array([p for s in now for p in s], dtype=np.int64))
        previous = SplitArrays({}, p_starts, np.array([p for b in before for p in b], dtype=np.int64),
                               np.array([g for b in before for g in b.values()], dtype=np.int64))
        want = [cost.is_moved(x, y, {names[p]: g for p, g in s.items()}, {names[p]: g for p, g in b.items()})
                for x, y, s, b in zip(xs, ys, now, before)]
        assert validate._moved(held, previous, xs, ys) == want
    assert validate._moved(held, None, xs, ys) is None

