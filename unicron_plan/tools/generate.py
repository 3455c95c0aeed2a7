"""Seeded generator of instances and scenarios from documented distributions.

Every draw comes from one explicit ``numpy.random.Generator``; the same
arguments and seed give a byte-identical file (canonical JSON, see
:func:`unicron_plan.io.dumps`).

Distributions (see docs/performance.md, "Generated instances"):

* Cluster: ``gpus / gpus_per_node`` nodes of one GPU type (A800 spec),
  ``nodes_per_rack`` nodes per rack.
* Model mix: GPT-3 6.7B 40%, GPT-3 13B 30%, Llama 2 70B 20%, GPT-3 175B 10%
  (names of the model library, so that ``curves="model"`` can derive them); each model has a tensor
  parallel degree tp (its count *grain*) and pipeline stages pp.
* Job sizes: relative size 1, 2, 6, 16 for the four models, times a
  lognormal(0, 0.5) factor, scaled so the jobs' nominal sizes add up to
  ``demand`` x the cluster's GPUs, rounded to the job's *unit* = 8 x pp GPUs
  (whole 8-GPU nodes times pipeline stages).
* Curves (``curves="synthetic"``): allowed counts are the multiples of the
  grain up to 6 x nominal (grain doubled until at most ``max_counts``
  remain); aggregate TFLOP/s(y) = peak x mfu x y x eff(y) x jag(y) x noise with
  eff(y) = 1 / (1 + alpha log2(max(y, unit) / unit)) (efficiency decay),
  jag(y) = 1 - beta (1 - min(v2(y), v2(unit)) / v2(unit)) where v2 counts the
  factors of 2 (counts that fill whole nodes x stages run best, neighbours
  are penalised), noise uniform in [0.99, 1.01].
  ``curves="model"`` derives the table from ``unicron_plan.perf`` instead.
* Current allocation: jobs in order take whole nodes at their nominal size
  until the cluster is full; the rest are queued (0 GPUs). With
  ``placement="shuffled"`` (the default) the nodes are taken in a random order
  of each GPU type's nodes, as a cluster that has run for a while places jobs:
  a job's nodes are spread over racks and a rack holds parts of many jobs.
  ``"ordered"``: in node order (job k's nodes follow job k-1's). The order is
  drawn from its own generator seeded by ``seed``, so every other draw is the
  same for both placements.
* Failures (docs/data/failures.md): D_run from a node MTBF of
  1000 / 3.79 node-days = 6332.5 h (Llama 3: 3.79 interruptions per 1000
  node-days); the event fails ``failed_nodes`` nodes drawn uniformly;
  scenarios use the Unicron severity mix (37% of hardware faults need a
  drain) and lognormal repairs of median 12 h.
* Transition seconds: per model 120, 180, 420, 600 s times lognormal(0, 0.25)
  (peers report 17-300 s for elastic restarts, Unicron up to 68 min for a
  full restart).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import numpy as np

from unicron_plan.tools.adversarial import KINDS as ADVERSARIAL, QUEUED
from unicron_plan.tools.adversarial import adversarial_curve, gpu_type_names
from unicron_plan.errors import InvalidInstanceError
from unicron_plan.schema.scenario import MAX_DURATION_HOURS

#: The options' ranges (bounded work: the largest cluster is four times the 1,048,576-GPU instances).
INT_RANGES = {"seed": (0, 2**63 - 1), "gpus": (1, 2**22), "jobs": (1, 65_536), "gpus_per_node": (1, 1024),
              "nodes_per_rack": (1, 2**22), "max_counts": (1, 100_000), "failed_nodes": (0, 2**22)}
FLOAT_RANGES = {"demand": (0.0, 100.0), "duration_hours": (0.0, MAX_DURATION_HOURS)}  # (open, closed]


def check_options(**options) -> None:
    """InvalidInstanceError naming the option (``--gpus-per-node``...) of a value outside its range
    (INT_RANGES, FLOAT_RANGES: a float must be finite, above the first bound and at most the second);
    None values are not checked."""
    for key, value in options.items():
        if value is None:
            continue
        flag = "--" + key.replace("_", "-")
        if key in INT_RANGES:
            lo, hi = INT_RANGES[key]
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not lo <= value <= hi:
                raise InvalidInstanceError(flag, f"{value!r}: give an integer in [{lo}, {hi}]")
        else:
            lo, hi = FLOAT_RANGES[key]
            if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) \
                    or not lo < value <= hi:
                raise InvalidInstanceError(flag, f"{value!r}: give a number above {lo:g} and at most {hi:g}")


A800 = {"peak_tflops": 312.0, "memory_gib": 80.0, "intra_node_gbps": 1600.0, "inter_node_gbps": 200.0}
NODE_MTBF_HOURS = round(1000.0 / 3.79 * 24.0, 1)  # Llama 3 405B, Table 5 (failures.md)
SEVERITY_MIX = {"sev1": 0.37, "sev2": 0.33, "sev3": 0.30}  # Unicron: 37% needed node draining


@dataclass(frozen=True)
class ModelKind:
    """One model of the mix: name, share, relative size, parallelism, efficiency and restart cost."""

    name: str
    share: float
    size: float
    tp: int
    pp: int
    mfu: float
    transition_seconds: float


MODEL_MIX: tuple[ModelKind, ...] = (
    ModelKind("gpt3-6.7b", 0.4, 1.0, 1, 1, 0.52, 120.0),
    ModelKind("gpt3-13b", 0.3, 2.0, 2, 2, 0.50, 180.0),
    ModelKind("llama2-70b", 0.2, 6.0, 4, 4, 0.47, 420.0),
    ModelKind("gpt3-175b", 0.1, 16.0, 8, 8, 0.44, 600.0),
)


def _v2(y: np.ndarray) -> np.ndarray:
    """Number of factors of 2 of each positive int."""
    y = y.astype(np.int64)
    return np.log2(y & -y).astype(np.int64)


def synthetic_curve(rng: np.random.Generator, kind: ModelKind, nominal: int, max_gpus: int,
                    max_counts: int = 400, alpha: float = 0.06, beta: float = 0.25,
                    peak: float = A800["peak_tflops"], grain: int | None = None) -> dict[str, float]:
    """The jagged synthetic table of one job (rule in the module docstring; ``grain`` overrides tp)."""
    unit = 8 * kind.pp
    grain = grain or kind.tp
    top = max(grain, min(max_gpus, int(6 * nominal)))
    while top // grain > max_counts:
        grain *= 2
    y = np.arange(grain, top + 1, grain, dtype=np.int64)
    eff = 1.0 / (1.0 + alpha * np.log2(np.maximum(y, unit) / unit))
    vu = math.log2(unit)
    jag = 1.0 - beta * (1.0 - np.minimum(_v2(y), vu) / vu)
    noise = rng.uniform(0.99, 1.01, size=len(y))
    tflops = np.round(peak * kind.mfu * y * eff * jag * noise, 3)
    return {str(int(c)): float(t) for c, t in zip(y, tflops)}


def _model_curve(kind: ModelKind, max_gpus: int) -> dict[str, float]:
    try:
        from unicron_plan.perf import derive_table  # optional: built in parallel
    except ImportError:
        raise InvalidInstanceError("--curves", "'model' needs unicron_plan.perf (the analytical "
                                   "performance model), which is not installed; use --curves synthetic") from None
    curve = derive_table(kind.name, "a800", 1024, 2048, recompute="full", max_gpus=max_gpus)
    return {str(k): float(v) for k, v in sorted(curve.tflops_table().items())}


def _jobs(rng: np.random.Generator, n_jobs: int, total_gpus: int, demand: float, max_counts: int,
          curves: str) -> tuple[list[dict], list[int], list[ModelKind]]:
    shares = np.array([m.share for m in MODEL_MIX])
    picks = rng.choice(len(MODEL_MIX), size=n_jobs, p=shares / shares.sum())
    if curves == "identical":
        picks[:] = 0
    kinds = [MODEL_MIX[int(k)] for k in picks]
    raw = np.array([k.size for k in kinds]) * rng.lognormal(0.0, 0.5, size=n_jobs)
    if curves == "identical":
        raw[:] = 1.0
    raw *= demand * total_gpus / raw.sum()
    nominal = [max(1, int(round(r / (8 * k.pp)))) * 8 * k.pp for r, k in zip(raw, kinds)]
    weights = rng.choice([0.5, 1.0, 1.0, 1.0, 2.0], size=n_jobs)
    trans = np.round([k.transition_seconds for k in kinds] * rng.lognormal(0.0, 0.25, size=n_jobs), 1)
    if curves in ("identical", "linear-step", "near-linear", "equal-per-gpu") + QUEUED:
        weights[:] = 1.0  # one value per GPU across jobs: the shape that defeats the bound
    if curves == "identical":
        trans[:] = kinds[0].transition_seconds
    types = gpu_type_names(curves) if curves in ADVERSARIAL else ["a800"]
    jobs = []
    for i, (kind, nom) in enumerate(zip(kinds, nominal)):
        if curves == "synthetic":
            table = synthetic_curve(rng, kind, nom, total_gpus, max_counts)
        elif curves == "model":
            table = _model_curve(kind, total_gpus)
        else:
            table = adversarial_curve(
                curves, rng, kind.tp, nom, total_gpus // len(types), max_counts,
                lambda top, mc, g1, kind=kind, nom=nom: synthetic_curve(rng, kind, nom, top, mc,
                                                                        grain=1 if g1 else None))
        jobs.append({"id": f"{kind.name}-{i:04d}", "weight": float(weights[i]),
                     "throughput": {"gpu_type": types[i % len(types)], "tflops": table},
                     "current": {"gpus": 0, "nodes": []},
                     "transition_seconds": float(trans[i])})
    return jobs, nominal, kinds


PLACEMENTS = ("shuffled", "ordered")
PLACEMENT_STREAM = 0x504C  # the second word of the node order's seed: a stream of its own


def _place_current(jobs: list[dict], nominal: list[int], node_ids: list[str], gpus_per_node: int) -> None:
    """Jobs in order take whole nodes (in the order of ``node_ids``) at the largest table count <= nominal
    that fills whole nodes; a job's nodes are listed in cluster order."""
    free = len(node_ids)
    at = 0
    for job, nom in zip(jobs, nominal):
        counts = sorted(int(k) for k in job["throughput"]["tflops"])
        fits = [c for c in counts if c <= min(nom, free * gpus_per_node) and c % gpus_per_node == 0]
        if not fits:
            continue
        c = fits[-1]
        k = c // gpus_per_node
        job["current"] = {"gpus": c, "nodes": sorted(node_ids[at:at + k])}
        at += k
        free -= k


def generate_instance(seed: int, *, gpus: int = 16384, jobs: int = 128, gpus_per_node: int = 8,
                      nodes_per_rack: int = 32, demand: float = 1.25, max_counts: int = 400,
                      failed_nodes: int = 1, curves: str = "synthetic", name: str | None = None,
                      rng: np.random.Generator | None = None, placement: str = "shuffled") -> dict:
    """A v1 instance dict (event: ``failed_nodes`` random nodes fail; 0 for no event; ``placement``:
    ``shuffled`` or ``ordered``, module docstring)."""
    check_options(seed=seed, gpus=gpus, jobs=jobs, gpus_per_node=gpus_per_node, nodes_per_rack=nodes_per_rack,
                  demand=demand, max_counts=max_counts, failed_nodes=failed_nodes)
    if gpus % gpus_per_node or gpus < gpus_per_node:
        raise InvalidInstanceError("--gpus", f"{gpus} is not a positive multiple of {gpus_per_node} GPUs per node")
    if curves not in ("synthetic", "model") + ADVERSARIAL:
        raise InvalidInstanceError("--curves", f"{curves!r}: use one of synthetic, model, "
                                   + ", ".join(ADVERSARIAL))
    if placement not in PLACEMENTS:
        raise InvalidInstanceError("--placement", f"{placement!r}: use one of {', '.join(PLACEMENTS)}")
    rng = rng if rng is not None else np.random.default_rng(seed)
    n_nodes = gpus // gpus_per_node
    node_ids = [f"n{k:05d}" for k in range(n_nodes)]
    types = gpu_type_names(curves) if curves in ADVERSARIAL else ["a800"]
    if n_nodes % len(types):
        raise InvalidInstanceError("--gpus", f"{n_nodes} nodes do not split into {len(types)} GPU types")
    per_type = n_nodes // len(types)  # contiguous blocks of nodes, one per type
    nodes = [{"id": nid, "gpu_type": types[k // per_type], "gpus": gpus_per_node, "failed_gpus": [],
              "rack": f"r{k // nodes_per_rack:04d}"} for k, nid in enumerate(node_ids)]
    job_list, nominal, _ = _jobs(rng, jobs, gpus, demand, max_counts, curves)
    order = np.random.default_rng([seed, PLACEMENT_STREAM])
    for t, gtype in enumerate(types if curves not in QUEUED else ()):  # queued kinds: every job at 0
        mine = [i for i, j in enumerate(job_list) if j["throughput"]["gpu_type"] == gtype]
        block = node_ids[t * per_type:(t + 1) * per_type]
        if placement == "shuffled":
            block = [block[k] for k in order.permutation(len(block))]
        _place_current([job_list[i] for i in mine], [nominal[i] for i in mine], block, gpus_per_node)
    prefix = "jagged" if curves in ("synthetic", "model") else curves
    inst = {
        "schema_version": "1",
        "name": name or f"{prefix}-{gpus}-{jobs}jobs-s{seed}",
        "cluster": {"gpu_types": {t: dict(A800) for t in types}, "nodes": nodes},
        "jobs": job_list,
        "cost": {"node_mtbf_hours": NODE_MTBF_HOURS, "default_transition_seconds": 600.0},
    }
    if failed_nodes > 0:
        picks = sorted(rng.choice(n_nodes, size=min(failed_nodes, n_nodes), replace=False).tolist())
        inst["event"] = {"kind": "failure", "failed_nodes": [node_ids[k] for k in picks], "failed_gpus": []}
    return inst


def generate_scenario(seed: int, *, duration_hours: float = 720.0, **kwargs) -> dict:
    """A scenario dict (docs/format.md, "Scenario"): the instance without event and D_run, plus failures."""
    check_options(duration_hours=duration_hours)
    inst = generate_instance(seed, failed_nodes=0, **kwargs)
    inst["name"] = inst["name"].replace("jagged-", "scenario-", 1)
    inst["cost"] = {"default_transition_seconds": 600.0}
    inst["duration_hours"] = float(duration_hours)
    inst["failures"] = {"node_mtbf_hours": NODE_MTBF_HOURS,
                        "repair_hours": {"median": 12.0, "sigma": 1.0},
                        "severity_mix": dict(SEVERITY_MIX)}
    return inst
