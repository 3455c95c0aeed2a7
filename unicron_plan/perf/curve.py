"""Throughput curves: the best layout and its throughput at each GPU count."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from unicron_plan.errors import InvalidInstanceError

#: Field names of a point in the curve JSON (docs/format.md, "Curve"), in order.
POINT_FIELDS = ("gpus", "tp", "pp", "dp", "micro_batch", "hardware_tflops_per_gpu",
                "model_tflops_per_gpu", "mfu", "tokens_per_second", "memory_gib_per_gpu")


@dataclass(frozen=True)
class CurvePoint:
    """The best layout at one GPU count and what it achieves.

    ``virtual_stages`` (interleaved pipeline chunks per GPU, 1 = plain 1F1B) and
    ``iteration_seconds`` are kept on the object but not in the docs/format.md JSON.
    """

    gpus: int
    tp: int
    pp: int
    dp: int
    micro_batch: int
    hardware_tflops_per_gpu: float
    model_tflops_per_gpu: float
    mfu: float
    tokens_per_second: float
    memory_gib_per_gpu: float
    virtual_stages: int = 1
    iteration_seconds: float = 0.0

    def to_dict(self) -> dict:
        """The point as in docs/format.md (rounded for reading; exact values stay on the object)."""
        d = asdict(self)
        out = {k: d[k] for k in POINT_FIELDS}
        for k in ("hardware_tflops_per_gpu", "model_tflops_per_gpu", "memory_gib_per_gpu"):
            out[k] = round(out[k], 3)
        out["mfu"] = round(out["mfu"], 5)
        out["tokens_per_second"] = round(out["tokens_per_second"], 1)
        return out


@dataclass(frozen=True)
class Curve:
    """A derived throughput table: one :class:`CurvePoint` per GPU count with a valid layout."""

    model: str
    gpu_type: str
    global_batch: int
    seq_len: int
    recompute: str
    points: list[CurvePoint] = field(default_factory=list)

    def tflops_table(self) -> dict[int, float]:
        """Aggregate achieved TFLOP/s of the whole job per GPU count.

        Hardware FLOPs (recomputation included, Narayanan et al.'s accounting)
        times the GPU count, as the instance's ``throughput.tflops`` expects.
        """
        return {p.gpus: p.hardware_tflops_per_gpu * p.gpus for p in self.points}

    def point(self, n: int) -> CurvePoint:
        """The point at ``n`` GPUs; InvalidInstanceError when no layout exists there."""
        for p in self.points:
            if p.gpus == n:
                return p
        raise InvalidInstanceError(
            "gpus", f"{self.model} has no valid layout on {n} {self.gpu_type} GPUs "
                    f"with global batch {self.global_batch}")

    def layout(self, n: int) -> dict:
        """The best layout at ``n`` GPUs: {"tp", "pp", "dp", "micro_batch"}."""
        p = self.point(n)
        return {"tp": p.tp, "pp": p.pp, "dp": p.dp, "micro_batch": p.micro_batch}

    def to_dict(self) -> dict:
        """The curve as the docs/format.md "Curve" object."""
        return {"model": self.model, "gpu_type": self.gpu_type, "global_batch": self.global_batch,
                "seq_len": self.seq_len, "points": [p.to_dict() for p in self.points]}

    def to_json(self) -> str:
        """Canonical JSON of :meth:`to_dict` (docs/format.md field names)."""
        return json.dumps(self.to_dict(), indent=None, separators=(", ", ": "))
