"""The DP over pairs of counts (solvers/pairdp.py) against enumeration of every pair of plans, and the
two-stage terms (core/cost.py: lookahead_terms) against the formula written out."""

import itertools
import math

import numpy as np
import pytest

from unicron_plan.core import cost
from unicron_plan.solvers import pairdp


def _random_jobs(rng, n_jobs):
    """Per job (counts, F, x, F(x), hit, D_trans, exiting) with counts in multiples of a common step."""
    step = int(rng.choice([1, 2, 4]))
    jobs = []
    for _ in range(n_jobs):
        counts = np.unique(rng.integers(1, 6, size=int(rng.integers(1, 4))) * step)
        f = np.sort(rng.uniform(1.0, 10.0, size=len(counts))) * counts
        if rng.random() < 0.3:  # a jagged curve: F need not grow with the count
            f = rng.uniform(1.0, 50.0, size=len(counts))
        counts = np.concatenate(([0], counts)).astype(np.int64)
        f = np.concatenate(([0.0], f))
        x = int(rng.choice(counts))
        f_x = float(f[list(counts).index(x)])
        jobs.append((counts, f, x, f_x, bool(rng.random() < 0.3), float(rng.uniform(0, 5)), bool(rng.random() < 0.1)))
    return jobs, step


def _g(job, y, z, w_now, w_after):
    """G(y, z) of the two-stage objective, written out (docs/model.md)."""
    counts, f, x, f_x, hit, d, exiting = job
    if exiting:
        return 0.0 if y == z == 0 else -math.inf
    fy, fz = f[list(counts).index(y)], f[list(counts).index(z)]
    changed = y != x or hit
    value = fy * w_now + fz * w_after - changed * f_x * d
    return value - (fy * d if z != y else 0.0)


def test_pair_dp_equals_enumeration_on_random_instances():
    rng = np.random.default_rng(7)
    for trial in range(300):
        jobs, step = _random_jobs(rng, int(rng.integers(1, 5)))
        cap = int(rng.integers(0, 12)) * step + int(rng.integers(0, step))  # not always a multiple of the step
        after = cap + int(rng.choice([0, 1, 2, 3])) * step
        w_now, w_after = float(rng.uniform(0, 10)), float(rng.uniform(0, 10))
        terms = [(c, *cost.lookahead_terms(f, c, x, fx, hit, w_now, w_after, d, d, ex))
                 for c, f, x, fx, hit, d, ex in jobs]
        best = -math.inf
        for ys in itertools.product(*[c.tolist() for c, *_ in jobs]):
            if sum(ys) > cap:
                continue
            for zs in itertools.product(*[c.tolist() for c, *_ in jobs]):
                if sum(zs) <= after:
                    best = max(best, sum(_g(j, y, z, w_now, w_after) for j, y, z in zip(jobs, ys, zs)))
        value, ys, zs = pairdp.solve_pairs(terms, cap, after)
        assert value == pytest.approx(best, rel=1e-9, abs=1e-9), trial
        assert sum(ys) <= cap and sum(zs) <= after
        assert sum(_g(j, y, z, w_now, w_after) for j, y, z in zip(jobs, ys, zs)) == pytest.approx(value, rel=1e-9,
                                                                                                  abs=1e-9)


def test_a_move_to_the_same_count_is_never_worth_more_than_staying():
    # the exactness argument of the separable moving options: P(y) + Q(y) <= S(y)
    rng = np.random.default_rng(3)
    for _ in range(200):
        (c, f, x, fx, hit, d, ex), = _random_jobs(rng, 1)[0]
        s, p, q = cost.lookahead_terms(f, c, x, fx, hit, float(rng.uniform(0, 9)), float(rng.uniform(0, 9)), d, d, ex)
        assert np.all(p + q <= s + 1e-9)


def test_no_plan_fits_is_an_error():
    counts = np.array([4], dtype=np.int64)  # a job that may not take 0 GPUs
    terms = [(counts, *cost.lookahead_terms(np.array([4.0]), counts, 4, 4.0, False, 1.0, 1.0, 1.0, 1.0))]
    with pytest.raises(ValueError):
        pairdp.solve_pairs(terms, 2, 8)
