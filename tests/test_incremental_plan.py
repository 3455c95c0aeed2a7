"""The incremental plan of an event (plan/incremental.py) against the whole path (api.solve): the same
plan on random clusters and events, None (the caller solves whole) where it does not apply or its
delta does not validate, and the service answering with it."""

from __future__ import annotations

import copy
import re

import numpy as np
import pytest

from randgen import random_instance
from unicron_plan import api
from unicron_plan.core.problem import prepare
from unicron_plan.errors import InfeasibleError, InvalidInstanceError
from unicron_plan.plan import incremental
from unicron_plan.plan.reasons import previous_fits
from unicron_plan.schema import Instance
from unicron_plan.service.coordinator import Coordinator
from unicron_plan.tools.adversarial import KINDS
from unicron_plan.tools.generate import generate_instance


def _dump(plan) -> dict:
    out = plan.model_dump(mode="json", exclude_none=True)
    out["solver"].pop("wall_seconds")
    return out


def _events(rng: np.random.Generator, inst: dict, count: int) -> list[dict]:
    """Random failures of whole nodes and single GPUs (healthy ones), one to three of each at most."""
    nodes = inst["cluster"]["nodes"]
    out = []
    for _ in range(count):
        picked = rng.permutation(len(nodes))[:int(rng.integers(1, 4))].tolist()
        whole = [nodes[k]["id"] for k in picked[:int(rng.integers(0, len(picked) + 1))]]
        gpus = []
        for k in picked:
            n = nodes[k]
            healthy = [g for g in range(n["gpus"]) if g not in n["failed_gpus"]]
            if n["id"] not in whole and healthy:
                gpus.append({"node": n["id"], "gpu": int(rng.choice(healthy))})
        out.append({"kind": "failure", "failed_nodes": whole, "failed_gpus": gpus})
    return out


def _check(base: dict, events: list[dict]) -> int:
    """Every event planned both ways; returns how many were planned incrementally (all equal)."""
    inst = copy.deepcopy(base)
    inst.pop("event", None)
    prepared = prepare(Instance.model_validate(inst))
    try:
        kept = incremental.keep_plan(prepared)
    except InfeasibleError:  # (e.g. a pinned job over a failed GPU: the service then solves whole)
        kept = None
    done = 0
    for ev in events:
        instance = prepared.instance.model_copy(update={"event": Instance.model_validate({**inst, "event": ev}).event})
        try:
            full = api.solve(instance, prepared=prepared)
        except (InvalidInstanceError, InfeasibleError):
            continue  # (an event refused or without a plan: the service answers it by the whole path)
        if kept is None:
            continue
        inc = incremental.incremental_plan(kept, instance, time_limit_seconds=60)
        if inc is not None:
            assert _dump(inc) == _dump(full)
            done += 1
    return done


@pytest.mark.parametrize("share", (incremental.WHOLE_SHARE, 1.0))  # 1.0: the delta path however many change
def test_random_small_clusters_and_events_give_the_whole_paths_plan(share, monkeypatch):
    monkeypatch.setattr(incremental, "WHOLE_SHARE", share)
    rng = np.random.default_rng(38)
    done = total = 0
    for _ in range(120):
        inst = random_instance(rng, max_nodes=6, max_jobs=5, mtbf=bool(rng.random() < 0.5))
        for job in inst["jobs"]:  # hysteresis and pinned jobs (constraints every plan keeps)
            if rng.random() < 0.2:
                job["min_gain_fraction"] = float(rng.choice([0.01, 0.5]))
            if rng.random() < 0.1:
                job["pinned"] = True
        if rng.random() < 0.3 and "node_mtbf_hours" in inst["cost"]:
            inst["cost"]["horizon"] = str(rng.choice(["job", "lifetime"]))
        events = _events(rng, inst, 3) + ([inst["event"]] if "event" in inst else [])
        done += _check(inst, events)
        total += len(events)
    assert done > total // 3  # the path is taken for most of them, not skipped


@pytest.mark.parametrize("kind", ("synthetic",) + KINDS)
@pytest.mark.parametrize("placement", ("shuffled", "ordered"))
def test_generated_clusters_of_every_kind_give_the_whole_paths_plan(kind, placement, monkeypatch):
    monkeypatch.setattr(incremental, "WHOLE_SHARE", 1.0)
    rng = np.random.default_rng(len(kind))
    inst = generate_instance(3, gpus=1024, jobs=12, failed_nodes=0, curves=kind, placement=placement)
    done = _check(inst, _events(rng, inst, 4))
    if kind != "four-types":
        assert done == 4


def _corrupt_gain(monkeypatch):
    """to_plan in the incremental path writing a wrong gain for the first changed job."""
    real = incremental.to_plan

    def wrong(problem, raw, name, wall, used=None):
        plan = real(problem, raw, name, wall, used=used)
        if plan.jobs:
            plan.jobs[0].gain = plan.jobs[0].gain + 1e6
        return plan

    monkeypatch.setattr(incremental, "to_plan", wrong)


def test_a_delta_that_does_not_validate_gives_none_and_the_service_solves_whole(tmp_path, monkeypatch):
    inst = generate_instance(5, gpus=512, jobs=6, failed_nodes=0, curves="equal-per-gpu")
    ev = {"kind": "failure", "failed_nodes": [inst["jobs"][0]["current"]["nodes"][0]]}
    prepared = prepare(Instance.model_validate(inst))
    kept = incremental.keep_plan(prepared)
    instance = Instance.model_validate({**inst, "event": ev})
    instance = prepared.instance.model_copy(update={"event": instance.event})
    assert incremental.incremental_plan(kept, instance) is not None
    _corrupt_gain(monkeypatch)
    assert incremental.incremental_plan(kept, instance) is None
    c = Coordinator(tmp_path / "s", contingency=False)
    c.put_cluster(inst)
    served = c.post_event(ev, dry_run=True)
    got = {k: v for k, v in served.items() if k not in ("plan_id", "revision", "includes_pending", "solver")}
    exp = _dump(api.solve(instance, prepared=prepared))
    exp.pop("solver")
    assert got == exp


@pytest.mark.parametrize("onto", ("kept", "unknown"))
def test_a_changed_job_placed_over_a_kept_jobs_node_gives_none(onto, monkeypatch):
    """A changed job's GPUs put on a node a kept job fills (a node the event did not touch), or on a node
    outside the cluster: the delta's checks refuse the plan."""
    inst = generate_instance(5, gpus=512, jobs=6, failed_nodes=0, curves="equal-per-gpu")
    hit = inst["jobs"][0]
    ev = {"kind": "failure", "failed_nodes": [hit["current"]["nodes"][0]]}
    prepared = prepare(Instance.model_validate(inst))
    kept = incremental.keep_plan(prepared)
    instance = prepared.instance.model_copy(update={"event": Instance.model_validate({**inst, "event": ev}).event})
    plan = incremental.incremental_plan(kept, instance)
    assert plan is not None and plan.jobs[0].id == hit["id"] and plan.jobs[0].gpus > 0  # (placed somewhere)
    full = next(n for j in inst["jobs"][1:] for n in j["current"]["nodes"] if kept.free[n] == 0)
    assert full not in plan.jobs[0].nodes
    real = incremental.place

    def over(problem, counts, start=None):
        placement = real(problem, counts, start=start)
        placement[hit["id"]] = {full if onto == "kept" else "no-such-node": sum(placement[hit["id"]].values())}
        return placement

    monkeypatch.setattr(incremental, "place", over)
    assert incremental.incremental_plan(kept, instance) is None


def test_a_kept_plan_is_refused_where_it_does_not_apply():
    inst = generate_instance(5, gpus=512, jobs=6, failed_nodes=0, curves="equal-per-gpu")
    inst["max_changed_jobs"] = 2
    assert incremental.keep_plan(prepare(Instance.model_validate(inst))) is None


def test_an_instance_the_kept_plan_does_not_cover_gives_none():
    inst = generate_instance(5, gpus=512, jobs=6, failed_nodes=0, curves="equal-per-gpu")
    kept = incremental.keep_plan(prepare(Instance.model_validate(inst)))
    other = Instance.model_validate({**inst, "event": {"kind": "failure", "failed_nodes": ["n00001"]}})
    assert incremental.incremental_plan(kept, other) is None  # not the prepared cluster's objects


def test_the_service_answers_events_with_the_incremental_plan(tmp_path, monkeypatch):
    calls = []
    real = incremental.incremental_plan

    def counted(*a, **kw):
        plan = real(*a, **kw)
        calls.append(plan is not None)
        return plan

    monkeypatch.setattr(incremental, "incremental_plan", counted)
    inst = generate_instance(7, gpus=1024, jobs=10, failed_nodes=0, curves="linear-step")
    c = Coordinator(tmp_path / "s", contingency=False)
    c.put_cluster(inst)
    assert calls  # the upload planned a failure of one node and of two (prime_keys)
    calls.clear()
    rng = np.random.default_rng(7)
    prepared = prepare(Instance.model_validate(inst))
    for ev in _events(rng, inst, 3):
        served = c.post_event(ev, dry_run=True)
        instance = prepared.instance.model_copy(update={"event": Instance.model_validate({**inst, "event": ev}).event})
        exp = _dump(api.solve(instance, prepared=prepared))
        got = {k: v for k, v in served.items() if k not in ("plan_id", "revision", "includes_pending")}
        got["solver"].pop("wall_seconds")
        assert got == exp
    assert calls == [True] * 3


@pytest.mark.parametrize("kind", ("linear-step", "equal-per-gpu", "dense"))
def test_answers_from_the_index_give_the_whole_paths_plan(kind):
    from unicron_plan.plan.contingency import build_contingency, fingerprint

    inst = generate_instance(4, gpus=1024, jobs=12, failed_nodes=0, curves=kind)
    prepared = prepare(Instance.model_validate(inst))
    index, digest = build_contingency(prepared.instance), fingerprint(prepared.instance)
    kept = incremental.keep_plan(prepared)
    done = 0
    for node in inst["cluster"]["nodes"][::7]:
        ev = Instance.model_validate({**inst, "event": {"kind": "failure", "failed_nodes": [node["id"]]}}).event
        instance = prepared.instance.model_copy(update={"event": ev})
        full = api.solve(instance, contingency=index, instance_fingerprint=digest, prepared=prepared)
        got = incremental.indexed_plan(kept, instance, index, digest)
        assert full.solver.name == "contingency" and got is not None
        assert _dump(got) == _dump(full)
        done += 1
    assert done >= 18


def _terms(problem) -> list:
    """Every job's terms of ``problem`` as comparable tuples (arrays as lists)."""
    out = []
    for j in problem.jobs:
        row = dict(vars(j))
        row.update(counts=j.counts.tolist(), f=j.f.tolist(), gains=j.gains.tolist(), table=dict(j.table))
        out.append(row)
    return out


def test_event_problems_share_the_quiet_terms_and_equal_build_problem():
    """event_problem gives build_problem's problem term for term (and dp.pareto_joined's options per
    type) on random clusters and events of several keys, with its quiet terms made once per key."""
    from unicron_plan.core.problem import build_problem
    from unicron_plan.solvers import dp

    rng = np.random.default_rng(7)
    made = reused = 0
    for _ in range(80):
        inst = random_instance(rng, max_nodes=6, max_jobs=5, gpu_types=int(rng.integers(1, 3)),
                               mtbf=bool(rng.random() < 0.6))
        for job in inst["jobs"]:
            if rng.random() < 0.2:
                job["min_gain_fraction"] = float(rng.choice([0.01, 0.5]))
        if rng.random() < 0.4 and "node_mtbf_hours" in inst["cost"]:
            inst["cost"]["horizon"] = str(rng.choice(["job", "lifetime"]))
        inst.pop("event", None)
        prepared = prepare(Instance.model_validate(inst))
        try:
            kept = incremental.keep_plan(prepared)
        except InfeasibleError:
            continue
        if kept is None:
            continue
        for ev in _events(rng, inst, 4) * 2:  # every event twice: the second reads the quiet terms kept
            instance = prepared.instance.model_copy(update={"event": Instance.model_validate({**inst, "event": ev}).event})
            try:
                whole = build_problem(instance, prepared)
            except (InvalidInstanceError, InfeasibleError):
                continue
            keys = len(kept.quiet)
            got = incremental.event_problem(kept, instance)
            assert got is not None
            problem, quiet = got
            made, reused = made + (len(kept.quiet) > keys), reused + (len(kept.quiet) == keys)
            assert (problem.d_run, problem.capacity, problem.max_changed_jobs) == \
                   (whole.d_run, whole.capacity, whole.max_changed_jobs)
            assert problem.state.hit == whole.state.hit
            assert _terms(problem) == _terms(whole)
            for t in whole.capacity:
                want, want_joined = dp.pareto_joined(whole.jobs_of_type(t))
                have, have_joined = quiet.options(problem.jobs_of_type(t))[:2]
                assert [(y.tolist(), g.tolist()) for y, g in have] == [(y.tolist(), g.tolist()) for y, g in want]
                assert (have_joined is None) == (want_joined is None)
                if want_joined is not None:
                    assert all(np.array_equal(a, b) for a, b in zip(have_joined, want_joined))
    assert made > 20 and reused > made  # both kinds of call were checked


@pytest.mark.parametrize("seed", range(4))
def test_racks_read_from_the_columns_are_the_nodes_records(seed):
    """placement._racks (the healthy cluster's columns, the touched nodes' records) against
    ``state.nodes[nid].rack`` for every node, on clusters with failed GPUs and events."""
    from unicron_plan.core.cluster import build_state
    from unicron_plan.plan.placement import _racks

    rng = np.random.default_rng(seed)
    inst = generate_instance(seed, gpus=1024, jobs=10, failed_nodes=3, curves="synthetic")
    inst.pop("event", None)
    prepared = prepare(Instance.model_validate(inst))
    for ev in _events(rng, inst, 3):
        instance = prepared.instance.model_copy(update={"event": Instance.model_validate({**inst, "event": ev}).event})
        state = build_state(instance, prepared.previous, prepared.healthy, prepared.unhealthy)
        assert state.healthy is not None and state.changed  # (the columns' path is the one read)
        rack = _racks(state)
        assert [rack(nid) for nid in state.node_ids()] == [state.nodes[nid].rack for nid in state.node_ids()]


def _text(plan) -> bytes:
    """A plan's JSON text but its ``solver.wall_seconds``."""
    return _text_of(plan.model_dump_json(exclude_none=True).encode())


def _next_failure(rng: np.random.Generator, inst: dict, last) -> dict:
    """A failure of one to two whole nodes or of a GPU; half the time of a node a changed entry of the last
    plan lists (planned or before the event), so that entries kept for earlier plans meet events on their
    nodes and jobs."""
    ids = [n["id"] for n in inst["cluster"]["nodes"]]
    listed = [] if last is None else sorted({n for pj in last.jobs if pj.action != "keep" for n in pj.nodes})
    before = {j["id"]: j["current"]["nodes"] for j in inst["jobs"]}
    if last is not None:
        listed += sorted({n for pj in last.jobs if pj.action != "keep" for n in before[pj.id]})
    pool = listed if listed and rng.random() < 0.5 else ids
    nodes = sorted({str(rng.choice(pool)) for _ in range(int(rng.choice([1, 1, 1, 2])))})
    if rng.random() < 0.15:
        return {"kind": "failure", "failed_gpus": [{"node": nodes[0], "gpu": 0}]}
    return {"kind": "failure", "failed_nodes": nodes}


def _sequence(inst: dict, count: int, seed: int, check_keys: bool = True) -> tuple[int, int, int]:
    """``count`` failures in sequence on one kept plan, each plan's text (and its text as a delta on the
    shared entries) against the same event's plan on a kept plan of its own (no entry kept from
    another plan) and api.solve's; returns (plans made, entries reused, jobs hit whose entry was kept for
    an earlier plan). ``check_keys``: each key's keep also against :func:`previous_fits`."""
    from unicron_plan.service.answers import encode_body, joined_text, split_plan

    rng = np.random.default_rng(seed)
    inst = copy.deepcopy(inst)
    inst.pop("event", None)
    prepared = prepare(Instance.model_validate(inst))
    kept = incremental.keep_plan(prepared)
    assert kept is not None
    found = []
    real = incremental._Made.find

    def counted(self, keys):
        out = real(self, keys)
        found.append(len(out))
        return out

    keys_of = incremental._cache_keys

    def checked(kept, problem, quiet, changed, counts, placement, used):  # each keep against previous_fits
        keys = keys_of(kept, problem, quiet, changed, counts, placement, used)
        for k, (_, where, fits) in keys.items():
            before = problem.state.previous.get(problem.jobs[k].id, {})
            assert fits == previous_fits(before, dict(where), problem.state.nodes, used)
        return keys

    left_by = incremental._left_by
    started = []  # per call: whether it started from a key's kept sums (quiet.left)

    def fresh_left(kept, quiet, previous, ids):  # each start from kept sums against the sums made afresh
        base = None if quiet is None else quiet.left
        got = left_by(kept, quiet, previous, ids)
        want = left_by(kept, None, previous, ids)
        assert got == want and list(got[1]) == list(kept.free)  # (free in cluster order, as placement reads it)
        started.append(base is not None and 4 * len(base[0].symmetric_difference(ids)) <= len(ids))
        return got

    done, last, hit_held = 0, None, 0
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(incremental._Made, "find", counted)
        mp.setattr(incremental, "_left_by", fresh_left)
        if check_keys:
            mp.setattr(incremental, "_cache_keys", checked)
        for _ in range(count):
            ev = _next_failure(rng, inst, last)
            instance = prepared.instance.model_copy(update={"event": Instance.model_validate({**inst, "event": ev}).event})
            try:
                full = api.solve(instance, prepared=prepared)
            except (InvalidInstanceError, InfeasibleError):
                continue
            held = {k for quiet in kept.quiet.values() if quiet.made is not None for k in quiet.made.by_job}
            plan = incremental.incremental_plan(kept, instance, time_limit_seconds=60)
            alone = incremental.incremental_plan(incremental.keep_plan(prepared), instance, time_limit_seconds=60)
            assert (plan is None) == (alone is None)
            if plan is None:
                continue
            assert _dump(plan) == _dump(full)
            assert _text(plan) == _text(alone)
            shared = incremental.shared_entries(kept)
            split = split_plan(plan, shared, {}, [])
            if split is not None:
                assert _text_of(joined_text(encode_body(shared), *split)) == _text(alone)
                again = split_plan(plan, shared, {}, [])  # (the kept texts: the same bytes)
                assert again[1] == split[1]
            hit_held += sum(1 for k, pj in enumerate(plan.jobs) if pj.hit and k in held)
            done, last = done + 1, plan
    _sequence.started += sum(started)
    return done, sum(found), hit_held


_sequence.started = 0  # plans that started from a key's kept sums, over every sequence run


def _text_of(text: bytes) -> bytes:
    """A plan's JSON ``text`` without its ``solver.wall_seconds``."""
    return re.sub(rb'"wall_seconds":[0-9.eE+-]+', b"", text)


@pytest.mark.parametrize("kind", ("synthetic",) + KINDS)
def test_failures_in_sequence_on_one_kept_plan_give_the_fresh_plans(kind, monkeypatch):
    """The entries kept from earlier plans of a key (incremental._Made) leave every plan as it is made
    without them, byte for byte, over many failures on one kept plan, including failures on the nodes
    and jobs of entries kept before."""
    monkeypatch.setattr(incremental, "WHOLE_SHARE", 1.0)
    inst = generate_instance(11, gpus=1024, jobs=16, failed_nodes=0, curves=kind)
    done, reused, hit_held = _sequence(inst, 24, seed=len(kind))
    if kind != "four-types":
        assert done >= 12
    if kind == "synthetic":
        assert reused > 0  # (the entries are reused, not only made)
        assert hit_held > 0  # (and jobs with a kept entry are hit by later failures)


def test_a_keys_kept_sums_are_started_from_and_equal_fresh_ones(monkeypatch):
    monkeypatch.setattr(incremental, "WHOLE_SHARE", 1.0)
    monkeypatch.setattr(_sequence, "started", 0)
    inst = generate_instance(11, gpus=1024, jobs=16, failed_nodes=0, curves="synthetic")
    assert _sequence(inst, 24, seed=9)[0] >= 12
    assert _sequence.started > 5  # (the sums were started from, each checked against fresh ones)


def _random_clusters(seed: int, count: int, horizons: bool):
    """(position, small random cluster with a kept plan) of ``count`` drawn from ``seed``."""
    rng = np.random.default_rng(seed)
    for k in range(count):
        inst = random_instance(rng, max_nodes=8, max_jobs=6, mtbf=bool(rng.random() < 0.5))
        if horizons and rng.random() < 0.3 and "node_mtbf_hours" in inst["cost"]:
            inst["cost"]["horizon"] = str(rng.choice(["job", "lifetime"]))
        try:
            if incremental.keep_plan(prepare(Instance.model_validate({**inst, "event": None}))) is None:
                continue
        except (InvalidInstanceError, InfeasibleError):
            continue
        yield k, inst


def test_failures_in_sequence_on_random_small_clusters(monkeypatch):
    monkeypatch.setattr(incremental, "WHOLE_SHARE", 1.0)
    done = reused = 0
    for k, inst in _random_clusters(91, 40, horizons=True):
        d, r, _ = _sequence(inst, 8, seed=k)
        done, reused = done + d, reused + r
    assert done > 100 and reused > 0


@pytest.mark.parametrize("coarse", ("split", "keep"))
def test_a_cache_key_without_the_split_or_the_keep_is_caught(coarse, monkeypatch):
    """The sequences' comparisons see a stale entry: a key that left out the split (or whether the previous
    split fits in what the plan leaves: the job's keep_cost) would reuse an entry made for another plan."""
    monkeypatch.setattr(incremental, "WHOLE_SHARE", 1.0)
    real = incremental._cache_keys

    def coarser(*a):
        keys = real(*a)
        return {k: (y, () if coarse == "split" else where, True if coarse == "keep" else fits)
                for k, (y, where, fits) in keys.items()}

    monkeypatch.setattr(incremental, "_cache_keys", coarser)
    with pytest.raises(AssertionError):
        if coarse == "split":
            inst = generate_instance(11, gpus=1024, jobs=16, failed_nodes=0, curves="synthetic")
            _sequence(inst, 24, seed=len("synthetic"), check_keys=False)
        else:  # (a job whose count and split repeat with another keep: the 33rd cluster of these)
            for k, inst in _random_clusters(26, 40, horizons=False):
                _sequence(inst, 12, seed=k, check_keys=False)


def test_the_kept_entries_stay_within_their_bounds(monkeypatch):
    """With room for few entries (one per job, seven in all) the plans are the same, and the cache holds
    no more than that, each entry with its text's slot."""
    monkeypatch.setattr(incremental, "WHOLE_SHARE", 1.0)
    monkeypatch.setattr(incremental, "MADE_PER_JOB", 1)
    monkeypatch.setattr(incremental, "MADE_MOST", 7)
    sizes = []
    real = incremental._Made.keep

    def kept(self, made):
        real(self, made)
        held = [e for variants in self.by_job.values() for e in variants.values()]
        assert len(held) == self.size == len(self.texts) and all(self.texts[id(e)][0] is e for e in held)
        assert all(len(v) <= 1 for v in self.by_job.values())
        sizes.append(self.size)

    monkeypatch.setattr(incremental._Made, "keep", kept)
    inst = generate_instance(11, gpus=1024, jobs=16, failed_nodes=0, curves="synthetic")
    done, reused, _ = _sequence(inst, 24, seed=3)
    assert done >= 12 and sizes and max(sizes) <= 7


def test_a_fleet_of_several_types_keeps_the_terms_of_every_pair_of_types():
    """On four GPU types, single- and two-node failures over every type and pair of types make 4 + 10
    keys: all are kept, so the same failures again tabulate nothing afresh."""
    from unicron_plan.schema import Event

    inst = generate_instance(2, gpus=1024, jobs=16, failed_nodes=0, curves="four-types")
    inst.pop("event", None)
    prepared = prepare(Instance.model_validate(inst))
    kept = incremental.keep_plan(prepared)
    by_type: dict[str, list[str]] = {}
    for n in inst["cluster"]["nodes"]:
        by_type.setdefault(n["gpu_type"], []).append(n["id"])
    types = sorted(by_type)
    assert len(types) == 4
    failures = [[by_type[t][-1]] for t in types]
    failures += [[by_type[a][-2], by_type[b][-3]] for k, a in enumerate(types) for b in types[k:]]
    tabulated = []
    real = incremental.tabulate
    rounds = []
    try:
        incremental.tabulate = lambda *a, **k: tabulated.append(1) or real(*a, **k)
        for _ in range(2):
            for nodes in failures:
                event = prepared.instance.model_copy(update={"event": Event(kind="failure", failed_nodes=nodes)})
                assert incremental.event_problem(kept, event) is not None
            rounds.append(len(tabulated))
    finally:
        incremental.tabulate = real
    assert len(kept.quiet) == 14
    assert rounds[0] >= 14 and rounds[1] == rounds[0]  # the second round made no key again


@pytest.mark.parametrize("kind,keys", [("four-types", 14), ("synthetic", 2)])
def test_the_keys_of_one_and_two_node_failures_are_made_ahead(kind, keys, tmp_path):
    """prime_keys makes the key of one node's failure per type and of two nodes' per pair of types; the
    coordinator makes them with the upload, and later failures of one or two whole nodes make none."""
    from unicron_plan.schema import Event

    inst = generate_instance(3, gpus=1024, jobs=16, failed_nodes=0, curves=kind)
    inst.pop("event", None)
    prepared = prepare(Instance.model_validate(inst))
    kept = incremental.keep_plan(prepared)
    assert incremental.prime_keys(kept) == keys and len(kept.quiet) == keys
    assert all(q.entries is not None and q.entries.encoded is None for q in kept.quiet.values())
    assert incremental.prime_keys(kept) == 0
    rng = np.random.default_rng(1)
    ids = [n["id"] for n in inst["cluster"]["nodes"]]
    for _ in range(12):
        nodes = [ids[int(k)] for k in rng.choice(len(ids), int(rng.integers(1, 3)), replace=False)]
        event = prepared.instance.model_copy(update={"event": Event(kind="failure", failed_nodes=nodes)})
        assert incremental.event_problem(kept, event) is not None
    assert len(kept.quiet) == keys
    c = Coordinator(tmp_path / "s", contingency=False)
    try:
        c.put_cluster(inst)
        assert len(c._kept[1].quiet) == keys
        assert all(q.entries.encoded is not None for q in c._kept[1].quiet.values())  # (their texts too)
    finally:
        c.close()


def test_the_dp_reads_the_results_kept_for_the_types_a_failure_leaves_alone(monkeypatch):
    """On four GPU types a node's failure changes one type's problem: the three others are the shared
    options at the same capacity, solved once per key and then read from the memo; every plan is still
    the whole path's, and a wrong memo entry would show in it."""
    from unicron_plan.solvers import dp

    inst = generate_instance(6, gpus=2048, jobs=24, failed_nodes=0, curves="four-types")
    inst.pop("event", None)
    by_type: dict[str, list[str]] = {}
    for n in inst["cluster"]["nodes"]:
        by_type.setdefault(n["gpu_type"], []).append(n["id"])
    events = [{"kind": "failure", "failed_nodes": [nodes[k]]} for k in (3, 9, 15) for nodes in by_type.values()]
    solved = []
    real = dp.solve_type
    monkeypatch.setattr(dp, "solve_type", lambda jobs, *a, **k: solved.append(jobs[0].gpu_type) or real(jobs, *a, **k))
    assert _check(inst, events) == len(events)
    # api.solve solves every type of every event; the incremental plan its own type at most, and the
    # three others only for the first event of its key (its type)
    incremental_calls = len(solved) - len(by_type) * len(events)
    assert len(events) <= incremental_calls + 3 <= len(events) + 3 * len(by_type)
