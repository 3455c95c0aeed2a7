"""Adversarial throughput tables: curve shapes that defeat the DP's Lagrangian pruning.

Each kind below is a realistic shape (a table measured on a linearly scaling
model, many copies of one job, ...) under which almost every count has a
reduced cost near 0, so bounds prune little. ``generate --curves KIND`` draws
whole instances of each kind; the regression baseline and the tests run them.

* ``identical``: every job has the same table (grain 1, near-linear with a mild
  efficiency decay) and the same weight and transition cost.
* ``linear-step``: exactly linear tables on the multiples of 3 (every
  count worth the same per GPU), counts up to 8x nominal.
* ``near-linear``: linear tables with a relative noise of 1e-9, every count
  from 1 up to C / 4.
* ``dense``: the synthetic jagged table on every count (grain 1), up to 6x nominal.
* ``equal-per-gpu``: every job is worth the same per GPU (linear, one slope),
  on multiples of the job's tensor-parallel degree.
* ``four-types``: the synthetic jagged tables over a cluster split into 4 GPU types.
* ``queued-linear-step``, ``queued-equal-per-gpu``, ``queued-near-linear``: the tables of
  ``linear-step``, ``equal-per-gpu`` on multiples of 3 tp and ``near-linear``, with every job
  queued (at 0 GPUs), so no transition term breaks the ties; at the default 16,384 GPUs with
  one failed node the capacity left, 16,376, is not a multiple of the step 3.
"""

from __future__ import annotations

import numpy as np

KINDS = ("identical", "linear-step", "near-linear", "dense", "equal-per-gpu", "four-types",
         "queued-linear-step", "queued-equal-per-gpu", "queued-near-linear")
QUEUED = tuple(k for k in KINDS if k.startswith("queued-"))
PER_GPU_TFLOPS = 150.0


def _table(y: np.ndarray, tflops: np.ndarray) -> dict[str, float]:
    return {str(int(c)): float(t) for c, t in zip(y, np.round(tflops, 6))}


def adversarial_curve(kind: str, rng: np.random.Generator, tp: int, nominal: int, total_gpus: int,
                      max_counts: int, synthetic) -> dict[str, float]:
    """The table of one job for ``kind`` (``synthetic(max_gpus, max_counts, grain1)`` draws a jagged one)."""
    if kind == "queued-equal-per-gpu":
        y = np.arange(3 * tp, min(total_gpus, 6 * nominal) + 1, 3 * tp, dtype=np.int64)
        return _table(y, PER_GPU_TFLOPS * y)
    if kind in QUEUED:
        return adversarial_curve(kind[len("queued-"):], rng, tp, nominal, total_gpus, max_counts, synthetic)
    if kind == "identical":
        y = np.arange(1, min(total_gpus, 4 * max(nominal, 1)) + 1, dtype=np.int64)
        return _table(y, PER_GPU_TFLOPS * y / (1.0 + 0.02 * np.log2(y)))
    if kind == "linear-step":
        y = np.arange(3, min(total_gpus, 8 * nominal) + 1, 3, dtype=np.int64)
        return _table(y, PER_GPU_TFLOPS * y)
    if kind == "near-linear":
        y = np.arange(1, max(total_gpus // 4, 1) + 1, dtype=np.int64)
        noise = 1.0 + 1e-9 * rng.uniform(-1.0, 1.0, size=len(y))
        return {str(int(c)): float(PER_GPU_TFLOPS * c * e) for c, e in zip(y, noise)}
    if kind == "equal-per-gpu":
        y = np.arange(tp, min(total_gpus, 6 * nominal) + 1, tp, dtype=np.int64)
        return _table(y, PER_GPU_TFLOPS * y)
    if kind == "dense":
        return synthetic(total_gpus, 10**9, True)
    if kind == "four-types":
        return synthetic(total_gpus, max_counts, False)
    raise ValueError(kind)


def gpu_type_names(kind: str) -> list[str]:
    """GPU type names the cluster of ``kind`` is split into (one for every kind but four-types)."""
    return ["a800", "h800", "a100", "h100"] if kind == "four-types" else ["a800"]


def linear_stretch_options(rng: np.random.Generator, jobs: int, most_groups: int = 40) -> list[tuple[np.ndarray, np.ndarray]]:
    """The DP's options (Pareto counts and gains) of ``jobs`` jobs worth 150 TFLOPS per GPU on
    multiples of 3, 8 or 12 GPUs (4 to ``most_groups`` - 1 groups), half of them running at a random
    count (every other count pays a 600 s transition): the greedy plan often falls short of the
    Lagrangian bound (the tied jobs' granularities must be combined to fill the capacity), the case
    of the DP's packing rule (benchmarks/linear_stretch.py, tests/test_dp_linear.py)."""
    from unicron_plan.solvers.dp import pareto_arrays

    options = []
    for _ in range(jobs):
        tp = int(rng.choice([3, 8, 12]))
        y = np.arange(0, tp * int(rng.integers(4, most_groups)) + 1, tp, dtype=np.int64)
        g = 150.0 * y
        if rng.random() < 0.5:
            x = int(rng.choice(y[1:]))
            g = np.where(y == x, g, g - 150.0 * 600)
            g[0] = 0.0
        options.append(pareto_arrays(y, g))
    return options
