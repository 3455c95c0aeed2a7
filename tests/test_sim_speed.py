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

    def counted_start(self, problem, counts):
        out = original_start(self, problem, counts)
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
