"""Seeded scenario families: job mixes, failure rates and repair mixes drawn from stated ranges.

A family fixes the shape of the jobs' curves; every seed draws the rest, so that a horizon is
judged on many clusters rather than on the shipped GPT-3 mixes (docs/simulation.md, "Scenario
families"). One explicit ``numpy.random.Generator`` per (family, seed, size); the same arguments
give the same scenario.

Jobs (all families): nominal sizes lognormal(0, 0.6), scaled so that they add up to ``demand``
(1.1) x the cluster's GPUs, in whole units; weight 1, 1.5 or 2; transition 60-1,000 s
(uniform); per-GPU rate 120-160 TFLOP/s; efficiency decay 1 / (1 + a log2(y / unit)).

* ``jagged``: unit 8-64 GPUs (the minimum count), counts every multiple of 8 from the unit up to
  2 x nominal, decay a 0.005-0.06, and counts that are not multiples of the unit lose 3-15%.
* ``near-linear``: unit 8 GPUs, counts every multiple of 8 up to 2 x nominal, decay 0-0.005.
* ``min-counts``: unit 32-256 GPUs and only its multiples up to 2 x nominal (a job that runs
  on 64 GPUs or 128, nothing between), decay 0.005-0.03.

Counts are thinned (every other one kept) until at most ``MAX_COUNTS`` remain.

Failures (per seed): node MTBF log-uniform in 1,000-6,332.5 h (Llama 3's rate at the top,
failures.md); times to failure exponential, or Weibull with shape 0.7 or 1.5 (one of the three
with equal chance); the Unicron severity mix. Repairs: half the seeds one lognormal (median
log-uniform from 5 minutes to 24 hours, sigma 1), half a mix with spares (an automatic share of
50-90% with median 5-30 minutes, sigma 0.5, the rest manual with median 4-24 hours, sigma 1).
"""

from __future__ import annotations

import math
import zlib

import numpy as np

from unicron_plan.tools.generate import A800, NODE_MTBF_HOURS, SEVERITY_MIX

FAMILIES = ("jagged", "near-linear", "min-counts")
MAX_COUNTS = 64
DEMAND = 1.1


def _rng(family: str, seed: int, gpus: int) -> np.random.Generator:
    return np.random.default_rng([zlib.crc32(family.encode()), seed, gpus])


def _loguniform(rng: np.random.Generator, lo: float, hi: float) -> float:
    return float(math.exp(rng.uniform(math.log(lo), math.log(hi))))


def _job(rng: np.random.Generator, family: str, k: int, nominal_share: float, gpus: int) -> tuple[dict, int]:
    """One job dict (no allocation yet) and its nominal size."""
    if family == "jagged":
        unit, decay, step = int(rng.choice([8, 16, 32, 64])), rng.uniform(0.005, 0.06), 8
    elif family == "near-linear":
        unit, decay, step = 8, rng.uniform(0.0, 0.005), 8
    elif family == "min-counts":
        unit, decay = int(rng.choice([32, 64, 128, 256])), rng.uniform(0.005, 0.03)
        step = unit
    else:
        raise ValueError(f"unknown family {family!r}; valid: {', '.join(FAMILIES)}")
    nominal = max(unit, int(round(nominal_share * gpus / unit)) * unit)
    counts = np.arange(unit, min(2 * nominal, gpus) + 1, step, dtype=np.int64)
    while len(counts) > MAX_COUNTS:
        counts = counts[::2]
    per_gpu = rng.uniform(120.0, 160.0)
    rate = per_gpu * counts / (1.0 + decay * np.log2(counts / unit))
    if family == "jagged":
        rate = rate * np.where(counts % unit == 0, 1.0, 1.0 - rng.uniform(0.03, 0.15))
    job = {"id": f"job{k:04d}", "weight": float(rng.choice([1.0, 1.5, 2.0])),
           "transition_seconds": float(round(rng.uniform(60.0, 1000.0), 1)),
           "throughput": {"gpu_type": "a800", "compact": {"counts": counts.tolist(),
                                                          "tflops": np.round(rate, 3).tolist()}}}
    return job, nominal


def _failures(rng: np.random.Generator) -> dict:
    out = {"node_mtbf_hours": round(_loguniform(rng, 1000.0, NODE_MTBF_HOURS), 1),
           "severity_mix": dict(SEVERITY_MIX)}
    shape = rng.choice([0.0, 0.7, 1.5])
    if shape:
        out["weibull_shape"] = float(shape)
    if rng.random() < 0.5:
        out["repair_hours"] = {"median": round(_loguniform(rng, 5 / 60, 24.0), 4), "sigma": 1.0}
    else:
        out["repair"] = {"automatic_fraction": round(float(rng.uniform(0.5, 0.9)), 3),
                         "automatic_hours": {"median": round(_loguniform(rng, 5 / 60, 0.5), 4), "sigma": 0.5},
                         "manual_hours": {"median": round(_loguniform(rng, 4.0, 24.0), 3), "sigma": 1.0}}
    return out


def family_scenario(family: str, seed: int, gpus: int, *, duration_hours: float = 720.0,
                    gpus_per_node: int = 8, nodes_per_rack: int = 32) -> dict:
    """A scenario dict (docs/format.md, "Scenario") of ``family`` for ``seed`` on ``gpus`` GPUs."""
    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; valid: {', '.join(FAMILIES)}")
    rng = _rng(family, seed, gpus)
    n_nodes = max(gpus // gpus_per_node, 1)
    node_ids = [f"n{k:06d}" for k in range(n_nodes)]
    nodes = [{"id": nid, "gpu_type": "a800", "gpus": gpus_per_node, "rack": f"r{k // nodes_per_rack:05d}"}
             for k, nid in enumerate(node_ids)]
    n_jobs = int(np.clip(round(gpus / 96), 4, 160))
    shares = rng.lognormal(0.0, 0.6, size=n_jobs)
    shares = shares / shares.sum() * DEMAND
    jobs, nominal = [], []
    for k, share in enumerate(shares.tolist()):
        job, size = _job(rng, family, k, share, gpus)
        jobs.append(job)
        nominal.append(size)
    free, cursor = n_nodes * gpus_per_node, 0
    for job, size in zip(jobs, nominal):  # in order, whole nodes at the largest count that fits
        counts = job["throughput"]["compact"]["counts"]
        fit = [c for c in counts if c <= min(size, free) and c % gpus_per_node == 0]
        if not fit:
            job["current"] = {"gpus": 0, "nodes": []}
            continue
        c = fit[-1]
        used = node_ids[cursor:cursor + c // gpus_per_node]
        cursor += len(used)
        free -= c
        job["current"] = {"gpus": c, "nodes": used}
    return {"schema_version": "1", "name": f"family-{family}-{gpus}-s{seed}",
            "cluster": {"gpu_types": {"a800": dict(A800)}, "nodes": nodes},
            "jobs": jobs, "cost": {}, "duration_hours": float(duration_hours),
            "failures": _failures(rng)}
