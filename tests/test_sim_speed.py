"""The simulator's incremental state equals a derivation from scratch, and a re-plan's work follows
what changed, not the size of the cluster (docs/simulation.md, "Speed").

The engine keeps each job's rate in an array and visits only jobs with blocks; the planner policies
keep the GPUs held per node and hand placement the idle GPUs, so that staying jobs are never copied.
Each is checked here against the plain computation it replaces, on every policy, and the work per
re-plan is counted (deterministic counts, not timings).
"""

import dataclasses
import json

import pytest

from simfixtures import ROOT
from unicron_plan.io import read_json
from unicron_plan.plan import placement
from unicron_plan.simulate import run as sim_run
from unicron_plan.simulate import terms
from unicron_plan.simulate.engine import Engine
from unicron_plan.simulate.policies import POLICIES
from unicron_plan.simulate.run import load_scenario, simulate


def _dense(name: str, mtbf: float = 150.0, hours: float = 240.0):
    doc = read_json(ROOT / "scenarios" / f"{name}.json")
    doc["failures"]["node_mtbf_hours"] = mtbf
    doc["duration_hours"] = hours
    return load_scenario(doc)


class LoopEngine(Engine):
    """The accounting as a loop over every job (the plain form of Engine.advance)."""

    def advance(self, t1: float) -> None:
        t0 = self.t
        if t1 <= t0:
            return
        span = t1 - t0
        loss = self.loss
        for k, j in enumerate(self.jobs):
            run = span
            if j.blocks:
                blocked = 0.0
                keep = []
                for b in j.blocks:
                    ov = min(b[1], t1) - max(b[0], t0)
                    if ov > 0:
                        blocked += ov
                        loss[b[2]] += j.base * ov
                    if b[1] > t1:
                        keep.append(b)
                j.blocks = keep
                run = span - blocked
            rate = 0.0 if j.waiting else j.f()
            self.job_output[k] += rate * run
            self.output += rate * run
            loss["sub_healthy"] += (j.base - rate) * run
        self.t = t1


ROLLOUTS = {"rollout", "rollout-to-end"}  # forks of the run at every re-plan: minutes, not seconds
EVERY_POLICY = [("gpt3-mix-128-a800-dense", sorted(set(POLICIES) - ROLLOUTS)),
                ("gpt3-mix-1024-a800", sorted(set(POLICIES) - ROLLOUTS)),
                pytest.param("gpt3-mix-128-a800-dense", sorted(ROLLOUTS), marks=pytest.mark.slow)]


@pytest.mark.long  # (out of the default run for its time: run by `pytest -m long`)
@pytest.mark.parametrize("scenario,names", EVERY_POLICY)
def test_accounting_equals_a_loop_over_every_job(monkeypatch, scenario, names):
    sc = _dense(scenario)
    fast = [simulate(sc, names, seed) for seed in (0, 1)]
    monkeypatch.setattr(sim_run, "Engine", LoopEngine)
    slow = [simulate(sc, names, seed) for seed in (0, 1)]
    assert json.dumps(fast, sort_keys=True) == json.dumps(slow, sort_keys=True)  # to the last bit
    assert fast[0]["policies"][names[0]]["failures"] > 5


def _dense_idle(state) -> dict[str, int]:
    """Usable GPUs minus every job's previous GPUs, where not 0, from scratch."""
    free = state.usable_gpus()
    for split in state.previous.values():
        for nid, g in split.items():
            free[nid] -= g
    return {nid: v for nid, v in free.items() if v}


@pytest.mark.parametrize("scenario", ["gpt3-mix-128-a800-dense", "gpt3-mix-1024-a800"])
def test_tracked_idle_gpus_and_placement_equal_a_placement_from_scratch(monkeypatch, scenario):
    original = placement.place
    calls = []

    def checked(problem, counts, start=None):
        out = original(problem, counts, start)
        state = problem.state
        assert state.idle is not None and state.in_order
        assert state.idle == _dense_idle(state)
        plain = dataclasses.replace(state, idle=None, in_order=False)
        again = original(dataclasses.replace(problem, state=plain), counts)
        # the stays found with arrays (simulate/terms.py): only the other jobs are placed
        full = out if start is None else {**state.previous, **out}
        assert full == again and all(list(full[j]) == list(again[j]) for j in full)  # same splits, same order
        calls.append(start is not None)
        return out

    monkeypatch.setattr(placement, "place", checked)
    sc = _dense(scenario)
    planners = ["unicron", "greedy", "equal-share"]
    for seed in (0, 3):
        simulate(sc, planners, seed)
    assert len(calls) > 30 and sum(calls) > 10


def test_a_replan_touches_what_changed_not_every_node(monkeypatch):
    """On 2,048 nodes and 40 jobs: placement's free nodes, the allocations re-read and the rates
    re-derived per re-plan are a small part of the cluster (counts, not timings)."""
    sc = load_scenario(ROOT / "scenarios" / "gpt3-mix-16384-a800.json")
    nodes, jobs = len(sc.cluster.nodes), len(sc.jobs)
    free_sizes, stays_copied = [], []
    original_stays = placement._stays_idle

    def counted(problem, counts):
        free, result, movers = original_stays(problem, counts)
        free_sizes.append(len(free))
        previous = problem.state.previous
        stays_copied.append(sum(1 for j in problem.jobs
                                if result[j.id] and result[j.id] is not previous[j.id] and j not in movers))
        return free, result, movers

    refreshed = []
    original_refresh = Engine._refresh

    def refresh(self):
        refreshed.append(len(self._touched))
        original_refresh(self)

    original_start = terms.RunTerms.placement_start

    def counted_start(self, problem, counts, **kwargs):
        out = original_start(self, problem, counts, **kwargs)
        if out is not None:
            free_sizes.append(len(out[0]))
            assert not set(out[1]) & {j.id for j in problem.jobs if counts[j.id] == j.x and counts[j.id] and not j.hit}
        return out

    monkeypatch.setattr(placement, "_stays_idle", counted)
    monkeypatch.setattr(terms.RunTerms, "placement_start", counted_start)
    monkeypatch.setattr(Engine, "_refresh", refresh)
    out = simulate(sc, ["unicron", "greedy"], 0)
    plans = out["policies"]["unicron"]["plans"] + out["policies"]["greedy"]["plans"]
    assert len(free_sizes) == plans > 100
    assert sum(stays_copied) == 0  # a staying job keeps its dict
    assert sum(free_sizes) / len(free_sizes) < nodes / 10, sum(free_sizes) / len(free_sizes)
    assert sum(refreshed) / len(refreshed) < jobs / 4, sum(refreshed) / len(refreshed)


class ScanningEngine(Engine):
    """jobs_on checked at every call against a scan of every job."""

    calls = 0

    def jobs_on(self, node: str):
        found = super().jobs_on(node)
        assert found == [j for j in self.jobs if j.alloc.get(node, 0) > 0]
        ScanningEngine.calls += 1
        return found


@pytest.mark.parametrize("scenario,names", EVERY_POLICY)
def test_jobs_on_a_node_equal_a_scan_of_every_job(monkeypatch, scenario, names):
    """The node index kept from replaced allocs gives the jobs a scan finds, in job order, at every
    failure on every policy (each replaces allocs its own way)."""
    monkeypatch.setattr(sim_run, "Engine", ScanningEngine)
    ScanningEngine.calls = 0
    simulate(_dense(scenario), names, 0)
    assert ScanningEngine.calls > 5 * len(names)


SMALL_PLANNERS = [("gpt3-mix-128-a800-dense", ["unicron", "greedy", "equal-share", "clairvoyant", "lookahead"]),
                  ("gpt3-mix-1024-a800", ["unicron", "greedy", "equal-share"]),
                  pytest.param("gpt3-mix-128-a800-dense", ["rollout"], marks=pytest.mark.slow)]


@pytest.mark.parametrize("scenario,names", SMALL_PLANNERS)
def test_the_state_kept_from_the_replaced_allocs_equals_a_scan_at_every_plan(monkeypatch, scenario, names):
    """The planner policies visit only the jobs the engine logged as replaced: after every plan the
    synced allocations, the instance's job copies and the problem builder's per-job reads are those a
    scan of every job finds (the same objects), and a replaced alloc is always in the log."""
    from unicron_plan.simulate import policies

    plan, build = policies.PlannerPolicy.plan, terms.RunTerms.tabulate
    seen = {"plans": 0, "terms": 0, "logged": 0, "hinted": 0}

    def checked_plan(self, eng, failed, repaired):
        out = plan(self, eng, failed, repaired)
        for k, j in enumerate(eng.jobs):
            assert self._seen[k] is j.alloc and self._allocs[j.id] is j.alloc
        if self._visit is not None and self._visit[0] is out[0]:  # the jobs replan visits: every other one stays
            visit = set(self._visit[1])
            assert all(out[0][j.id] is j.alloc and not out[1][j.id] for k, j in enumerate(eng.jobs) if k not in visit)
            seen["hinted"] += 1
        if self._instance_jobs is not None and self._marks.get("instance", (None,))[0] is eng.alloc_log:
            inst = self.instance(eng, failed, repaired)  # made again: what a scan of every job gives
            for k, (a, j) in enumerate(zip(inst.jobs, eng.jobs)):
                assert a.current.gpus == j.count and a.current.nodes == list(j.alloc)
        seen["plans"] += 1
        return out

    def checked_tabulate(self, instance, state, changed=None, hit_at=None):
        if changed is not None:  # every job whose Job object or split differs from the last call's is listed
            listed = set(changed)
            for k, jid in enumerate(self.ids):
                split = state.previous.get(jid)
                if instance.jobs[k] is not self._job_seen[k] or (split is not None and split is not self._split_seen[k]):
                    assert k in listed, (k, jid)
                    seen["logged"] += 1
        if hit_at is not None:  # the hit jobs named by the policy are those state.hit holds
            assert hit_at == [k for k, jid in enumerate(self.ids) if state.hit[jid]]
        p = build(self, instance, state, changed, hit_at)
        for k, jid in enumerate(self.ids):
            split = state.previous.get(jid) or {}
            assert self._job_seen[k] is instance.jobs[k]
            assert self._held[k] == sum(1 for g in split.values() if g) and self._listed[k] == bool(split)
        seen["terms"] += 1
        return p

    monkeypatch.setattr(policies.PlannerPolicy, "plan", checked_plan)
    monkeypatch.setattr(terms.RunTerms, "tabulate", checked_tabulate)
    out = simulate(_dense(scenario), names, 0)
    assert seen["plans"] >= sum(out["policies"][n]["plans"] for n in names) > 10
    assert seen["terms"] > 10 and seen["logged"] > 10 and seen["hinted"] > 10


def test_the_replaced_log_of_a_copy_and_of_another_engine():
    """A mark names its engine's log: a copy of the engine (a fork) continues the copied log, another
    engine's mark gives None (a scan of every job)."""
    import copy

    from unicron_plan.simulate.policies import make_policy

    sc = _dense("gpt3-mix-128-a800-dense")
    eng = Engine(sc, [], make_policy("greedy", sc), 150.0)
    first, mark = eng.replaced_since(None)
    assert first is None and mark[1] == len(eng.jobs)
    assert eng.replaced_since(mark) == ([], mark)
    eng.jobs[3].alloc = {"x": 1}
    eng.jobs[1].alloc = {"y": 1}
    eng.jobs[3].alloc = {"z": 2}
    found, mark2 = eng.replaced_since(mark)
    assert found == [1, 3]
    other = copy.deepcopy(eng)
    other.attach_jobs()
    holder = copy.deepcopy({"eng": eng, "mark": mark2})
    holder["eng"].attach_jobs()
    holder["eng"].jobs[2].alloc = {"w": 1}
    assert holder["eng"].replaced_since(holder["mark"])[0] == [2]  # the copied mark reads the copied log
    assert eng.replaced_since(mark2)[0] == []  # the original did not see the copy's change
    assert other.replaced_since(mark2)[0] is None  # a mark of another engine's log


def test_cached_plans_are_kept_packed_and_read_back_as_they_were(monkeypatch):
    """The plan cache keeps a plan's values (the same split dicts, the hits as bits); a hit gives back
    dicts with the same keys in the same order and the same split objects."""
    from unicron_plan.simulate import policies

    made = {}
    pack, unpack = policies.PlannerPolicy._packed, policies.PlannerPolicy._unpacked
    hits = []
    kinds = set()

    def packed(self, out):
        entry = pack(self, out)
        assert type(entry) in (policies._PackedPlan, policies._PlacedPlan)
        kinds.add(type(entry))
        made[id(entry)] = (entry, out)
        return entry

    def unpacked(self, entry):
        got = unpack(self, entry)
        placement, hit, types = made[id(entry)][1]
        assert list(got[0]) == list(placement) and all(a is b for a, b in zip(got[0].values(), placement.values()))
        assert list(got[1].items()) == list(hit.items()) and got[2] == types
        hits.append(1)
        return got

    monkeypatch.setattr(policies.PlannerPolicy, "_packed", packed)
    monkeypatch.setattr(policies.PlannerPolicy, "_unpacked", unpacked)
    for seed in (0, 1):
        simulate(_dense("gpt3-mix-128-a800-dense"), ["unicron", "greedy"], seed)
    assert len(hits) >= 4 and policies._PlacedPlan in kinds


def test_keep_freed_memory_sets_glibc_once_and_leaves_a_set_environment_alone(monkeypatch):
    import ctypes

    try:
        ctypes.CDLL(None).gnu_get_libc_version
    except AttributeError:
        pytest.skip("not glibc")
    monkeypatch.setattr(sim_run, "_MALLOC_SET", False)
    monkeypatch.setenv("MALLOC_ARENA_MAX", "2")  # the environment sets malloc's parameters: left alone
    assert sim_run.keep_freed_memory() is False and sim_run._MALLOC_SET is False
    monkeypatch.delenv("MALLOC_ARENA_MAX")
    for k in [k for k in __import__("os").environ if k.startswith("MALLOC_") or k == "GLIBC_TUNABLES"]:
        monkeypatch.delenv(k)
    assert sim_run.keep_freed_memory() is True and sim_run._MALLOC_SET is True
    assert sim_run.keep_freed_memory() is True  # once per process
