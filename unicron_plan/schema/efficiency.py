"""Efficiency constants of one GPU type under one software stack, and the measured points
that ``unicron-plan calibrate`` fits them to (pydantic models only)."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import ConfigDict, Field, model_validator

from unicron_plan.schema.base import StrictModel

#: Names of the constants a fit may move (in the order of :class:`EfficiencyConstants`).
FIT_NAMES = ("gemm_efficiency", "attention_efficiency", "hbm_efficiency",
             "nvlink_efficiency", "network_efficiency", "layer_overhead_us", "p2p_overhead_us")

#: Largest sizes a points file may name: bounds on the work one point can cause.
MAX_GLOBAL_BATCH = 1 << 24
MAX_SEQ_LEN = 1 << 22
MAX_POINT_GPUS = 1 << 20
MAX_POINTS = 1000


class EfficiencyConstants(StrictModel):
    """The fitted efficiency constants of one GPU type under one stack."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, frozen=True,
                              validate_default=True)

    gemm_efficiency: float = Field(gt=0, le=1, description="Achieved fraction of peak in dense GEMMs.")
    attention_efficiency: float = Field(gt=0, le=1,
                                        description="Achieved fraction of peak in attention score/context math.")
    hbm_efficiency: float = Field(gt=0, le=1, description="Achieved fraction of HBM bandwidth in element-wise kernels.")
    nvlink_efficiency: float = Field(gt=0, le=1, description="Achieved fraction of NVLink bandwidth in collectives.")
    network_efficiency: float = Field(gt=0, le=1, description="Achieved fraction of network bandwidth.")
    layer_overhead_us: float = Field(ge=0, le=1e6,
                                     description="Fixed time per layer, micro-batch and pass (launches, syncs).")
    p2p_overhead_us: float = Field(ge=0, le=1e7,
                                   description="Fixed time of one pipeline send/receive (latency, synchronisation).")
    source: str = Field(default="", max_length=2000)


class MeasuredPoint(StrictModel):
    """One measured training run: the model, batch shape, layout and what it achieved."""

    model: str = Field(min_length=1, max_length=200, description="Model of the package's library.")
    global_batch: int = Field(ge=1, le=MAX_GLOBAL_BATCH, description="Sequences per iteration.")
    seq_len: int = Field(ge=1, le=MAX_SEQ_LEN, description="Tokens per sequence.")
    recompute: Literal["full", "selective", "none"] = Field(
        default="full", description="Activation recomputation the run used.")
    tp: int = Field(ge=1, le=MAX_POINT_GPUS)
    pp: int = Field(ge=1, le=MAX_POINT_GPUS)
    dp: int = Field(ge=1, le=MAX_POINT_GPUS)
    cp: int = Field(default=1, ge=1, le=MAX_POINT_GPUS, description="Context-parallel size (GPUs = tp * cp * pp * dp).")
    ep: Optional[int] = Field(default=None, ge=1, le=MAX_POINT_GPUS,
                              description="Expert-parallel size, a divisor of dp (absent: the fastest valid choice).")
    micro_batch: Optional[int] = Field(default=None, ge=1, le=MAX_GLOBAL_BATCH,
                                       description="Absent: the fastest valid choice.")
    virtual_stages: Optional[int] = Field(default=None, ge=1, le=1024,
                                          description="Absent: the fastest valid choice.")
    iteration_seconds: Optional[float] = Field(default=None, gt=0, le=1e7)
    hardware_tflops_per_gpu: Optional[float] = Field(default=None, gt=0, le=1e5)

    @model_validator(mode="after")
    def _one_measurement(self) -> "MeasuredPoint":
        if (self.iteration_seconds is None) == (self.hardware_tflops_per_gpu is None):
            raise ValueError("give exactly one of 'iteration_seconds' and 'hardware_tflops_per_gpu'")
        if self.gpus > MAX_POINT_GPUS:
            raise ValueError(f"tp * cp * pp * dp = {self.gpus} GPUs is above {MAX_POINT_GPUS}")
        return self

    @property
    def gpus(self) -> int:
        """GPUs of the run: tp * cp * pp * dp."""
        return self.tp * self.cp * self.pp * self.dp


class MeasuredPoints(StrictModel):
    """Input of ``unicron-plan calibrate``: measured iterations of one GPU type."""

    gpu_type: str = Field(min_length=1, max_length=100, description="GPU type of the package's library.")
    stack: Optional[str] = Field(default=None, max_length=100,
                                 description="Software stack (default: the GPU type's default stack).")
    fit: list[Literal[FIT_NAMES]] = Field(  # type: ignore[valid-type]
        default=["gemm_efficiency", "attention_efficiency", "nvlink_efficiency", "network_efficiency"],
        min_length=1, max_length=len(FIT_NAMES), description="Constants to fit; the others keep their values.")
    also_best: bool = Field(default=False, description="The fastest layout of each point's GPU count must "
                                                       "match the measurement too.")
    points: list[MeasuredPoint] = Field(min_length=1, max_length=MAX_POINTS)

    @model_validator(mode="after")
    def _distinct_fit(self) -> "MeasuredPoints":
        if len(set(self.fit)) != len(self.fit):
            raise ValueError("'fit' names a constant twice")
        return self
