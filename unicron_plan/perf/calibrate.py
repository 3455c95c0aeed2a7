"""Fit the efficiency constants of a GPU type from a few measured iterations.

Input JSON::

    {"gpu_type": "a100", "stack": "megatron-sc21",
     "fit": ["gemm_efficiency", "nvlink_efficiency"],
     "also_best": false,
     "points": [{"model": "gpt3-13b", "global_batch": 512, "seq_len": 2048,
                 "recompute": "full", "tp": 2, "pp": 1, "dp": 32,
                 "micro_batch": 1, "virtual_stages": 1,
                 "iteration_seconds": 9.8}]}

Each point gives ``iteration_seconds`` or ``hardware_tflops_per_gpu``;
``micro_batch`` and ``virtual_stages`` may be omitted (then the fastest
choice is taken, as the measured run presumably used). With ``also_best`` the
fastest layout of the point's GPU count must also match the measurement.
The fit minimises the squared log ratio of predicted to measured time with
scipy's bounded least squares; the result is a full efficiency document (the
base one with this GPU type's constants replaced), written atomically.

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

from unicron_plan.io import read_json, write_atomic
from unicron_plan.errors import InvalidInstanceError
from unicron_plan.perf.iteration import RECOMPUTE_MODES, iteration_flops
from unicron_plan.perf.layouts import search
from unicron_plan.perf.library import FIT_NAMES, Efficiency, efficiency_data, get_efficiency, get_gpu, get_model

#: Physically plausible ranges of the constants; the fit stays inside them.
BOUNDS = {"gemm_efficiency": (0.3, 0.95), "attention_efficiency": (0.1, 0.9),
          "hbm_efficiency": (0.3, 0.9), "nvlink_efficiency": (0.3, 0.9),
          "network_efficiency": (0.3, 0.9), "layer_overhead_us": (0.0, 200.0),
          "p2p_overhead_us": (0.0, 5000.0)}
DEFAULT_FIT = ("gemm_efficiency", "attention_efficiency", "nvlink_efficiency", "network_efficiency")


def _point_time(p: dict, k: int, gpu_type: str, eff: Efficiency, best: bool) -> float:
    """Predicted iteration seconds of point ``p`` under ``eff`` (its layout, or the best one)."""
    m, g = get_model(p["model"], f"points[{k}].model"), get_gpu(gpu_type)
    n = p["tp"] * p["pp"] * p["dp"]
    c = search(m, g, eff, p["global_batch"], p["seq_len"], p.get("recompute", "full"), counts=[n])
    sel = c.fits & (c.gpus == n)
    if not best:
        sel &= (c.tp == p["tp"]) & (c.pp == p["pp"]) & (c.dp == p["dp"])
        if "micro_batch" in p:
            sel &= c.micro_batch == p["micro_batch"]
        if "virtual_stages" in p:
            sel &= c.virtual_stages == p["virtual_stages"]
    if not sel.any():
        return math.inf
    return float(c.iteration_seconds[sel].min())


def _measured_seconds(p: dict, k: int) -> float:
    if "iteration_seconds" in p:
        return float(p["iteration_seconds"])
    if "hardware_tflops_per_gpu" in p:
        m = get_model(p["model"], f"points[{k}].model")
        n = p["tp"] * p["pp"] * p["dp"]
        _, hw = iteration_flops(m, p["global_batch"], p["seq_len"], p.get("recompute", "full"))
        return hw / (float(p["hardware_tflops_per_gpu"]) * 1e12 * n)
    raise InvalidInstanceError(f"points[{k}]", "give iteration_seconds or hardware_tflops_per_gpu")


def _validate(doc: dict) -> None:
    if not isinstance(doc, dict):
        raise InvalidInstanceError("(top level)", "a points file must be a JSON object")
    if not isinstance(doc.get("points"), list) or not doc["points"]:
        raise InvalidInstanceError("points", "a non-empty list of measured points is required")
    get_gpu(doc.get("gpu_type", ""), "gpu_type")
    for name in doc.get("fit", DEFAULT_FIT):
        if name not in FIT_NAMES:
            raise InvalidInstanceError("fit", f"unknown constant {name!r}; valid: {', '.join(FIT_NAMES)}")
    for k, p in enumerate(doc["points"]):
        for key in ("tp", "pp", "dp", "global_batch", "seq_len"):
            if not isinstance(p.get(key), int) or p[key] < 1:
                raise InvalidInstanceError(f"points[{k}].{key}", f"{p.get(key)!r} is not an integer >= 1")
        if p.get("recompute", "full") not in RECOMPUTE_MODES:
            raise InvalidInstanceError(f"points[{k}].recompute", f"{p['recompute']!r} is not one of "
                                       + ", ".join(RECOMPUTE_MODES))


def fit_constants(doc: dict, base_file: Optional[str] = None) -> tuple[dict, float]:
    """Fit ``doc``'s constants; returns (the new constants, RMS log error)."""
    from scipy.optimize import least_squares

    _validate(doc)
    gpu_type, stack = doc["gpu_type"], doc.get("stack")
    base = get_efficiency(gpu_type, stack, base_file)
    names = list(doc.get("fit", DEFAULT_FIT))
    measured = [_measured_seconds(p, k) for k, p in enumerate(doc["points"])]

    def make(x) -> Efficiency:
        upd = {n: float(v) for n, v in zip(names, x)}
        return base.model_copy(update={"constants": base.constants.model_copy(update=upd)})

    def residuals(x):
        eff = make(x)
        out = []
        for k, (p, t) in enumerate(zip(doc["points"], measured)):
            out.append(min(5.0, math.log(_point_time(p, k, gpu_type, eff, False) / t)))
            if doc.get("also_best"):
                out.append(min(5.0, math.log(_point_time(p, k, gpu_type, eff, True) / t)))
        return out

    lo = [BOUNDS[n][0] for n in names]
    hi = [BOUNDS[n][1] for n in names]
    x0 = [min(max(getattr(base.constants, n), a), b) for n, a, b in zip(names, lo, hi)]
    res = least_squares(residuals, x0, bounds=(lo, hi), diff_step=1e-3)
    consts = base.constants.model_dump()
    consts.update({n: float(v) for n, v in zip(names, res.x)})
    rms = float(np.sqrt(np.mean(np.square(res.fun))))
    consts["source"] = (f"fitted by unicron_plan.perf.calibrate to {len(measured)} points "
                        f"(constants {', '.join(names)}; RMS log error {rms:.4f})")
    return consts, rms


def calibrate(points_file: str, out_file: str, base_file: Optional[str] = None) -> dict:
    """Fit the constants of ``points_file`` and write a new efficiency file to ``out_file``.

    Returns the fitted constants (with their RMS log error in ``source``).
    """
    doc = read_json(points_file)  # strict: missing file, bad JSON, NaN -> InvalidInstanceError
    consts, _ = fit_constants(doc, base_file)
    data = json.loads(json.dumps(efficiency_data(base_file)))
    stack = doc.get("stack") or data["default_stack"][doc["gpu_type"]]
    data["constants"].setdefault(doc["gpu_type"], {})[stack] = consts
    write_atomic(Path(out_file), json.dumps(data, indent=1, sort_keys=True) + "\n")
    return consts


__all__ = ["calibrate", "fit_constants", "BOUNDS", "DEFAULT_FIT"]
