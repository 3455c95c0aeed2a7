"""Throughput curves: the best layout and its throughput at each GPU count."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from unicron_plan.errors import InvalidInstanceError

#: Field names of a point in the curve JSON (docs/format.md, "Curve"), in order; the last
#: two (the interleaving and the recomputation mode of the layout) are additions to the contract.
POINT_FIELDS = ("gpus", "tp", "pp", "dp", "micro_batch", "hardware_tflops_per_gpu",
                "model_tflops_per_gpu", "mfu", "tokens_per_second", "memory_gib_per_gpu",
                "virtual_stages", "recompute", "ep", "cp")


@dataclass(frozen=True)
class CurvePoint:
    """The best layout at one GPU count and what it achieves.

    ``virtual_stages`` (interleaved pipeline chunks per GPU, 1 = plain 1F1B) and
    ``recompute`` (the activation recomputation the layout runs with) are in the
    JSON; ``iteration_seconds`` is kept on the object only.
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
    recompute: str = "full"
    ep: int = 1
    cp: int = 1

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
        """Aggregate achieved TFLOP/s of the whole job per GPU count, as ``throughput.tflops``.

        Counted in model FLOPs (the work of the model, without recomputation), so
        that counts whose best layouts recompute differently compare on the
        useful work they do: the table is proportional to tokens per second.
        """
        return {p.gpus: p.model_tflops_per_gpu * p.gpus for p in self.points}

    def point(self, n: int) -> CurvePoint:
        """The point at ``n`` GPUs; InvalidInstanceError when no layout exists there."""
        for p in self.points:
            if p.gpus == n:
                return p
        raise InvalidInstanceError(
            "gpus", f"{self.model} has no valid layout on {n} {self.gpu_type} GPUs "
                    f"with global batch {self.global_batch}")

    def layout(self, n: int) -> dict:
        """The best layout at ``n`` GPUs: {"tp", "pp", "dp", "micro_batch", "virtual_stages",
        "recompute"}, with "ep" (expert parallelism, carved out of dp) and "cp" (context
        parallelism; tp * cp * pp * dp GPUs) when they are above 1."""
        p = self.point(n)
        out = {"tp": p.tp, "pp": p.pp, "dp": p.dp, "micro_batch": p.micro_batch,
               "virtual_stages": p.virtual_stages, "recompute": p.recompute}
        if p.ep > 1:
            out["ep"] = p.ep
        if p.cp > 1:
            out["cp"] = p.cp
        return out

    def to_dict(self) -> dict:
        """The curve as the docs/format.md "Curve" object."""
        return {"model": self.model, "gpu_type": self.gpu_type, "global_batch": self.global_batch,
                "seq_len": self.seq_len, "recompute": self.recompute, "points": [p.to_dict() for p in self.points]}

    def to_json(self) -> str:
        """Canonical JSON of :meth:`to_dict` (docs/format.md field names)."""
        return json.dumps(self.to_dict(), indent=None, separators=(", ", ": "))
