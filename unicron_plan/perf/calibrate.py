"""Fit the efficiency constants of a GPU type from a few measured iterations.

The input is a points file (:class:`~unicron_plan.schema.efficiency.MeasuredPoints`,
JSON Schema from ``unicron-plan schema points``; format in docs/format.md)::

    {"gpu_type": "a100", "stack": "megatron-sc21",
     "fit": ["gemm_efficiency", "nvlink_efficiency"],
     "points": [{"model": "gpt3-13b", "global_batch": 512, "seq_len": 2048,
                 "recompute": "full", "tp": 2, "pp": 1, "dp": 32,
                 "iteration_seconds": 9.8}]}

Each point gives ``iteration_seconds`` or ``hardware_tflops_per_gpu``;
``micro_batch`` and ``virtual_stages`` may be omitted (then the fastest
choice is taken, as the measured run presumably used). With ``also_best`` the
fastest layout of the point's GPU count must also match the measurement.
The fit minimises the squared log ratio of predicted to measured time with
scipy's bounded least squares; the result is a full efficiency document (the
base one with this GPU type's constants replaced), written atomically.

A point whose layout is not valid or does not fit in memory is bad input
(:class:`~unicron_plan.errors.InvalidInstanceError`, exit 2); a fit that does
not converge, or whose RMS log error stays above :data:`MAX_RMS_LOG_ERROR`,
raises :class:`~unicron_plan.errors.FitFailedError` (exit 1) and writes nothing.

Example::

    >>> from unicron_plan.perf.calibrate import calibrate  # doctest: +SKIP
    >>> calibrate("points.json", "efficiency.json")  # doctest: +SKIP
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Optional

import numpy as np

from unicron_plan.errors import FitFailedError, InvalidInstanceError
from unicron_plan.io import parse_model, read_json, write_atomic
from unicron_plan.perf.iteration import iteration_flops
from unicron_plan.perf.layouts import search
from unicron_plan.perf.library import Efficiency, efficiency_data, get_efficiency, get_gpu, get_model
from unicron_plan.schema.efficiency import MeasuredPoint, MeasuredPoints

#: Physically plausible ranges of the constants; the fit stays inside them.
BOUNDS = {"gemm_efficiency": (0.3, 0.95), "attention_efficiency": (0.1, 0.9),
          "hbm_efficiency": (0.3, 0.9), "nvlink_efficiency": (0.3, 0.9),
          "network_efficiency": (0.3, 0.9), "layer_overhead_us": (0.0, 200.0),
          "p2p_overhead_us": (0.0, 5000.0)}
DEFAULT_FIT = tuple(MeasuredPoints.model_fields["fit"].default)
#: Largest RMS log error (predicted vs measured iteration time) of a fit that is accepted:
#: 0.2 is about 22% off on a typical point.
MAX_RMS_LOG_ERROR = 0.2


def _point_time(p: MeasuredPoint, gpu_type: str, eff: Efficiency, best: bool) -> float:
    """Predicted iteration seconds of point ``p`` under ``eff`` (its layout, or the best one)."""
    m, g = get_model(p.model), get_gpu(gpu_type)
    n = p.gpus
    c = search(m, g, eff, p.global_batch, p.seq_len, p.recompute, counts=[n])
    sel = c.fits & (c.gpus == n)
    if not best:
        sel &= (c.tp == p.tp) & (c.pp == p.pp) & (c.dp == p.dp) & (c.cp == p.cp)
        if p.ep is not None:
            sel &= c.ep == p.ep
        if p.micro_batch is not None:
            sel &= c.micro_batch == p.micro_batch
        if p.virtual_stages is not None:
            sel &= c.virtual_stages == p.virtual_stages
    if not sel.any():
        return math.inf
    return float(c.iteration_seconds[sel].min())


def _measured_seconds(p: MeasuredPoint) -> float:
    if p.iteration_seconds is not None:
        return p.iteration_seconds
    _, hw = iteration_flops(get_model(p.model), p.global_batch, p.seq_len, p.recompute)
    return hw / (p.hardware_tflops_per_gpu * 1e12 * p.gpus)


def _check_points(doc: MeasuredPoints, base: Efficiency) -> None:
    """Every point names a library model and a valid layout that fits (else exit 2, naming it)."""
    get_gpu(doc.gpu_type, "gpu_type")
    for k, p in enumerate(doc.points):
        get_model(p.model, f"points[{k}].model")
        if math.isinf(_point_time(p, doc.gpu_type, base, False)):
            raise InvalidInstanceError(
                f"points[{k}]", f"tp={p.tp} cp={p.cp} pp={p.pp} dp={p.dp} ep={p.ep} (micro_batch {p.micro_batch}, virtual_stages "
                f"{p.virtual_stages}) is not a valid layout of {p.model} that fits in {doc.gpu_type} memory "
                f"with global batch {p.global_batch}")


def fit_constants(doc: MeasuredPoints, base_file: Optional[str] = None) -> tuple[dict, float]:
    """Fit ``doc``'s constants; returns (the new constants, RMS log error).

    Raises FitFailedError when the fit does not converge or stays above MAX_RMS_LOG_ERROR.
    """
    from unicron_plan.extras import require

    least_squares = require("scipy.optimize", "calibrate").least_squares

    base = get_efficiency(doc.gpu_type, doc.stack, base_file)
    _check_points(doc, base)
    names = list(doc.fit)
    measured = [_measured_seconds(p) for p in doc.points]

    def make(x) -> Efficiency:
        upd = {n: float(v) for n, v in zip(names, x)}
        return base.model_copy(update={"constants": base.constants.model_copy(update=upd)})

    def residuals(x):
        eff = make(x)
        out = []
        for p, t in zip(doc.points, measured):
            out.append(min(5.0, math.log(_point_time(p, doc.gpu_type, eff, False) / t)))
            if doc.also_best:
                out.append(min(5.0, math.log(_point_time(p, doc.gpu_type, eff, True) / t)))
        return out

    lo = [BOUNDS[n][0] for n in names]
    hi = [BOUNDS[n][1] for n in names]
    x0 = [min(max(getattr(base.constants, n), a), b) for n, a, b in zip(names, lo, hi)]
    res = least_squares(residuals, x0, bounds=(lo, hi), diff_step=1e-3, max_nfev=200 * (len(names) + 1))
    rms = float(np.sqrt(np.mean(np.square(res.fun))))
    if res.status <= 0:
        raise FitFailedError(f"the fit did not converge ({res.message}); RMS log error {rms:.4f}")
    if not rms <= MAX_RMS_LOG_ERROR:
        worst = int(np.argmax(np.abs(res.fun)))
        raise FitFailedError(
            f"no constants within their plausible ranges explain the points: RMS log error {rms:.4f} > "
            f"{MAX_RMS_LOG_ERROR} (worst residual {float(res.fun[worst]):+.3f} at point {worst if not doc.also_best else worst // 2}); "
            f"check the points' layouts and times, or fit more constants with 'fit'")
    consts = base.constants.model_dump()
    consts.update({n: float(v) for n, v in zip(names, res.x)})
    consts["source"] = (f"fitted by unicron-plan calibrate to {len(measured)} points "
                        f"(constants {', '.join(names)}; RMS log error {rms:.4f})")
    return consts, rms


def load_points(points_file: str) -> MeasuredPoints:
    """Read and check a points file (exit 2 on anything malformed, naming the field)."""
    return parse_model(MeasuredPoints, read_json(points_file))


def calibrate(points_file: str, out_file: str, base_file: Optional[str] = None) -> dict:
    """Fit the constants of ``points_file`` and write a new efficiency file to ``out_file``.

    Returns the fitted constants (with their RMS log error in ``source``).
    """
    doc = load_points(points_file)
    consts, _ = fit_constants(doc, base_file)
    data = json.loads(json.dumps(efficiency_data(base_file)))
    stack = doc.stack or data["default_stack"][doc.gpu_type]
    data["constants"].setdefault(doc.gpu_type, {})[stack] = consts
    write_atomic(Path(out_file), json.dumps(data, indent=1, sort_keys=True) + "\n")
    return consts


__all__ = ["calibrate", "fit_constants", "load_points", "BOUNDS", "DEFAULT_FIT", "MAX_RMS_LOG_ERROR"]
