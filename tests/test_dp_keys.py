"""The DP's option keys (compiled and numpy) and its lazily made deficits give the values of their
plain numpy formulas, and the DP the same plans and statistics with either path."""

from __future__ import annotations

import math

import numpy as np
import pytest

from unicron_plan.solvers import dp


def _reference_key(y: np.ndarray, off: np.ndarray, capacity: int) -> np.ndarray:
    m = len(off) - 1
    return np.repeat(np.arange(m, dtype=np.int64) * (capacity + 2), np.diff(off)) + np.minimum(y, capacity + 1)


def _reference_flatten(y: np.ndarray, g: np.ndarray, off: np.ndarray, lam: float, red_max=None):
    red = g - lam * y
    if red_max is None:
        red_max = np.maximum.reduceat(red, off[:-1]).tolist()
    return np.repeat(np.asarray(red_max, dtype=np.float64), np.diff(off)) - red, red_max


def _random_joined(rng: np.random.Generator, empty_jobs: bool = False):
    """Jobs with ties, counts above the capacity, single-option jobs (and, with ``empty_jobs``, jobs
    without options); every job's counts ascending."""
    m = int(rng.integers(0, 30))
    cap = int(rng.integers(0, 300))
    ys, gs, sizes = [], [], []
    for _ in range(m):
        kind = rng.random()
        if empty_jobs and kind < 0.1:
            n = 0
        elif kind < 0.3:
            n = 1
        else:
            n = int(rng.integers(2, 40))
        y = np.sort(rng.choice(2 * cap + 50, size=n, replace=False)).astype(np.int64)
        g = rng.normal(0, 5, size=n) + y * rng.uniform(-0.5, 2)
        if rng.random() < 0.4:
            g = np.round(g)  # ties
        ys.append(y)
        gs.append(g)
        sizes.append(n)
    off = np.zeros(m + 1, dtype=np.int64)
    np.cumsum(sizes, out=off[1:])
    y = np.concatenate(ys) if ys else np.zeros(0, dtype=np.int64)
    g = np.concatenate(gs) if gs else np.zeros(0)
    return y, g, off, cap


@pytest.mark.parametrize("native", [True, False])
def test_option_keys_equal_the_numpy_formula(monkeypatch, native):
    if native and dp.NATIVE_KEY is None:
        pytest.skip("the compiled keys were not built (no C compiler at install)")
    monkeypatch.setattr(dp, "NATIVE_KEY", dp.NATIVE_KEY if native else None)
    rng = np.random.default_rng(12)
    for trial in range(600):
        y, g, off, cap = _random_joined(rng, empty_jobs=True)
        if trial % 5 == 0:
            y = y[::-1][::-1]  # a strided view (the compiled path takes contiguous arrays only)
        if trial % 7 == 0:
            y = y.astype(np.int32)  # another dtype: the numpy path
        for c in (cap, 0, int(y.max()) if len(y) else 1, 2**40 if y.dtype == np.int64 else 2**20):
            got = dp._option_key(dp._Flat(y, g, off), c)
            want = _reference_key(y, off, c)
            assert got.dtype == want.dtype and got.tolist() == want.tolist()


def test_lazy_deficits_equal_the_eager_ones():
    rng = np.random.default_rng(13)
    for _ in range(600):
        y, g, off, _ = _random_joined(rng)
        if len(off) < 2:
            continue
        lam = [0.0, float(rng.uniform(0, 3)), 1.0, 0, 2][int(rng.integers(0, 5))]  # (ints: an int product)
        if rng.random() < 0.2:
            g = np.round(g).astype(np.int64)  # integer gains
        given = None if rng.random() < 0.5 else np.maximum.reduceat(g - lam * y, off[:-1]).tolist()
        flat, red_max = dp._flatten(None, lam, given, joined=dp._Joined(y, g, off))
        want, want_max = _reference_flatten(y, g, off, lam, given)
        assert red_max == want_max
        assert flat.deficit.tobytes() == want.tobytes()
        assert flat.deficit is flat.deficit  # made once
    assert dp._Flat(y, g, off).deficit is None  # no reduced gains given: no deficits


@pytest.mark.skipif(dp.NATIVE_KEY is None, reason="the compiled keys were not built (no C compiler at install)")
def test_solutions_equal_with_either_key_path(monkeypatch):
    from test_dp_scale import _brute, _random_options

    native = dp.NATIVE_KEY
    rng = np.random.default_rng(14)
    for _ in range(300):
        opts, cap = _random_options(rng)
        out = []
        for key in (native, None):
            monkeypatch.setattr(dp, "NATIVE_KEY", key)
            stats: dict = {}
            counts, value = dp.solve_options(opts, cap, stats)
            out.append((counts, value, {k: v for k, v in stats.items() if k != "core_plan"}))
        assert out[0] == out[1]
        expected = _brute(opts, cap)
        assert math.isclose(out[0][1], expected, rel_tol=1e-9, abs_tol=1e-9)
