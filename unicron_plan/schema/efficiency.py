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
    hbm_efficiency: float = Field(gt=0, le=1,
        description="Achieved fraction of HBM bandwidth in element-wise kernels.")
    nvlink_efficiency: float = Field(gt=0, le=1, description="Achieved fraction of NVLink bandwidth in collectives.")
    network_efficiency: float = Field(gt=0, le=1, description="Achieved fraction of network bandwidth.")
    layer_overhead_us: float = Field(ge=0, le=1e6,
                                     description="Fixed time per layer, micro-batch and pass (launches, syncs).")
    p2p_overhead_us: float = Field(ge=0, le=1e7,
                                   description="Fixed time of one pipeline send/receive (latency, synchronisation).")
    source: str = Field(default="", max_length=2000,
        description="Where the constants come from (e.g. the fit and its RMS log error).")


class StackFeatures(StrictModel):
    """Structural features of a training software stack (not fitted)."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, frozen=True,
                              validate_default=True)

    name: str = Field(default="", max_length=100, description="Name of the stack (set by the library).")
    flash_attention: bool = Field(description="Fused attention kernels that keep no score matrix.")
    sequence_parallel: bool = Field(description="Activations outside the GEMMs split over tensor parallelism.")
    distributed_optimizer: bool = Field(description="Optimizer states sharded over data parallelism.")
    shard_gradients: bool = Field(description="Gradients sharded over data parallelism too (ZeRO-2 / FSDP).")
    shard_weights: bool = Field(
        default=False,
            description="BF16 weights sharded over data parallelism too (ZeRO-3 / FSDP), gathered per layer.")
    activation_recompute: bool = Field(
        description="MLP activation function recomputed in the backward pass (keeps only the first GEMM's output).")
    grad_bytes: int = Field(ge=2, le=4, description="Bytes per gradient element kept and reduced.")
    optimizer_grad_copy_bytes: int = Field(
        ge=0, le=16,
            description="Bytes per parameter of the transient FP32 gradient copy made at the optimizer step.")
    p2p_scatter_gather: bool = Field(description="Pipeline sends split over tensor-parallel ranks and gathered.")
    tp_overlap: float = Field(ge=0, le=1, description="Fraction of tensor-parallel traffic hidden.")
    dp_overlap: float = Field(ge=0, le=1, description="Fraction of gradient reduction hidden.")
    ep_overlap: float = Field(default=0.0, ge=0, le=1,
                              description="Fraction of MoE all-to-all traffic hidden behind computation.")
    fp8: bool = Field(default=False, description="Layer GEMMs in FP8 on GPUs that support it (else BF16).")
    cp_comm: Literal["ring", "all_gather"] = Field(
        default="ring", description="Context-parallel attention: 'ring' passes K/V chunks behind the "
                                    "attention core; 'all_gather' gathers K/V before it (exposed).")
    source: str = Field(default="", max_length=2000, description="Where the features come from.")


class MemoryRules(StrictModel):
    """Memory every GPU keeps free whatever the layout."""

    reserved_gib: float = Field(ge=0, le=1e4, description="GiB per GPU kept for the CUDA context, NCCL "
                                                          "buffers and the allocator (unit: GiB).")
    usable_fraction: float = Field(default=1.0, gt=0, le=1,
                                   description="Fraction of HBM the allocator can fill (fragmentation).")
    source: str = Field(default="", max_length=2000, description="Where the figures come from.")


class EfficiencyFile(StrictModel):
    """An efficiency file (``curve --efficiency``, ``calibrate --base`` / ``--out``): software stacks,
    each GPU type's default stack and the fitted constants per GPU type and stack."""

    schema_version: Literal["1"] = Field(default="1", description="Version of this format.")
    note: str = Field(default="", max_length=10_000, description="Free text.")
    stacks: dict[str, StackFeatures] = Field(min_length=1, max_length=1000,
                                             description="Structural features of each software stack, by name.")
    default_stack: dict[str, str] = Field(max_length=1000, description="GPU type -> the stack used when none "
                                                                       "is named.")
    constants: dict[str, dict[str, EfficiencyConstants]] = Field(
        max_length=1000, description="GPU type -> stack -> fitted efficiency constants.")
    memory: MemoryRules = Field(description="Memory every GPU keeps free.")

    @model_validator(mode="after")
    def _stacks_exist(self) -> "EfficiencyFile":
        for gpu, stack in self.default_stack.items():
            if stack not in self.stacks:
                raise ValueError(f"default_stack.{gpu}: names the stack {stack!r}, which 'stacks' does not hold")
        for gpu, per in self.constants.items():
            for stack in per:
                if stack not in self.stacks:
                    raise ValueError(f"constants.{gpu}.{stack}: no such stack in 'stacks'")
        return self


class MeasuredPoint(StrictModel):
    """One measured training run: the model, batch shape, layout and what it achieved."""

    model: str = Field(min_length=1, max_length=200, description="Model of the package's library.")
    global_batch: int = Field(ge=1, le=MAX_GLOBAL_BATCH, description="Sequences per iteration.")
    seq_len: int = Field(ge=1, le=MAX_SEQ_LEN, description="Tokens per sequence.")
    recompute: Literal["full", "selective", "none"] = Field(
        default="full", description="Activation recomputation the run used.")
    tp: int = Field(ge=1, le=MAX_POINT_GPUS, description="Tensor-parallel size of the run.")
    pp: int = Field(ge=1, le=MAX_POINT_GPUS, description="Pipeline-parallel size of the run.")
    dp: int = Field(ge=1, le=MAX_POINT_GPUS, description="Data-parallel size of the run.")
    cp: int = Field(default=1, ge=1, le=MAX_POINT_GPUS,
        description="Context-parallel size (GPUs = tp * cp * pp * dp).")
    ep: Optional[int] = Field(default=None, ge=1, le=MAX_POINT_GPUS,
                              description="Expert-parallel size, a divisor of dp (absent: the fastest valid choice).")
    micro_batch: Optional[int] = Field(default=None, ge=1, le=MAX_GLOBAL_BATCH,
                                       description="Absent: the fastest valid choice.")
    virtual_stages: Optional[int] = Field(default=None, ge=1, le=1024,
                                          description="Absent: the fastest valid choice.")
    iteration_seconds: Optional[float] = Field(default=None, gt=0, le=1e7,
        description="Measured seconds per iteration (or give hardware_tflops_per_gpu).")
    hardware_tflops_per_gpu: Optional[float] = Field(default=None, gt=0, le=1e5,
        description="Measured hardware TFLOP/s per GPU (or give iteration_seconds).")

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
    points: list[MeasuredPoint] = Field(min_length=1, max_length=MAX_POINTS,
        description="The measured runs (1 to 1,000).")

    @model_validator(mode="after")
    def _distinct_fit(self) -> "MeasuredPoints":
        if len(set(self.fit)) != len(self.fit):
            raise ValueError("'fit' names a constant twice")
        return self
