"""The DP's cuts and proofs keep only a float-rounding margin (not a relative tolerance): gains that
differ by 1e-9 to 1e-14 relative are still told apart, and the optimum is never cut."""

import itertools
import math

import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

from unicron_plan.core.problem import JobTerms
from unicron_plan.solvers import dp


def _job(i: int, y: np.ndarray, g: np.ndarray) -> JobTerms:
    return JobTerms(index=i, id=f"j{i}", gpu_type="a", weight=1.0, x=0, hit=False, d_trans=0.0, f_x=0.0,
                    table={}, counts=y.astype(np.int64), f=g.astype(np.float64), gains=g.astype(np.float64))


def _noisy(rng, top: int, rel: float, step: int, slope: float, cost: float):
    y = np.arange(0, top + 1, step, dtype=np.int64)
    g = slope * y * (1.0 + rel * rng.uniform(-1.0, 1.0, size=len(y)))
    g[1:] -= cost  # a transition cost on every count but 0 (negative gains near 0)
    return y, g


def _close(a: float, b: float) -> bool:
    # a few ulps of the value: far below the noise, so a plan that loses to the noise fails
    return abs(a - b) <= 8 * np.finfo(float).eps * max(abs(a), abs(b), 1.0)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10**6), n=st.integers(2, 12), top=st.integers(3, 60), cap=st.integers(1, 300),
       rel=st.sampled_from([1e-9, 1e-11, 1e-12, 1e-13, 1e-14]), step=st.sampled_from([1, 1, 2, 3]),
       slope=st.sampled_from([1.0, 150.0, 1.67e6]), cost=st.sampled_from([0.0, 0.0, 1e-6, 5.0]))
def test_near_linear_noise_matches_the_plain_dp(seed, n, top, cap, rel, step, slope, cost):
    rng = np.random.default_rng(seed)
    jobs = [_job(i, *_noisy(rng, min(top, cap), rel, step, slope * rng.choice([1.0, 1.0, 1.0 + 1e-10]), cost))
            for i in range(n)]  # counts up to the capacity, as build_problem gives them
    stats: dict = {}
    counts, value = dp.solve_type(jobs, cap, stats)
    _, ref = dp.solve_type_reference(jobs, cap)
    # exact up to the DP's stated float margin, which is far below the noise at 1e-9 to 1e-12
    margin = stats.get("rounding", (n + 1) * np.finfo(float).eps * abs(ref))
    assert margin <= 1e-12 * max(abs(ref), 1.0)
    assert ref - margin <= value <= ref + margin, (value, ref, stats)
    assert sum(counts.values()) <= cap
    by_id = {j.id: j for j in jobs}
    total = 0.0
    for jid, c in counts.items():  # the counts are allowed and worth the value reported
        k = int(np.searchsorted(by_id[jid].counts, c))
        assert by_id[jid].counts[k] == c
        total += float(by_id[jid].gains[k])
    assert _close(total, value)


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(1, 4), cap=st.integers(0, 40),
       rel=st.sampled_from([1e-9, 1e-12, 1e-14]))
def test_tiny_noisy_instances_match_enumeration(seed, n, cap, rel):
    rng = np.random.default_rng(seed)
    options = []
    for _ in range(n):
        y = np.unique(np.concatenate([[0], rng.integers(1, 15, size=5)])).astype(np.int64)
        g = 1e6 * y * (1.0 + rel * rng.uniform(-1.0, 1.0, size=len(y)))
        options.append(dp.pareto_arrays(y, g))
    stats: dict = {}
    counts, value = dp.solve_options(options, cap, stats)
    best = max(math.fsum(float(g[k]) for (_, g), k in zip(options, pick))
               for pick in np.ndindex(*[len(y) for y, _ in options])
               if sum(int(y[k]) for (y, _), k in zip(options, pick)) <= cap)
    # the DP's float margin, or (early exit: no bound computed) the rounding of a sum of n gains
    margin = stats.get("rounding", (n + 1) * np.finfo(float).eps * abs(best))
    assert best - margin <= value <= best + margin and sum(counts) <= cap


def test_queued_near_linear_keeps_few_options():
    """1e-9 noise on every count, every job queued: the passes keep a small part of the options
    (with a relative tolerance of 1e-9 as the margin they kept every one)."""
    rng = np.random.default_rng(3)
    jobs = [_job(i, *_noisy(rng, 256, 1e-9, 1, 1.67e6, 0.0)) for i in range(16)]
    stats: dict = {}
    _, value = dp.solve_type(jobs, 1021, stats)
    assert _close(value, dp.solve_type_reference(jobs, 1021)[1])
    assert not stats["early_exit"] and stats["kept"] < stats["options"] // 4, stats


@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(1, 4), cap=st.integers(0, 90))
def test_reachable_sum_is_the_largest_total_of_allowed_counts(seed, n, cap):
    rng = np.random.default_rng(seed)
    options = []
    for _ in range(n):
        y = rng.integers(1, 30, size=int(rng.integers(1, 7)))
        if rng.random() < 0.4:  # an arithmetic stretch (taken in log steps)
            y = np.concatenate([y, np.arange(int(rng.integers(1, 5)), int(rng.integers(5, 40)), int(rng.integers(1, 4)))])
        if rng.random() < 0.8:
            y = np.concatenate([[0], y])
        y = np.unique(y).astype(np.int64)
        options.append((y, y.astype(float)))
    totals = [sum(c) for c in itertools.product(*[y.tolist() for y, _ in options]) if sum(c) <= cap]
    assert dp.reachable_sum(options, cap) == (max(totals) if totals else cap)


def test_an_unreachable_capacity_is_cut_and_the_greedy_plan_proven():
    """Counts 0, 6 and 10 for three jobs (gcd 2): no plan uses 23-25 of 25 GPUs, so the bound of the
    equal per-GPU values is taken at 22, where a plan that fills it is optimal."""
    y = np.array([0, 6, 10], dtype=np.int64)
    jobs = [_job(i, y, 10.0 * y) for i in range(3)]
    stats: dict = {}
    counts, value = dp.solve_type(jobs, 25, stats)
    assert value == 220.0 and sum(counts.values()) == 22
    assert stats["reachable"] == 22 and stats["ub"] == 220.0


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(1, 8), cap=st.integers(0, 120))
def test_the_greedy_starts_are_feasible_and_the_greedy_plan_below_the_optimum(seed, n, cap):
    rng = np.random.default_rng(seed)
    options = []
    for _ in range(n):
        y = np.unique(np.concatenate([[0], rng.integers(1, 40, size=int(rng.integers(1, 8)))])).astype(np.int64)
        g = np.cumsum(rng.uniform(-1.0, 5.0, size=len(y)))
        options.append(dp.pareto_arrays(y, g - g[0]))
    joined = dp._join(options)
    lam, hull = dp._lp(options, cap, joined)
    flat, _ = dp._flatten(options, lam, joined=joined)
    starts = dp._starts(hull, flat, cap, lam, dp._option_key(flat, cap))
    assert len(starts) >= 1
    for start in starts:  # each fits, one option of each job
        assert int(flat.y[start].sum()) <= cap
        assert all(flat.off[j] <= start[j] < flat.off[j + 1] for j in range(n))
    _, _, _, ub, pick, lb, rounding = dp._bounds(options, joined, cap)
    assert int(flat.y[flat.off[:-1] + pick].sum()) <= cap
    _, best = dp.solve_options(options, cap)
    assert lb <= best + rounding and best <= ub + rounding


def test_identical_running_jobs_get_a_greedy_plan_near_the_optimum():
    """Identical jobs, each running at 8 GPUs (a transition cost on any other count), one node lost:
    the LP stops every job before its tied segment; whole segments in slope order keep all but one
    job in place, so the greedy plan is the optimum here (it was far below it)."""
    y = np.arange(0, 33, dtype=np.int64)
    f = 100.0 * y / (1.0 + 0.02 * np.log2(np.maximum(y, 1)))
    jobs = []
    for i in range(32):
        g = f * 10.0 - f[8] * 3.0
        g[8] = f[8] * 10.0
        g[0] = -f[8] * 3.0
        jobs.append(_job(i, y, g))
    stats: dict = {}
    counts, value = dp.solve_type(jobs, 32 * 8 - 8, stats)
    assert math.isclose(stats["lb"], value, rel_tol=1e-12)
    assert sum(c == 8 for c in counts.values()) >= 30
