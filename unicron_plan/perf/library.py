"""The model library: model architectures, GPU types and efficiency constants.

The data live as JSON in the package ``unicron_plan.models_data`` (the folder
``models/`` of the repository). Unknown names raise
:class:`~unicron_plan.errors.InvalidInstanceError` listing the valid ones.

Example::

    >>> from unicron_plan.perf.library import get_model, get_gpu
    >>> get_model("gpt3-175b").layers
    96
    >>> get_gpu("a100").peak_tflops
    312.0
"""

from __future__ import annotations

import json
import os
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, model_validator

from unicron_plan.errors import InvalidInstanceError
from unicron_plan.schema.efficiency import EfficiencyConstants

DATA_PACKAGE = "unicron_plan.models_data"


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class ModelSpec(_Frozen):
    """A decoder-only transformer: the shape that fixes FLOPs, memory and traffic."""

    name: str = ""
    layers: int = Field(ge=1)
    hidden: int = Field(ge=1)
    heads: int = Field(ge=1)
    kv_heads: int = Field(ge=1, description="Key/value heads (grouped-query attention); = heads for MHA.")
    ffn_hidden: int = Field(ge=1)
    vocab: int = Field(ge=1)
    activation: Literal["gelu", "swiglu"]
    tied_embeddings: bool = True
    dropout: bool = True
    source: str = ""

    @model_validator(mode="after")
    def _shapes(self) -> "ModelSpec":
        if self.hidden % self.heads:
            raise ValueError(f"hidden {self.hidden} is not divisible by heads {self.heads}")
        if self.heads % self.kv_heads:
            raise ValueError(f"heads {self.heads} is not divisible by kv_heads {self.kv_heads}")
        return self

    @property
    def head_dim(self) -> int:
        """Dimension of one attention head."""
        return self.hidden // self.heads

    @property
    def kv_dim(self) -> int:
        """Width of the K (or V) projection: kv_heads * head_dim."""
        return self.kv_heads * self.head_dim

    @property
    def mlp_matrices(self) -> int:
        """Weight matrices of size hidden x ffn_hidden in the MLP (2 GeLU, 3 SwiGLU)."""
        return 3 if self.activation == "swiglu" else 2

    def layer_params(self) -> int:
        """Parameters of one transformer layer (weights, biases for GPT, norms)."""
        h, f = self.hidden, self.ffn_hidden
        w = h * (h + 2 * self.kv_dim) + h * h + self.mlp_matrices * h * f
        if self.activation == "gelu":  # GPT: biases and LayerNorm with bias
            w += (h + 2 * self.kv_dim) + h + f + h + 4 * h
        else:  # Llama: no biases, RMSNorm weights only
            w += 2 * h
        return w

    def embedding_params(self) -> int:
        """Parameters of one vocab x hidden matrix (input embedding or LM head)."""
        return self.vocab * self.hidden

    def params(self) -> int:
        """Total parameters."""
        emb = self.embedding_params() * (1 if self.tied_embeddings else 2)
        return self.layers * self.layer_params() + emb + 2 * self.hidden


class GpuSpec(_Frozen):
    """One GPU type with the node it usually sits in."""

    name: str = ""
    peak_tflops: float = Field(gt=0)
    memory_gib: float = Field(gt=0)
    hbm_gb_per_s: float = Field(gt=0)
    nvlink_gb_per_s: float = Field(gt=0)
    network_gb_per_s: float = Field(gt=0)
    gpus_per_node: int = Field(ge=1)
    source: str = ""


class Stack(_Frozen):
    """Structural features of a training software stack (not fitted)."""

    name: str = ""
    flash_attention: bool
    sequence_parallel: bool
    distributed_optimizer: bool
    shard_gradients: bool = Field(description="Gradients sharded over data parallelism too (ZeRO-2 / FSDP).")
    activation_recompute: bool = Field(
        description="MLP activation function recomputed in the backward pass (keeps only the first GEMM's output).")
    grad_bytes: int = Field(ge=2, le=4, description="Bytes per gradient element kept and reduced.")
    optimizer_grad_copy_bytes: int = Field(
        ge=0, description="Bytes per parameter of the transient FP32 gradient copy made at the optimizer step.")
    p2p_scatter_gather: bool
    tp_overlap: float = Field(ge=0, le=1, description="Fraction of tensor-parallel traffic hidden.")
    dp_overlap: float = Field(ge=0, le=1, description="Fraction of gradient reduction hidden.")
    source: str = ""


#: The fitted constants of one GPU type under one stack (one definition, in the schema).
Constants = EfficiencyConstants


class Efficiency(_Frozen):
    """Everything the iteration model needs besides the model and the GPU."""

    stack: Stack
    constants: Constants
    reserved_gib: float = Field(ge=0)
    usable_fraction: float = Field(default=1.0, gt=0, le=1,
                                   description="Fraction of HBM the allocator can fill (fragmentation).")


def _data_dir():
    """The data folder: ``models/`` of this source checkout, else the installed package.

    The checkout is tried first so that running from source (PYTHONPATH) never
    picks up the data of another installed copy of the package.
    """
    src = Path(__file__).resolve().parents[2] / "models"
    if (src / "models.json").is_file() and (src / "__init__.py").is_file():
        return src
    return resources.files(DATA_PACKAGE)


def _read(name: str) -> dict:
    return json.loads(_data_dir().joinpath(name).read_text(encoding="utf-8"))


@lru_cache(maxsize=None)
def _models() -> dict[str, ModelSpec]:
    return {k: ModelSpec(name=k, **v) for k, v in _read("models.json")["models"].items()}


@lru_cache(maxsize=None)
def _gpus() -> dict[str, GpuSpec]:
    return {k: GpuSpec(name=k, **v) for k, v in _read("gpus.json")["gpus"].items()}


def _mtime(path: Optional[str]) -> Optional[int]:
    if path is None:
        return None
    try:
        return os.stat(path).st_mtime_ns
    except OSError as exc:
        raise InvalidInstanceError("efficiency_file", f"cannot read {path!r}: {exc}") from None


def efficiency_data(path: Optional[str] = None) -> dict:
    """The raw efficiency document: the shipped one, or the JSON file at ``path``.

    Cached per path and modification time, so a recalibrated file is re-read.
    """
    return _efficiency_data(path, _mtime(path))


@lru_cache(maxsize=8)
def _efficiency_data(path: Optional[str], mtime: Optional[int]) -> dict:
    if path is None:
        return _read("efficiency.json")
    from unicron_plan.io import read_json

    return read_json(path)  # strict: missing file, bad JSON, NaN -> InvalidInstanceError


def clear_caches() -> None:
    """Forget every loaded data file (after editing the shipped JSON in place)."""
    from unicron_plan.perf import _derive

    for f in (_models, _gpus, _efficiency_data, _get_efficiency, _derive):
        f.cache_clear()


def model_names() -> list[str]:
    """Names of the library's models."""
    return sorted(_models())


def gpu_names() -> list[str]:
    """Names of the library's GPU types."""
    return sorted(_gpus())


def get_model(name: str, field: str = "model") -> ModelSpec:
    """The model called ``name``; InvalidInstanceError naming the valid ones otherwise."""
    try:
        return _models()[name]
    except KeyError:
        raise InvalidInstanceError(
            field, f"unknown model {name!r}; valid models: {', '.join(model_names())}") from None


def get_gpu(name: str, field: str = "gpu_type") -> GpuSpec:
    """The GPU type called ``name``; InvalidInstanceError naming the valid ones otherwise."""
    try:
        return _gpus()[name]
    except KeyError:
        raise InvalidInstanceError(
            field, f"unknown GPU type {name!r}; valid GPU types: {', '.join(gpu_names())}") from None


def get_efficiency(gpu_type: str, stack: Optional[str] = None,
                   efficiency_file: Optional[str] = None) -> Efficiency:
    """Efficiency of ``gpu_type`` under ``stack`` (default: the GPU type's default stack).

    A GPU type without constants of its own for that stack borrows those of
    the stack's first listed GPU type (documented in docs/perf.md): the
    constants are fractions of the GPU's own peaks, which carry over.
    """
    return _get_efficiency(gpu_type, stack, efficiency_file, _mtime(efficiency_file))


@lru_cache(maxsize=64)
def _get_efficiency(gpu_type: str, stack: Optional[str], efficiency_file: Optional[str],
                    mtime: Optional[int]) -> Efficiency:
    get_gpu(gpu_type)
    data = _efficiency_data(efficiency_file, mtime)
    stack_name = stack or data["default_stack"].get(gpu_type)
    if stack_name not in data["stacks"]:
        raise InvalidInstanceError(
            "stack", f"unknown software stack {stack_name!r}; valid stacks: {', '.join(sorted(data['stacks']))}")
    consts = data["constants"].get(gpu_type, {}).get(stack_name)
    if consts is None:
        donors = [g for g, per in data["constants"].items() if stack_name in per]
        if not donors:
            raise InvalidInstanceError("stack", f"no efficiency constants for stack {stack_name!r}")
        consts = dict(data["constants"][donors[0]][stack_name])
        consts["source"] = f"borrowed from {donors[0]}: " + consts.get("source", "")
    return Efficiency(stack=Stack(name=stack_name, **data["stacks"][stack_name]),
                      constants=Constants(**consts),
                      reserved_gib=float(data["memory"]["reserved_gib"]),
                      usable_fraction=float(data["memory"].get("usable_fraction", 1.0)))
