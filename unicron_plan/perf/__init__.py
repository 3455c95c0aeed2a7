"""Analytical throughput model: derive a job's TFLOP/s table from its architecture.

Example::

    >>> from unicron_plan.perf import derive_table
    >>> curve = derive_table("gpt3-175b", "a100", global_batch=1536, seq_len=2048, gpus=[384])
    >>> sorted(curve.layout(384))
    ['dp', 'micro_batch', 'pp', 'tp']
    >>> round(curve.tflops_table()[384] / 384) > 100
    True
"""

from __future__ import annotations

from functools import lru_cache
from typing import Optional

from unicron_plan.perf import library as _library
from unicron_plan.perf.curve import Curve, CurvePoint
from unicron_plan.perf.iteration import GIB, RECOMPUTE_MODES
from unicron_plan.perf.layouts import RECOMPUTE_CHOICES, _check_args, best_per_count, rank_layouts, search
from unicron_plan.perf.library import _mtime, get_efficiency, get_gpu, get_model
from unicron_plan.perf.transition import transition_seconds

__all__ = ["derive_table", "rank_layouts", "Curve", "CurvePoint", "transition_seconds", "DEFAULT_MAX_GPUS",
           "RECOMPUTE_CHOICES"]

#: Largest GPU count considered when neither ``max_gpus`` nor ``gpus`` is given.
DEFAULT_MAX_GPUS = 4096


def derive_table(model: str, gpu_type: str, global_batch: int, seq_len: int,
                 recompute: str = "auto", max_gpus: Optional[int] = None,
                 gpus: Optional[list[int]] = None, *, stack: Optional[str] = None,
                 efficiency_file: Optional[str] = None, constants=None) -> Curve:
    """Best layout and throughput of ``model`` on ``gpu_type`` at each GPU count.

    Counts are ``gpus`` when given (then ``max_gpus`` is ignored), otherwise
    every N <= ``max_gpus`` (default :data:`DEFAULT_MAX_GPUS`) with at least
    one valid layout; counts without a valid, fitting layout are absent.
    ``recompute`` "auto" (the default; None means the same) picks, per count,
    the fastest of "none", "selective" and "full" whose layout fits; a mode
    name forces that mode. ``stack`` and ``efficiency_file`` select
    other efficiency constants (see :mod:`unicron_plan.perf.calibrate`);
    ``constants`` (an :class:`~unicron_plan.schema.efficiency.EfficiencyConstants`,
    e.g. an instance's ``efficiency[gpu_type]``) replaces the selected constants.
    Results are cached per arguments; the returned Curve is immutable.
    """
    if recompute is None:  # Throughput.recompute is optional; absent means auto
        recompute = "auto"
    _check_args(model, gpu_type, global_batch, seq_len, recompute, max_gpus, gpus)
    key = None if gpus is None else tuple(sorted(set(int(n) for n in gpus)))
    return _derive(model, gpu_type, int(global_batch), int(seq_len), recompute,
                   None if max_gpus is None else int(max_gpus), key, stack, efficiency_file,
                   _mtime(efficiency_file), constants)


@lru_cache(maxsize=256)
def _derive(model_name, gpu_type, global_batch, seq_len, recompute, max_gpus, counts, stack,
            efficiency_file, efficiency_mtime, constants) -> Curve:
    m, g = get_model(model_name), get_gpu(gpu_type)
    eff = get_efficiency(gpu_type, stack, efficiency_file)
    if constants is not None:  # frozen pydantic model: hashable, so the cache keys on it
        eff = eff.model_copy(update={"constants": constants})
    if counts is None and max_gpus is None:
        max_gpus = DEFAULT_MAX_GPUS
    modes = RECOMPUTE_MODES if recompute == "auto" else (recompute,)
    best: dict[int, CurvePoint] = {}
    tokens = float(global_batch) * seq_len
    for mode in modes:
        c = search(m, g, eff, global_batch, seq_len, mode, counts=counts, max_gpus=max_gpus)
        for i in best_per_count(c):
            n, t_iter = int(c.gpus[i]), float(c.iteration_seconds[i])
            if n in best and best[n].iteration_seconds <= t_iter:
                continue  # ties keep the earlier mode of RECOMPUTE_MODES (the one that recomputes more)
            hw = c.hardware_flops / t_iter / n / 1e12
            mf = c.model_flops / t_iter / n / 1e12
            best[n] = CurvePoint(gpus=n, tp=int(c.tp[i]), pp=int(c.pp[i]), dp=int(c.dp[i]),
                                 micro_batch=int(c.micro_batch[i]), hardware_tflops_per_gpu=hw,
                                 model_tflops_per_gpu=mf, mfu=mf / g.peak_tflops,
                                 tokens_per_second=tokens / t_iter,
                                 memory_gib_per_gpu=float(c.memory_bytes[i]) / GIB,
                                 virtual_stages=int(c.virtual_stages[i]), iteration_seconds=t_iter,
                                 recompute=mode, ep=int(c.ep[i]), cp=int(c.cp[i]))
    points = [best[n] for n in sorted(best)]
    return Curve(model=model_name, gpu_type=gpu_type, global_batch=global_batch, seq_len=seq_len,
                 recompute=recompute, points=points)


def clear_caches() -> None:
    """Forget every loaded data file and derived table (after editing the shipped JSON in place)."""
    _library.clear_caches()
    _derive.cache_clear()
