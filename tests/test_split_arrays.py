"""The jobs' previous splits held as arrays (cluster.SplitArrays, made by the checks) against the
dicts they come from: the same splits; the placement's stays and the placement itself (Problem.stays,
placement.place_held) the same with and without them, on random instances, random counts and
instances where the arrays must not be made or used."""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest

from unicron_plan import api
from unicron_plan.core.problem import build_problem
from unicron_plan.io import dumps
from unicron_plan.plan.assemble import to_plan
from unicron_plan.plan.placement import place_held
from unicron_plan.solvers import SolverOptions, get_solver
from unicron_plan.tools.generate import ADVERSARIAL, generate_instance

KINDS = ("synthetic", "model") + ADVERSARIAL
RUNNING = tuple(k for k in KINDS if not k.startswith("queued"))


def _doc(k: int, rng: random.Random) -> dict:
    kinds = KINDS if rng.random() < 0.2 else RUNNING  # (the queued kinds hold no GPU: no split)
    doc = generate_instance(k, gpus=rng.choice([128, 256, 512]), jobs=rng.randint(1, 14),
                            max_counts=rng.randint(3, 30), failed_nodes=rng.randint(0, 3),
                            curves=rng.choice(kinds), placement=rng.choice(["shuffled", "ordered"]))
    nodes = doc["cluster"]["nodes"]
    for node in nodes:  # some GPUs failed before the event: splits that skip or shorten nodes
        if rng.random() < 0.15:
            node["failed_gpus"] = sorted(rng.sample(range(node["gpus"]), rng.randint(1, node["gpus"])))
    for job in doc["jobs"]:
        cur = job["current"]
        if cur["gpus"] and rng.random() < 0.3:  # fewer GPUs than its nodes hold: a node of the list unused
            counts = sorted(int(c) for c in _counts(job) if 0 < int(c) <= cur["gpus"])
            if counts:
                cur["gpus"] = rng.choice(counts)
        if cur["nodes"] and rng.random() < 0.2:
            rng.shuffle(cur["nodes"])
    return doc


def _counts(job: dict):
    tp = job["throughput"]
    if tp.get("compact") is not None:
        return tp["compact"]["counts"]
    return list((tp.get("tflops") or {}).keys())


def _loadable(doc: dict):
    try:
        instance = api.load_instance(doc)
        return instance, build_problem(instance)
    except Exception:  # (a spoiled instance the checks refuse: not this test's subject)
        return None


def _instances(count: int, seed: int):
    rng = random.Random(seed)
    made = 0
    k = seed * 1000
    while made < count:
        got = _loadable(_doc(k, rng))
        k += 1
        if got is not None:
            made += 1
            yield rng, *got


def _without(problem):
    """The same problem, its state without the arrays (the dict path)."""
    return dataclasses.replace(problem, state=dataclasses.replace(problem.state, split_arrays=None))


def _stay_counts(problem) -> dict[str, int]:
    """Every job not hit stays (its previous count), the others stop."""
    return {j.id: 0 if j.hit else j.x for j in problem.jobs}


def _stays_by_lookup(problem, counts) -> None:
    """``problem._stays(counts)`` takes the dict path (no arrays) and leaves the free GPUs the problem
    without the arrays leaves, in the same order."""
    got = problem._stays(counts)
    assert got[3] is None
    assert list(got[0].items()) == list(_without(problem)._stays(counts)[0].items())


def _count_sets(problem, rng: random.Random):
    raw = get_solver("auto")(problem, SolverOptions(time_limit_seconds=30))
    yield raw.counts
    yield _stay_counts(problem)
    for _ in range(4):  # the solver's counts, some jobs at 0, some back at their previous count
        counts = dict(raw.counts)
        for j in problem.jobs:
            r = rng.random()
            if r < 0.25:
                counts[j.id] = 0
            elif r < 0.6 and not j.hit:
                counts[j.id] = j.x
        yield counts


def _split_items(result):
    return [(jid, list(split.items())) for jid, split in result.items()]


def test_the_arrays_are_the_splits():
    seen = 0
    for _, instance, problem in _instances(60, 1):
        state = problem.state
        arrays = state.previous_arrays()
        if arrays is None:
            continue
        seen += 1
        ids = state.node_ids()
        for k, job in enumerate(instance.jobs):
            a, b = int(arrays.starts[k]), int(arrays.starts[k + 1])
            split = state.previous[job.id]
            assert [ids[p] for p in arrays.pos[a:b].tolist()] == list(split)
            assert arrays.gpus[a:b].tolist() == list(split.values())
    assert seen >= 40


@pytest.mark.parametrize("seed", range(4))
def test_stays_and_placement_the_same_with_and_without_the_arrays(seed):
    used = 0
    for rng, instance, problem in _instances(25, seed + 10):
        plain = _without(problem)
        assert plain.state.previous_arrays() is None
        for counts in _count_sets(problem, rng):
            free, result, movers, taken = problem._stays(counts)
            free0, result0, movers0, taken0 = plain._stays(counts)
            assert taken0 is None
            used += taken is not None
            assert list(free.items()) == list(free0.items())
            assert _split_items(result) == _split_items(result0)
            assert [j.id for j in movers] == [j.id for j in movers0]
            assert [list(x.items()) for x in problem.stays(counts)[0:1]] == [list(free0.items())]
            try:
                out, held = place_held(problem, counts)
            except Exception as e:  # (counts the cluster cannot hold: both paths refuse them alike)
                with pytest.raises(type(e)):
                    place_held(plain, counts)
                continue
            out0, held0 = place_held(plain, counts)
            assert _split_items(out) == _split_items(out0)
            assert (held is None) == (held0 is None)
            if held is not None:
                for a, b in zip((held.starts, held.node, held.gpus), (held0.starts, held0.node, held0.gpus)):
                    assert np.array_equal(a, b) and a.dtype == b.dtype
    assert used >= 30  # (of 150 count sets: 38-65 use the arrays)


@pytest.mark.parametrize("seed", range(2))
def test_plans_the_same_bytes(seed):
    for _, instance, problem in _instances(12, seed + 20):
        raw = get_solver("auto")(problem, SolverOptions(time_limit_seconds=30))
        a = dumps(to_plan(problem, raw, "auto", 0.0))
        b = dumps(to_plan(_without(problem), raw, "auto", 0.0))
        assert a == b


def test_arrays_not_made_for_shared_nodes():
    rng = random.Random(5)
    checked = 0
    for k in range(40):
        doc = generate_instance(k, gpus=256, jobs=rng.randint(2, 8), max_counts=10, failed_nodes=0,
                                curves="synthetic")
        holders = [j for j in doc["jobs"] if j["current"]["nodes"]]
        if len(holders) < 2:
            continue
        a, b = holders[0], holders[1]
        b["current"]["nodes"].append(a["current"]["nodes"][0])  # a node two jobs share
        got = _loadable(doc)
        if got is None:
            continue
        checked += 1
        assert got[1].state.previous_arrays() is None
    assert checked >= 10


def test_arrays_not_used_for_another_previous():
    for _, instance, problem in _instances(10, 30):
        state = problem.state
        if state.previous_arrays() is None:
            continue
        other = dataclasses.replace(state, previous=dict(state.previous))
        assert other.previous_arrays() is None
        emptied = dataclasses.replace(state, previous={**state.previous,
                                                       next(iter(state.previous)): {}})
        assert emptied.previous_arrays() is None


def test_arrays_not_used_for_other_jobs():
    """A problem whose jobs are not the instance's at their indexes: the dict path."""
    checked = 0
    for rng, instance, problem in _instances(40, 40):
        previous = problem.state.previous
        jobs = list(problem.jobs)
        pairs = [(a, b) for a in range(len(jobs)) for b in range(a + 1, len(jobs))
                 if jobs[a].x and jobs[b].x and not jobs[a].hit and not jobs[b].hit
                 and len(previous[jobs[a].id]) == len(previous[jobs[b].id])
                 and list(previous[jobs[a].id]) != list(previous[jobs[b].id])]
        if problem.state.previous_arrays() is None or not pairs:
            continue
        a, b = pairs[0]  # two jobs with splits of one size, each at the other's index
        jobs[a], jobs[b] = dataclasses.replace(jobs[a], index=jobs[b].index), dataclasses.replace(jobs[b], index=jobs[a].index)
        _stays_by_lookup(dataclasses.replace(problem, jobs=jobs), _stay_counts(problem))
        checked += 1
    assert checked >= 5


def test_arrays_not_used_for_an_index_outside_the_instance():
    checked = 0
    for rng, instance, problem in _instances(20, 50):
        if problem.state.previous_arrays() is None:
            continue
        counts = _stay_counts(problem)
        kept = [k for k, j in enumerate(problem.jobs) if counts[j.id] and not j.hit]
        if not kept:
            continue
        for index in (len(instance.jobs), -1):
            jobs = list(problem.jobs)
            jobs[kept[0]] = dataclasses.replace(jobs[kept[0]], index=index)
            _stays_by_lookup(dataclasses.replace(problem, jobs=jobs), counts)
        checked += 1
    assert checked >= 5


def test_usable_array_is_usable_gpus():
    """ClusterState.usable_array against usable_gpus, also with records the checks never make (a drained
    node still counting healthy GPUs, a node back to all its GPUs)."""
    from unicron_plan.core.cluster import NodeHealth
    checked = 0
    for rng, instance, problem in _instances(15, 60):
        state = problem.state
        assert state.usable_array().tolist() == list(state.usable_gpus().values())
        ids = state.node_ids()
        changed = dict(state.changed or {})
        touched = list(state.touched)
        for nid in rng.sample(ids, min(3, len(ids))):
            rec = state.nodes[nid]
            drained = rng.random() < 0.5
            changed[nid] = NodeHealth(nid, rec.gpu_type, rec.rack, rec.gpus, rec.gpus, rec.gpus, drained, drained)
            if nid not in touched:
                touched.append(nid)
        odd = dataclasses.replace(state, changed=changed, touched=touched)
        assert odd.usable_array().tolist() == list(odd.usable_gpus().values())
        checked += 1
    assert checked == 15
