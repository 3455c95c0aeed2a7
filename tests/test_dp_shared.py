"""The DP's bounds read from kept parts of shared options (dp.SharedOptions, dp.Splice) against the DP on
the same options without them: the same counts, value and statistics on random option sets (linear
ones, where the greedy plan meets the bound, and jagged ones, where the search runs), and the warm
stage's answers per class of nodes the same plans with and without them."""

from __future__ import annotations

import json

import numpy as np
import pytest

from unicron_plan.plan import incremental
from unicron_plan.schema import Instance
from unicron_plan.service import coordinator, state as st
from unicron_plan.service.answers import joined_text
from unicron_plan.solvers import dp
from unicron_plan.tools.generate import generate_instance

pytestmark = pytest.mark.skipif(dp.NATIVE_HULL is None, reason="the kept parts need the compiled envelopes")


def _job(rng: np.random.Generator, kind: str, step: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Pareto options (0 first) of one job: linear in the count with one kept count worth more (a
    running job's), or jagged; counts multiples of ``step`` (random when None)."""
    step = int(rng.choice([1, 2, 4, 8])) if step is None else step
    y = np.arange(0, step * int(rng.integers(2, 40)) + 1, step, dtype=np.int64)
    if kind == "linear":
        g = 150.0 * y - float(rng.choice([0.0, 600.0, 900.0])) * (y > 0)
        x = int(rng.integers(0, len(y)))
        g[x] = 150.0 * y[x]
    else:
        g = np.cumsum(rng.uniform(0.0, 10.0, size=len(y))) * (y > 0)
    return dp.pareto_arrays(y, g)


def _spliced(rng: np.random.Generator, kind: str, jobs: int, at_most: int, step: int | None = None):
    """Three problems from ``jobs`` kept jobs, each with up to ``at_most`` of them replaced by new ones:
    (the options, joined, their :class:`dp.Splice` of the kept parts, a capacity up to their total)."""
    shared = [_job(rng, kind, step) for _ in range(jobs)]
    kept = dp.SharedOptions(dp._join(shared))
    for _ in range(3):
        new = sorted(rng.choice(jobs, size=int(rng.integers(0, min(jobs, at_most) + 1)), replace=False).tolist())
        options = list(shared)
        for k in new:
            options[k] = _job(rng, kind, step)
        joined = dp._join(options)
        splice = kept.splice(new, dp._join([options[k] for k in new]), joined)
        total = int(sum(int(y[-1]) for y, _ in options))
        yield options, joined, splice, int(rng.integers(0, max(total, 1) + 1))


@pytest.mark.parametrize("kind", ["linear", "jagged"])
def test_bounds_from_kept_parts_give_the_dps_answer(kind):
    rng = np.random.default_rng(11 if kind == "linear" else 12)
    greedy = searched = 0
    for _ in range(150):
        for options, joined, splice, capacity in _spliced(rng, kind, int(rng.integers(1, 40)), 3):
            want_stats, got_stats = {}, {}
            want = dp.solve_options(options, capacity, want_stats, joined=joined)
            got = dp.solve_options(options, capacity, got_stats, joined=joined, shared=splice)
            assert got == want
            assert got_stats == want_stats
            greedy += want_stats.get("bound_met") == "greedy"
            searched += not want_stats.get("early_exit") and want_stats.get("bound_met") != "greedy"
    assert greedy > 20 and (searched > 20 or kind == "linear")


@pytest.mark.parametrize("kind", ["linear", "jagged"])
def test_bounds_from_kept_parts_on_whole_nodes_give_the_dps_answer(kind, monkeypatch):
    """Every count a multiple of one step (whole nodes): the DP solves the options on step-GPU units, and
    reads the bounds from the kept parts scaled so (Splice.scaled): the same counts, value and statistics."""
    scaled = []
    real = dp.Splice.scaled
    monkeypatch.setattr(dp.Splice, "scaled", lambda self, step, joined: scaled.append(step) or real(self, step, joined))
    rng = np.random.default_rng(31 if kind == "linear" else 32)
    for _ in range(100):
        m, step = int(rng.integers(1, 30)), int(rng.choice([2, 4, 8]))
        for options, joined, splice, capacity in _spliced(rng, kind, m, 3, step):
            want_stats, got_stats = {}, {}
            want = dp.solve_options(options, capacity, want_stats, joined=joined)
            got = dp.solve_options(options, capacity, got_stats, joined=joined, shared=splice)
            assert got == want and got_stats == want_stats
    assert len(scaled) > 100 and set(scaled) == {2, 4, 8}  # (the scaled kept parts were read)


@pytest.mark.parametrize("kind", ["linear", "jagged"])
def test_segments_from_kept_parts_are_the_whole_computations(kind, monkeypatch):
    """Splice.segments against the segments and the k-th largest slope computed whole, and the DP with
    a small head (SlopeOrder.HEAD) so that the order's threshold is read from them: the same answer."""
    monkeypatch.setattr(dp.SlopeOrder, "HEAD", 2)
    rng = np.random.default_rng(21 if kind == "linear" else 22)
    checked = 0
    for _ in range(120):
        for options, joined, splice, capacity in _spliced(rng, kind, int(rng.integers(1, 30)), 4):
            hy, hg, seg, at = splice.hull()
            made = splice.segments(seg)
            assert made is not None
            within = np.flatnonzero(seg[1:] == seg[:-1])
            n = hy[within + 1] - hy[within]
            s = (hg[within + 1] - hg[within]) / n
            assert np.array_equal(made[0], within) and np.array_equal(made[1], n)
            assert made[2].tobytes() == s.tobytes()
            for k in range(1, len(s) + 1):
                assert made[3](k) == np.partition(s, len(s) - k)[len(s) - k]
                checked += 1
            want_stats, got_stats = {}, {}
            want = dp.solve_options(options, capacity, want_stats, joined=joined)
            got = dp.solve_options(options, capacity, got_stats, joined=joined, shared=splice)
            assert got == want and got_stats == want_stats
    assert checked > 1000


def _answers(snapshot) -> dict:
    """The warm stage's answer of every class (representative -> the plan as JSON, without its wall time)."""
    bodies, out = {}, {}
    for message in coordinator._warm_messages(snapshot, None, 4096, lambda: False):
        if message[0] == "shared":
            bodies[message[1]] = message[2]
        elif message[0] == "answer":
            packed = message[3]
            text = joined_text(bodies[packed[0]], *packed[1:]) if isinstance(packed, tuple) else packed.text()
            plan = json.loads(text)
            plan["solver"].pop("wall_seconds")
            out[message[1]] = plan
    return out


@pytest.mark.parametrize("kind,seed", [("equal-per-gpu", 1), ("equal-per-gpu", 2), ("linear-step", 3),
                                       ("near-linear", 4), ("identical", 5), ("synthetic", 6)])
def test_warm_answers_per_class_equal_the_dp_without_kept_parts(kind, seed, monkeypatch):
    """Every class's answer (a cluster too large for an index: each class by the DP on the kept plan's
    terms) is the plan the DP gives without the kept parts, proven optimal."""
    from unicron_plan.plan import contingency

    monkeypatch.setattr(contingency, "INDEX_MAX_CELLS", 0)
    inst = generate_instance(seed, gpus=2048, jobs=24, failed_nodes=0, curves=kind)
    inst.pop("event", None)
    snapshot = st.State(base=Instance.model_validate(inst), revision=1, base_version=1)
    got = _answers(snapshot)
    options = incremental._Quiet.options
    monkeypatch.setattr(incremental._Quiet, "options", lambda self, jobs: options(self, jobs)[:2])
    want = _answers(snapshot)
    assert got == want
    assert len(got) > 5 and all(p["status"]["solution"] == "optimal" for p in got.values())
