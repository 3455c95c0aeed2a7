"""The DP's envelope segments in slope order made on demand (dp.SlopeOrder) and the choices' buffer kept
between compiled passes give exactly what a full stable sort and a fresh buffer give."""

from __future__ import annotations

import numpy as np
import pytest

from unicron_plan.solvers import dp


def _slopes(rng: np.random.Generator, k: int) -> np.ndarray:
    s = rng.normal(0, 10, size=k)
    if rng.random() < 0.5:
        s = np.round(s)  # many exact ties
    if rng.random() < 0.1 and k:
        s[rng.integers(0, k)] = np.inf
    if rng.random() < 0.1 and k:
        s[rng.integers(0, k)] = -np.inf
    if rng.random() < 0.05 and k:
        s[rng.integers(0, k)] = np.nan
    return s


def test_head_is_the_prefix_of_the_stable_sort(monkeypatch):
    rng = np.random.default_rng(5)
    partial = 0
    for _ in range(2000):
        monkeypatch.setattr(dp.SlopeOrder, "HEAD", int(rng.integers(1, 40)))
        k = int(rng.integers(0, 300))
        s = _slopes(rng, k)
        n = rng.integers(1, 20, size=k).astype(np.int64)
        capacity = int(rng.integers(0, max(int(n.sum()) + 10, 1)))
        order = dp.SlopeOrder(s, n, capacity)
        want = np.argsort(-s, kind="stable")
        head = order.head
        assert head.tolist() == want[:len(head)].tolist()
        assert order.full().tolist() == want.tolist()
        if not order.whole:
            partial += 1
            assert int(n[head].sum()) > capacity  # the multiplier is read within the head
    assert partial > 500


def _problem(rng: np.random.Generator):
    """Options of many jobs (Pareto counts, 0 first) and a capacity below their largest counts' sum."""
    m = int(rng.integers(2, 60))
    opts = []
    for _ in range(m):
        ys = np.array([0] + sorted(set(rng.integers(1, 200, size=int(rng.integers(1, 30))).tolist())), dtype=np.int64)
        g = rng.normal(0, 50, size=len(ys)) + np.sqrt(ys) * rng.uniform(0, 100) + ys * rng.uniform(-1, 3)
        if rng.random() < 0.3:
            g = np.round(g)  # ties
        if rng.random() < 0.2:
            g = ys * float(rng.integers(1, 4))  # linear: equal slopes among jobs
        opts.append(dp.pareto_arrays(ys, g))
    top = sum(int(y[-1]) for y, _ in opts)
    return opts, int(rng.integers(0, max(top, 1)))


def test_solves_with_the_order_on_demand_equal_those_with_the_full_sort(monkeypatch):
    """The same counts, value and bounds (multiplier, upper and lower bound, how the optimum was found)
    with a head of one segment (every path past the head taken) as with the whole order at once."""
    rng = np.random.default_rng(6)
    beyond = {"n": 0}
    full = dp.SlopeOrder.full

    def counted(self):
        beyond["n"] += hasattr(self, "head") and not self.whole  # (called after the head was made)
        return full(self)

    monkeypatch.setattr(dp.SlopeOrder, "full", counted)
    compared = 0
    for _ in range(400):
        opts, cap = _problem(rng)
        results = []
        for head in (10**9, 1, 3):
            monkeypatch.setattr(dp.SlopeOrder, "HEAD", head)
            stats = {}
            counts, value = dp.solve_options(opts, cap, stats)
            results.append((counts, value, {k: v for k, v in stats.items() if k != "core_plan"}))
        assert results[1] == results[0] and results[2] == results[0]
        compared += not results[0][2].get("early_exit", True)
    assert compared > 200
    assert beyond["n"] > 20  # the greedy starts read past the head


@pytest.mark.skipif(dp.NATIVE_PASS is None, reason="the compiled pass was not built (no C compiler at install)")
def test_kept_choices_buffer_gives_the_fresh_buffers_results(monkeypatch):
    """Passes in sequence over problems of varied sizes, the buffer kept (and filled with junk between
    passes, larger or smaller than the next pass needs) or never kept: the same counts, value and widths."""
    rng = np.random.default_rng(7)
    runs = []
    for _ in range(300):
        opts, cap = _problem(rng)
        if sum(int(y[-1]) for y, _ in opts) <= cap:
            continue
        lam = float(dp.lp_multiplier(opts, cap))
        red_max = [float(np.max(g - lam * y)) for y, g in opts]
        runs.append((opts, cap, lam, red_max, lam * cap + sum(red_max) - rng.uniform(0, 200)))
    assert len(runs) > 100

    def outcomes(kept_bytes, junk):
        monkeypatch.setattr(dp, "CHOICE_KEPT_BYTES", kept_bytes)
        dp._CHOICES.buf = None
        out = []
        for opts, cap, lam, red_max, threshold in runs:
            if junk and getattr(dp._CHOICES, "buf", None) is not None:
                dp._CHOICES.buf[:] = rng.integers(0, 256, size=len(dp._CHOICES.buf), dtype=np.uint8)
            stats = {}
            out.append((dp._attempt(opts, red_max, lam, cap, threshold, stats), stats.get("sum_width")))
        return out

    fresh = outcomes(0, False)
    assert getattr(dp._CHOICES, "buf", None) is None
    assert outcomes(dp.CHOICE_KEPT_BYTES, True) == fresh
    assert outcomes(dp.CHOICE_KEPT_BYTES, False) == fresh
    assert any(found is not None for found, _ in fresh)
