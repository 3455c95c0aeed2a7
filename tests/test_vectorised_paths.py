"""Paths rewritten to work on all nodes or jobs at once give exactly what the per-item loops they
replaced gave: the loops are kept here as references and compared on random inputs."""

from __future__ import annotations

import copy
import json
import random
from types import SimpleNamespace as NS

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import ROOT
from unicron_plan import api
from unicron_plan.core import cost
from unicron_plan.core.checks import check_instance
from unicron_plan.core.cluster import _solo_split
from unicron_plan.core.problem import build_problem, flat_tables, resolve_tables
from unicron_plan.errors import InfeasibleError, InvalidInstanceError
from unicron_plan.schema import Instance
from unicron_plan.tools.generate import generate_instance


def _solo_split_loop(jobs, healthy_before):
    """Each job alone on its nodes fills them in the listed order, whole tp groups per node."""
    out = {}
    for job in jobs:
        left, split, unit = job.current.gpus, {}, job.tp or 1
        for n in job.current.nodes:
            take = min(left, healthy_before[n] // unit * unit)
            if take:
                split[n] = take
            left -= take
        out[job.id] = split if left == 0 else {}
    return out


@settings(max_examples=300)
@given(seed=st.integers(0, 2**32 - 1))
def test_solo_split_is_the_fill_in_listed_order(seed):
    rng = random.Random(seed)
    healthy = {f"n{i}": rng.randint(0, 8) for i in range(rng.randint(1, 40))}
    ids = list(healthy)
    rng.shuffle(ids)
    jobs, k = [], 0
    for j in range(rng.randint(0, 8)):
        take = rng.randint(0, 6)
        gpus = rng.choice([rng.randint(1, 48), 10**30])  # also a count no cluster holds
        jobs.append(NS(id=f"j{j}", tp=rng.choice([None, 1, 2, 4, 8]), current=NS(gpus=gpus, nodes=ids[k:k + take])))
        k += take
    got, want = _solo_split(jobs, healthy), _solo_split_loop(jobs, healthy)
    assert got == want and all(list(got[j]) == list(want[j]) for j in want)  # the nodes' order too


def _instance(seed: int) -> Instance:
    rng = random.Random(seed)
    doc = generate_instance(seed, gpus=rng.choice([256, 1024]), jobs=rng.choice([4, 12]),
                            curves=rng.choice(["synthetic", "four-types", "linear-step"]),
                            placement=rng.choice(["shuffled", "ordered"]), failed_nodes=rng.choice([0, 1, 2]))
    for job in doc["jobs"]:
        job["weight"] = rng.choice([0.0, 0.5, 1.0, 3.25])
    running = [j for j in doc["jobs"] if j["current"]["nodes"]]
    if seed % 2 and len(running) >= 2:  # two jobs share a node: the split by a flow
        a, b = running[0], running[1]
        b["current"]["nodes"] = list(dict.fromkeys(b["current"]["nodes"] + a["current"]["nodes"][:1]))
    return Instance.model_validate(doc)


def _stays_loop(problem, counts):
    free = problem.state.usable_gpus()
    result = {j.id: {} for j in problem.jobs}
    movers = []
    for j in problem.jobs:
        y = counts[j.id]
        if y == 0:
            continue
        if (y == j.x and not j.hit and not j.off_type) or j.pinned:
            for nid, g in problem.state.previous[j.id].items():
                result[j.id][nid] = g
                free[nid] -= g
        else:
            movers.append(j)
    return free, result, movers


@pytest.mark.parametrize("seed", range(12))
def test_stays_and_flat_tables_are_the_per_job_loops(seed):
    inst = _instance(seed)
    try:
        problem = build_problem(inst)
    except InvalidInstanceError:  # a shared node that cannot hold both jobs: nothing to compare
        return
    rng = random.Random(seed)
    for _ in range(5):  # counts that keep, change or suspend jobs
        counts = {j.id: int(rng.choice([j.x, j.x, int(j.counts[-1]), 0])) for j in problem.jobs}
        free, result, movers = problem.stays(counts)
        free0, result0, movers0 = _stays_loop(problem, counts)
        assert list(free.items()) == list(free0.items()) and result == result0 and movers == movers0
    tables, _ = resolve_tables(inst)
    flat = flat_tables(inst, tables)
    for i, job in enumerate(inst.jobs):
        counts, vals = job.throughput.table_arrays()
        lo, hi = int(flat.off[i]), int(flat.off[i + 1])
        assert flat.counts[lo:hi].tolist() == [0] + counts.tolist()
        assert flat.f[lo:hi].tobytes() == np.concatenate([[0.0], cost.waf(job.weight, vals)]).tobytes()


def test_shared_nodes_in_stays_take_the_loop():
    """Two staying jobs on one node (j1 and j2 share n1): the free GPUs subtract both."""
    doc = json.loads((ROOT / "instances" / "small-shared-node-failure.json").read_text())
    doc["event"]["failed_nodes"] = ["n3"]
    problem = build_problem(Instance.model_validate(doc))
    counts = {j.id: j.x for j in problem.jobs}
    free, result, _ = problem.stays(counts)
    assert "n1" in result["j1"] and "n1" in result["j2"]
    assert list(free.items()) == list(_stays_loop(problem, counts)[0].items())


def test_an_unknown_node_type_names_the_first_node_of_it():
    doc = generate_instance(0, gpus=256, jobs=4, curves="four-types")
    doc = copy.deepcopy(doc)
    nodes = doc["cluster"]["nodes"]
    nodes[7]["gpu_type"] = "z100"
    nodes[3]["gpu_type"] = "y100"
    nodes[9]["gpu_type"] = "y100"
    with pytest.raises(InvalidInstanceError, match=r"cluster\.nodes\[3\]\.gpu_type: 'y100' is not in"):
        check_instance(Instance.model_validate(doc))
    with pytest.raises(InvalidInstanceError, match=r"cluster\.nodes\[3\]\.gpu_type"):
        api.solve(doc)


def test_used_gpus_per_node_are_the_summed_splits():
    from collections import Counter

    from unicron_plan.plan.reasons import JobFacts, _used

    def facts(splits):
        return [JobFacts(f"j{k}", "keep", 0, 0, False, False, False, 0.0, 0.0, 0.0, 0.0, s, {}) for k, s in
                enumerate(splits)]

    rng = random.Random(3)
    for _ in range(200):
        splits = [{f"n{rng.randint(0, 12)}": rng.randint(1, 8) for _ in range(rng.randint(0, 4))} for _ in range(5)]
        summed = Counter()
        for s in splits:
            summed.update(s)
        assert dict(_used(facts(splits))) == dict(summed)


def _healthy_loop(instance):
    """The healthy cluster's records, totals and per-type ids, one node at a time."""
    from unicron_plan.core.cluster import NodeHealth

    nodes = {n.id: NodeHealth(n.id, n.gpu_type, n.rack, n.gpus, n.gpus, n.gpus, False, False)
             for n in instance.cluster.nodes}
    cap = {t: 0 for t in instance.cluster.gpu_types}
    by_type: dict = {}
    for h in nodes.values():
        cap[h.gpu_type] += h.gpus
        by_type.setdefault(h.gpu_type, []).append(h.id)
    return nodes, cap, sum(1 for h in nodes.values() if h.gpus > 0), {t: frozenset(v) for t, v in by_type.items()}


@pytest.mark.parametrize("seed", range(12))
def test_healthy_cluster_from_columns_is_the_per_node_loop(seed):
    from unicron_plan.core.cluster import healthy_nodes, node_arrays

    inst = _instance(seed)
    rng = random.Random(seed)
    for node in inst.cluster.nodes:  # racks missing on some nodes, sizes varied
        if rng.random() < 0.3:
            node.rack = None
        node.gpus = rng.choice([node.gpus, 1, 4, 8])
    seen = {}
    if seed % 3:  # the checks' ids and positions, reused (a later check may refuse the varied sizes)
        try:
            check_instance(inst, nodes_seen=seen)
        except InvalidInstanceError:
            pass
        assert list(seen) == ["ids", "order", "columns"]
    healthy = healthy_nodes(inst, **seen)
    assert not seen or (healthy.order is seen["order"] and healthy.columns.ids is seen["ids"])
    nodes, cap, in_service, by_type = _healthy_loop(inst)
    assert list(healthy.nodes.items()) == list(nodes.items())
    assert all(type(h) is type(nodes[i]) for i, h in healthy.nodes.items())
    assert healthy.capacity == cap and list(healthy.capacity) == list(cap) and healthy.in_service == in_service
    assert list(healthy.order.items()) == [(nid, k) for k, nid in enumerate(nodes)]
    assert list(healthy.usable.items()) == [(nid, h.gpus) for nid, h in nodes.items()]
    assert healthy.ids_by_type == by_type and list(healthy.ids_by_type) == list(by_type)
    got, want = healthy.arrays, node_arrays(nodes)
    assert got.gpus.tolist() == want.gpus.tolist() and got.group.tolist() == want.group.tolist()
    assert got.groups == want.groups and list(got.groups) == list(want.groups)
    assert got.types == want.types and got.group_type.tolist() == want.group_type.tolist()
    assert got.gpus.dtype == want.gpus.dtype == got.group.dtype == np.int64


def test_placements_made_at_once_are_the_models_made_one_by_one():
    from unicron_plan.schema import Placement, placements

    rng = random.Random(3)
    wheres = [{f"n{rng.randint(0, 50)}": rng.randint(1, 8) for _ in range(rng.randint(0, 5))} for _ in range(40)]
    placements._PLACEMENTS.clear()
    for _ in range(2):  # made, then found in the shared cache
        got = placements.placement_models(wheres)
        want = [[Placement(node=n, gpus=g) for n, g in w.items()] for w in wheres]
        assert got == want
        assert all(p.model_fields_set == {"node", "gpus"} for ps in got for p in ps)
    with pytest.raises(Exception):
        got[0][0].gpus = 3  # frozen, as made one by one


@pytest.mark.parametrize("node, message", [
    ({"failed_gpus": [8]}, r"failed_gpus\[0\]: GPU index 8 is outside 0\.\.7"),
    ({"failed_gpus": [1, 1]}, r"failed_gpus\[1\]: GPU index 1 is listed twice"),
    ({"expected_repair_seconds": 60.0}, "expected_repair_seconds: the node has no failed GPU to repair"),
])
def test_node_rules_still_name_the_field(node, message):
    doc = generate_instance(0, gpus=64, jobs=2)
    doc["cluster"]["nodes"][2].update(node)
    with pytest.raises(InvalidInstanceError, match=message) as err:
        api.load_instance(doc)
    assert "cluster.nodes.2" in str(err.value) or "cluster.nodes[2]" in str(err.value)


def _listed_loop(jobs, ids, types, healthy):
    """Per job: whether its node list has an unknown node, a node twice or one of another type; the
    healthy GPUs before the event of its nodes (where none is unknown)."""
    of_type = {t: {i for i, ty in zip(ids, types) if ty == t} for t in set(types)}
    wrong, held = [], []
    for job in jobs:
        nodes = job.current.nodes
        ok = len(set(nodes)) == len(nodes) and of_type.get(job.throughput.gpu_type, set()).issuperset(nodes)
        wrong.append(not ok)
        held.append(sum(healthy.get(n, 0) for n in nodes))
    return wrong, held


@settings(max_examples=300)
@given(seed=st.integers(0, 2**32 - 1))
def test_listed_nodes_are_the_per_job_tests(seed):
    from unicron_plan.core.checks import _listed_nodes

    rng = random.Random(seed)
    kinds = ["a", "b", "c"][:rng.randint(1, 3)]
    ids = [f"n{i}" for i in range(rng.randint(1, 30))]
    types = [rng.choice(kinds) for _ in ids]
    healthy = {i: rng.randint(0, 8) for i in ids}
    pool = ids + ["ghost", "n99"]
    jobs = [NS(id=f"j{j}", current=NS(nodes=[rng.choice(pool) for _ in range(rng.randint(0, 5))]),
               throughput=NS(gpu_type=rng.choice(kinds + ["zz"])))
            for j in range(rng.randint(0, 8))]
    pos, hb, wrong, held = _listed_nodes(NS(jobs=jobs), ids, types, kinds, healthy)
    want_wrong, want_held = _listed_loop(jobs, ids, types, healthy)
    assert wrong == want_wrong
    assert [h for h, w in zip(held, wrong) if not w] == [h for h, w in zip(want_held, wrong) if not w]
    index = {n: k for k, n in enumerate(ids)}
    assert pos.tolist() == [index.get(n, -1) for job in jobs for n in job.current.nodes]
    assert hb.tolist() == [healthy[i] for i in ids]


@pytest.mark.parametrize("seed", range(8))
def test_previous_split_from_the_checks_positions_is_the_one_looked_up(seed):
    from unicron_plan.core.cluster import previous_distribution

    inst = _instance(seed)
    ids = [n.id for n in inst.cluster.nodes]
    healthy = {n.id: n.gpus - len(n.failed_gpus) for n in inst.cluster.nodes}
    index = {n: k for k, n in enumerate(ids)}
    pos = np.asarray([index[n] for j in inst.jobs for n in j.current.nodes], dtype=np.int64)
    hb = np.asarray([healthy[i] for i in ids], dtype=np.int64)
    got, want = previous_distribution(inst, healthy, (pos, hb)), previous_distribution(inst, healthy)
    assert got == want and all(list(got[j]) == list(want[j]) for j in want)


@np.errstate(over="ignore", invalid="ignore")
def _tabulate_before(instance, state, tables, layouts):
    """``tabulate`` as it was before it was built in place: one temporary array per operation."""
    from unicron_plan.core import constraints
    from unicron_plan.core.problem import JobTerms, Problem, _table_arrays, _x_entries
    flat = flat_tables(instance, tables)
    d_run = cost.d_run_seconds(instance, state.nodes_in_service())
    capacity = state.capacity()
    m = len(instance.jobs)
    sizes = np.diff(flat.off)
    ids = [job.id for job in instance.jobs]
    types = [job.throughput.gpu_type for job in instance.jobs]
    x_list = [job.current.gpus for job in instance.jobs]
    xs = np.asarray(x_list, dtype=np.int64).reshape(m)
    cap = np.fromiter(map(capacity.__getitem__, types), dtype=np.int64, count=m)
    hit = np.fromiter(map(state.hit.__getitem__, ids), dtype=bool, count=m)
    exiting = np.fromiter(map(state.exiting.__contains__, ids), dtype=bool, count=m)
    f_x = _x_entries(flat, xs)[0]
    for i in np.flatnonzero(np.isnan(f_x)).tolist():
        job = instance.jobs[i]
        f_x[i] = float(cost.waf(job.weight, tables[job.id][x_list[i]]))
    f_x = f_x.tolist()
    d_repeat = [0.0] * m
    if cost.uses_job_horizon(instance):
        h = state.nodes_in_service()
        repair = cost.pending_repair_seconds(instance) if instance.cost.horizon == "lifetime" else None
        terms = [cost.job_transition_terms(instance, job, state.previous.get(job.id, {}), h, repair_seconds=repair)
                 for job in instance.jobs]
        d_trans, d_repeat = [t[0] for t in terms], [t[1] for t in terms]
    else:
        d_trans = [cost.d_trans_seconds(instance, job) for job in instance.jobs]
    pen = [a * b for a, b in zip(f_x, d_trans)]
    resized = flat.counts != np.repeat(xs, sizes)
    changed = (resized | np.repeat(hit, sizes)) & ~np.repeat(exiting, sizes)
    gains_all = flat.f * d_run - np.where(changed, np.repeat(np.asarray(pen, dtype=float), sizes), 0.0)
    if any(d_repeat):
        again = np.asarray(f_x, dtype=float) * np.asarray(d_repeat, dtype=float)
        gains_all -= np.where(changed & resized, np.repeat(again, sizes), 0.0)
    fits = bad = np.zeros(0, dtype=np.int64)
    if m:
        starts = flat.off[:-1]
        fits = np.add.reduceat((flat.counts <= np.repeat(cap, sizes)).astype(np.int64), starts)
        fits = np.where(exiting, 1, fits)
        beyond = np.arange(len(gains_all)) - np.repeat(starts, sizes) >= np.repeat(fits, sizes)
        bad = ~np.logical_and.reduceat(np.isfinite(gains_all) | beyond, starts)
    overflow = np.flatnonzero(bad | ~np.isfinite(np.asarray(pen, dtype=float)))
    if len(overflow):
        i = int(overflow[0])
        job = instance.jobs[i]
        vals = _table_arrays(job, tables[job.id])[1]
        raise InvalidInstanceError(
            f"jobs[{i}]", f"weight {job.weight} x TFLOP/s (up to {vals.max() if len(vals) else 0}) x "
                          f"D_run {d_run} s (or x D_trans {d_trans[i]} s) overflows a float; use smaller units")
    jobs = []
    for i, job, lo, n_fit, x, exits, job_hit in zip(range(m), instance.jobs, flat.off[:-1].tolist(), fits.tolist(),
                                                     x_list, exiting.tolist(), hit.tolist()):
        hi = lo + n_fit
        counts, f, gains = flat.counts[lo:hi], flat.f[lo:hi], gains_all[lo:hi]
        tp, pinned, min_gain = job.tp, job.pinned, job.min_gain_fraction
        if not exits and ((tp is not None and tp > 1) or pinned or (min_gain is not None and not job_hit)):
            keep = constraints.allowed_mask(job, counts, gains, x, job_hit, f_x[i], d_run, exits)
            if not keep.all():
                counts, f, gains = counts[keep], f[keep], gains[keep]
        jobs.append(JobTerms(i, ids[i], types[i], job.weight, x, job_hit, d_trans[i], f_x[i],
                             tables[ids[i]], counts, f, gains, layouts.get(ids[i], {}), d_run,
                             tp=tp or 1, pinned=bool(pinned) and not exits, max_nodes=job.max_nodes,
                             same_rack=bool(job.same_rack), min_gain_fraction=None if exits else min_gain,
                             exiting=exits, d_repeat=d_repeat[i]))
    return jobs


def _terms(job):
    return (job.id, job.x, job.hit, job.d_trans, job.f_x, job.exiting, job.d_repeat, job.pinned,
            job.counts.tobytes(), job.f.tobytes(), job.gains.tobytes())


@pytest.mark.parametrize("seed", range(40))
def test_gains_built_in_place_are_the_gains_of_one_array_per_operation(seed):
    """The job terms of ``tabulate`` (resized and changed entries on byte arrays, the penalty subtracted
    in place, the prefixes that fit counted without index arrays) are those of the code it replaced,
    byte for byte, with hit and leaving jobs, every horizon, several GPU types and overflowing weights."""
    import dataclasses
    from unicron_plan.core.problem import tabulate
    rng = random.Random(seed)
    doc = generate_instance(seed, gpus=rng.choice([256, 1024]), jobs=rng.choice([1, 4, 12]),
                            curves=rng.choice(["synthetic", "four-types", "linear-step", "identical"]),
                            placement=rng.choice(["shuffled", "ordered"]), failed_nodes=rng.choice([0, 1, 2]))
    for job in doc["jobs"]:
        job["weight"] = rng.choice([0.0, 0.5, 1.0, 3.25] + ([1e306] if seed % 7 == 3 else []))
        if rng.random() < 0.2:
            job["tp"] = rng.choice([2, 4])
        if rng.random() < 0.2:
            job["min_gain_fraction"] = rng.choice([0.0, 0.1])
    doc.setdefault("cost", {})["horizon"] = rng.choice(["cluster", "job", "event", "lifetime"])
    try:
        inst = Instance.model_validate(doc)
        problem = build_problem(inst)
    except (InvalidInstanceError, InfeasibleError, ValueError):
        return
    tables, layouts = resolve_tables(inst)
    ids = [j.id for j in inst.jobs]
    for _ in range(4):
        state = dataclasses.replace(problem.state, hit={i: rng.random() < 0.3 for i in ids},
                                    exiting=frozenset(i for i in ids if rng.random() < 0.2))
        try:
            before = [_terms(j) for j in _tabulate_before(inst, state, tables, layouts)]
        except InvalidInstanceError as e:
            with pytest.raises(InvalidInstanceError) as got:
                tabulate(inst, state, tables, layouts)
            assert str(got.value) == str(e)
            continue
        try:
            after = tabulate(inst, state, tables, layouts)
        except (InvalidInstanceError, InfeasibleError) as e:  # only the precheck may refuse the terms
            assert "overflows" not in str(e)
            continue
        assert [_terms(j) for j in after.jobs] == before
