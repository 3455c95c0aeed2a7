"""Layout search: every valid (tp, cp, pp, dp, ep, micro_batch, virtual_stages) of a job.

Rules (Megatron's): tp is a power of two up to the GPUs of a node and divides
the attention heads and the kv heads; pp divides the layers (or layers + 2 with at least four
layers per middle stage, the memory-balanced pipeline, see :func:`~unicron_plan.perf.iteration.stage_layers`);
tp * cp * pp * dp = N (2 cp divides the sequence); ep divides dp and the routed experts;
the global batch is a multiple of micro_batch * dp;
interleaving (virtual_stages v > 1) needs pp > 1, v dividing the layers of a
stage and a number of micro-batches that is a multiple of pp; the layout
fits in HBM. All candidates of a search are evaluated at once with numpy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Optional

import numpy as np

from unicron_plan.errors import InvalidInstanceError
from unicron_plan.perf.iteration import RECOMPUTE_MODES, evaluate, stage_layers
from unicron_plan.perf.library import Efficiency, GpuSpec, ModelSpec, get_gpu, get_model
from unicron_plan.schema.efficiency import MAX_GLOBAL_BATCH, MAX_POINT_GPUS, MAX_SEQ_LEN

#: What a caller may ask for: a fixed recomputation mode, or "auto" (per GPU count, the
#: fastest of the modes whose layout fits in memory).
RECOMPUTE_CHOICES = ("auto",) + RECOMPUTE_MODES


def _check_args(model, gpu_type, global_batch, seq_len, recompute, max_gpus, gpus):
    get_model(model)
    get_gpu(gpu_type)
    for name, val, top in (("global_batch", global_batch, MAX_GLOBAL_BATCH), ("seq_len", seq_len, MAX_SEQ_LEN)):
        if isinstance(val, bool) or not isinstance(val, (int, np.integer)) or not 1 <= val <= top:
            raise InvalidInstanceError(name, f"{val!r} is not an integer in [1, {top}]")
    if recompute not in RECOMPUTE_CHOICES:
        raise InvalidInstanceError("recompute", f"{recompute!r} is not one of {', '.join(RECOMPUTE_CHOICES)}")
    if max_gpus is not None and (isinstance(max_gpus, bool) or not isinstance(max_gpus, (int, np.integer))
                                 or not 1 <= max_gpus <= MAX_POINT_GPUS):
        raise InvalidInstanceError("max_gpus", f"{max_gpus!r} is not an integer in [1, {MAX_POINT_GPUS}]")
    for k, n in enumerate(gpus or ()):
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 1 <= n <= MAX_POINT_GPUS:
            raise InvalidInstanceError(f"gpus[{k}]", f"{n!r} is not an integer in [1, {MAX_POINT_GPUS}]")


MAX_MICRO_BATCH = 32


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, int(n ** 0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


@dataclass
class Candidates:
    """All evaluated layouts (one entry each), with throughput and memory."""

    gpus: np.ndarray
    tp: np.ndarray
    pp: np.ndarray
    dp: np.ndarray
    micro_batch: np.ndarray
    virtual_stages: np.ndarray
    ep: np.ndarray
    cp: np.ndarray
    iteration_seconds: np.ndarray
    memory_bytes: np.ndarray
    fits: np.ndarray
    model_flops: float
    hardware_flops: float

    def __len__(self) -> int:
        return int(self.gpus.size)


def tensor_parallel_sizes(model: ModelSpec, gpu: GpuSpec) -> list[int]:
    """Powers of two up to gpus_per_node that divide heads and kv heads."""
    out, t = [], 1
    while t <= gpu.gpus_per_node:
        if model.heads % t == 0 and model.kv_heads % t == 0:
            out.append(t)
        t *= 2
    return out


def expert_parallel_sizes(model: ModelSpec, dp: int) -> list[int]:
    """Expert-parallel sizes: divisors of dp that divide the routed experts ([1] for dense models).

    Megatron-Core carves the expert-parallel group out of the data-parallel
    ranks (expert tensor parallelism = tp), so ep divides dp and the experts.
    """
    if not model.moe:
        return [1]
    return [e for e in _divisors(dp) if model.experts % e == 0]


#: Context parallelism is searched only while every GPU keeps at least this many tokens of a
#: sequence (shorter chunks leave the ring's transfers exposed and only add candidates).
MIN_CP_CHUNK = 4096


def context_parallel_sizes(seq_len: int) -> list[int]:
    """Context-parallel sizes: powers of two with seq_len divisible by 2 cp (Megatron's
    load-balanced causal split) and at least :data:`MIN_CP_CHUNK` tokens per GPU."""
    out, c = [1], 2
    while seq_len % (2 * c) == 0 and seq_len // c >= MIN_CP_CHUNK:
        out.append(c)
        c *= 2
    return out


def pipeline_sizes(model: ModelSpec) -> list[int]:
    """Pipeline depths allowed by the layer count."""
    pps = np.arange(1, model.layers + 3)
    return [int(p) for p in pps[stage_layers(model.layers, pps)[3]]]


def enumerate_layouts(model: ModelSpec, gpu: GpuSpec, global_batch: int,
                      counts: Optional[Iterable[int]] = None, max_gpus: Optional[int] = None,
                      interleave: bool = True, seq_len: int = 0) -> dict[str, np.ndarray]:
    """Arrays of every structurally valid layout with N in ``counts`` (or N <= max_gpus)."""
    wanted = None if counts is None else set(int(n) for n in counts)
    limit = max(wanted) if wanted else (max_gpus or 0)
    rows = []
    for cp in context_parallel_sizes(seq_len):
        rows.extend(_layouts(model, gpu, global_batch, wanted, limit, interleave, cp))
    arr = np.array(rows, dtype=np.int64).reshape(-1, 8)
    names = ("gpus", "tp", "pp", "dp", "micro_batch", "virtual_stages", "ep", "cp")
    return {k: arr[:, i] for i, k in enumerate(names)}


def _layouts(model, gpu, global_batch, wanted, limit, interleave, cp) -> list[tuple]:
    rows = []
    for t in tensor_parallel_sizes(model, gpu):
        for p in pipeline_sizes(model):
            if t * p * cp > limit:
                continue
            slots = model.layers // p if model.layers % p == 0 else (model.layers + 2) // p
            vs = [v for v in _divisors(slots) if v == 1 or (p > 1 and interleave)]
            for d in _divisors(global_batch):
                n = t * p * d * cp
                if n > limit or (wanted is not None and n not in wanted):
                    continue
                eps = expert_parallel_sizes(model, d)
                per_replica = global_batch // d
                for b in _divisors(per_replica):
                    if b > MAX_MICRO_BATCH:
                        break
                    m = per_replica // b
                    for v in vs:
                        if v > 1 and m % p:
                            continue
                        for e in eps:
                            rows.append((n, t, p, d, b, v, e, cp))
    return rows


def search(model: ModelSpec, gpu: GpuSpec, eff: Efficiency, global_batch: int, seq_len: int,
           recompute: str, counts: Optional[Iterable[int]] = None,
           max_gpus: Optional[int] = None, interleave: bool = True) -> Candidates:
    """Evaluate every valid layout (memory fit is recorded in ``fits``, not filtered)."""
    lay = enumerate_layouts(model, gpu, global_batch, counts, max_gpus, interleave, seq_len)
    res = evaluate(model, gpu, eff, global_batch, seq_len, recompute, lay["tp"], lay["pp"],
                   lay["dp"], lay["micro_batch"], lay["virtual_stages"], lay["ep"], lay["cp"])
    return Candidates(iteration_seconds=np.broadcast_to(res.iteration_seconds, lay["gpus"].shape),
                      memory_bytes=np.broadcast_to(res.memory_bytes, lay["gpus"].shape),
                      fits=np.broadcast_to(res.fits, lay["gpus"].shape),
                      model_flops=res.model_flops, hardware_flops=res.hardware_flops, **lay)


def best_per_count(c: Candidates) -> np.ndarray:
    """Indices into ``c`` of the fastest fitting layout for each GPU count, by count."""
    ok = np.flatnonzero(c.fits)
    if ok.size == 0:
        return ok
    # lexsort: last key is primary. Ties broken towards fewer pipeline stages,
    # then smaller tp, then smaller micro-batch, so that results are deterministic.
    order = ok[np.lexsort((c.cp[ok], c.ep[ok], c.virtual_stages[ok], c.micro_batch[ok], c.tp[ok], c.pp[ok],
                           c.iteration_seconds[ok], c.gpus[ok]))]
    _, first = np.unique(c.gpus[order], return_index=True)
    return order[first]


def ranked(c: Candidates, n: int) -> list[int]:
    """Indices of the fitting layouts for ``n`` GPUs, fastest first."""
    idx = np.flatnonzero(c.fits & (c.gpus == n))
    return [int(i) for i in idx[np.argsort(c.iteration_seconds[idx], kind="stable")]]


def rank_layouts(model: str, gpu_type: str, global_batch: int, seq_len: int, gpus: int,
                 recompute: str = "auto", top: Optional[int] = None, stack: Optional[str] = None,
                 efficiency_file: Optional[str] = None) -> list[dict]:
    """Fitting layouts on ``gpus`` GPUs, fastest first, one per (tp, pp, dp) with its best
    micro-batch, interleaving and (under ``recompute="auto"``) recomputation mode: dicts with
    the layout, hardware/model TFLOP/s per GPU, GiB and iteration seconds.

    Example::

        >>> [(r["tp"], r["pp"]) for r in rank_layouts("gpt3-175b", "a100", 1536, 2048, 1536, top=3)]  # doctest: +SKIP
    """
    from unicron_plan.perf.iteration import RECOMPUTE_MODES
    from unicron_plan.perf.library import get_efficiency, get_gpu, get_model

    _check_args(model, gpu_type, global_batch, seq_len, recompute, None, [gpus])
    m, g = get_model(model), get_gpu(gpu_type)
    eff = get_efficiency(gpu_type, stack, efficiency_file)
    rows = []
    for mode in (RECOMPUTE_MODES if recompute == "auto" else (recompute,)):
        c = search(m, g, eff, global_batch, seq_len, mode, counts=[gpus])
        for i in ranked(c, gpus):
            t = float(c.iteration_seconds[i])
            rows.append({"tp": int(c.tp[i]), "pp": int(c.pp[i]), "dp": int(c.dp[i]),
                         "micro_batch": int(c.micro_batch[i]), "virtual_stages": int(c.virtual_stages[i]),
                         "ep": int(c.ep[i]), "cp": int(c.cp[i]), "recompute": mode, "iteration_seconds": t,
                         "hardware_tflops_per_gpu": c.hardware_flops / t / gpus / 1e12,
                         "model_tflops_per_gpu": c.model_flops / t / gpus / 1e12,
                         "memory_gib_per_gpu": float(c.memory_bytes[i]) / float(1 << 30)})
    rows.sort(key=lambda r: r["iteration_seconds"])  # stable: ties keep the mode order
    out, seen = [], set()
    for r in rows:
        key = (r["tp"], r["pp"], r["dp"], r["cp"])
        if key in seen:
            continue
        seen.add(key)
        out.append(r)
        if top is not None and len(out) >= top:
            break
    return out
