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
from unicron_plan.schema.efficiency import EfficiencyConstants, EfficiencyFile, StackFeatures

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
    # Mixture of experts (0 experts: a dense model).
    experts: int = Field(default=0, ge=0, description="Routed experts per MoE layer (0: dense MLP).")
    top_k: int = Field(default=0, ge=0, description="Routed experts each token visits.")
    shared_experts: int = Field(default=0, ge=0, description="Experts every token visits (DeepSeek, Qwen-MoE).")
    expert_ffn_hidden: Optional[int] = Field(default=None, ge=1, description="Hidden width of one expert's MLP.")
    dense_layers: int = Field(default=0, ge=0, description="Leading layers with a dense MLP of ffn_hidden.")
    max_nodes_per_token: Optional[int] = Field(
        default=None, ge=1, description="Node-limited routing: a token's experts lie on at most this many nodes, "
                                        "each reached once over the network (DeepSeek-V3: 4).")
    capacity_factor: Optional[float] = Field(
        default=None, gt=0, le=16, description="Expert capacity (tokens padded to it); None: dropless.")
    # Attention variants: multi-head latent attention (DeepSeek) has its own weight count and
    # per-head query/key and value widths.
    attention_params: Optional[int] = Field(default=None, ge=1,
                                            description="Attention weights of one layer when not 4h^2-style.")
    qk_head_dim: Optional[int] = Field(default=None, ge=1, description="Query/key width per head (default h/a).")
    v_head_dim: Optional[int] = Field(default=None, ge=1, description="Value width per head (default h/a).")
    source: str = ""

    @model_validator(mode="after")
    def _shapes(self) -> "ModelSpec":
        if self.hidden % self.heads:
            raise ValueError(f"hidden {self.hidden} is not divisible by heads {self.heads}")
        if self.heads % self.kv_heads:
            raise ValueError(f"heads {self.heads} is not divisible by kv_heads {self.kv_heads}")
        if self.experts:
            if not (1 <= self.top_k <= self.experts) or self.expert_ffn_hidden is None:
                raise ValueError("an MoE model needs 1 <= top_k <= experts and expert_ffn_hidden")
            if self.dense_layers >= self.layers:
                raise ValueError("dense_layers must leave at least one MoE layer")
        elif self.top_k or self.shared_experts or self.dense_layers:
            raise ValueError("top_k, shared_experts and dense_layers need experts > 0")
        return self

    @property
    def moe(self) -> bool:
        """Whether the model has mixture-of-experts layers."""
        return self.experts > 0

    @property
    def moe_layers(self) -> int:
        """Layers with an MoE MLP."""
        return self.layers - self.dense_layers if self.moe else 0

    @property
    def active_ffn(self) -> float:
        """MLP width a token passes through, averaged over layers (ffn_hidden for dense models).

        A token of an MoE layer visits top_k routed experts (padded by the capacity
        factor when there is one) and every shared expert.
        """
        if not self.moe:
            return float(self.ffn_hidden)
        cap = self.capacity_factor or 1.0
        moe_f = (self.top_k * cap + self.shared_experts) * self.expert_ffn_hidden
        return (self.dense_layers * self.ffn_hidden + self.moe_layers * moe_f) / self.layers

    @property
    def useful_ffn(self) -> float:
        """:attr:`active_ffn` without capacity padding (the model FLOPs' MLP width)."""
        if not self.moe:
            return float(self.ffn_hidden)
        moe_f = (self.top_k + self.shared_experts) * self.expert_ffn_hidden
        return (self.dense_layers * self.ffn_hidden + self.moe_layers * moe_f) / self.layers

    def attention_weights(self) -> int:
        """Weights of one layer's attention projections."""
        if self.attention_params is not None:
            return self.attention_params
        h = self.hidden
        return h * (h + 2 * self.kv_dim) + h * h

    def attention_core_width(self) -> int:
        """heads x (query/key width + value width) per head: 2h for MHA and GQA."""
        return self.heads * ((self.qk_head_dim or self.head_dim) + (self.v_head_dim or self.head_dim))

    def expert_params(self) -> float:
        """Routed-expert weights of the whole model (sharded by expert parallelism)."""
        if not self.moe:
            return 0.0
        return float(self.moe_layers * self.experts * self.mlp_matrices * self.hidden * self.expert_ffn_hidden)

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

    def layer_params(self) -> float:
        """Parameters of one transformer layer outside the routed experts (weights, biases
        for GPT, norms, router and shared experts), averaged over layers for MoE models."""
        h, f = self.hidden, self.ffn_hidden
        if self.moe:
            moe_mlp = self.shared_experts * self.mlp_matrices * h * self.expert_ffn_hidden + h * self.experts
            mlp = (self.dense_layers * self.mlp_matrices * h * f + self.moe_layers * moe_mlp) / self.layers
        else:
            mlp = self.mlp_matrices * h * f
        w = self.attention_weights() + mlp
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
        return int(round(self.layers * self.layer_params() + self.expert_params())) + emb + 2 * self.hidden

    def active_params(self) -> int:
        """Parameters one token uses (all of a dense model; top_k routed experts of an MoE)."""
        if not self.moe:
            return self.params()
        routed = self.moe_layers * self.top_k * self.mlp_matrices * self.hidden * self.expert_ffn_hidden
        emb = self.embedding_params() * (1 if self.tied_embeddings else 2)
        return int(round(self.layers * self.layer_params() + routed)) + emb + 2 * self.hidden


class GpuSpec(_Frozen):
    """One GPU type with the node it usually sits in."""

    name: str = ""
    peak_tflops: float = Field(gt=0)
    memory_gib: float = Field(gt=0)
    hbm_gb_per_s: float = Field(gt=0)
    nvlink_gb_per_s: float = Field(gt=0)
    network_gb_per_s: float = Field(gt=0)
    gpus_per_node: int = Field(ge=1)
    fp8_peak_tflops: Optional[float] = Field(default=None, gt=0,
                                             description="Dense FP8 tensor-core TFLOP/s (None: no FP8).")
    source: str = ""


#: Structural features of a software stack (one definition, in the schema).
Stack = StackFeatures


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


def read_data(name: str) -> dict:
    """A JSON file of the packaged data folder (models/), parsed."""
    return json.loads(_data_dir().joinpath(name).read_text(encoding="utf-8"))


@lru_cache(maxsize=None)
def _models() -> dict[str, ModelSpec]:
    return {k: ModelSpec(name=k, **v) for k, v in read_data("models.json")["models"].items()}


@lru_cache(maxsize=None)
def _gpus() -> dict[str, GpuSpec]:
    return {k: GpuSpec(name=k, **v) for k, v in read_data("gpus.json")["gpus"].items()}


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
        return read_data("efficiency.json")
    from unicron_plan.io import parse_model, read_json

    # strict: missing file, bad JSON, NaN, a missing or misspelt field -> InvalidInstanceError naming it
    return parse_model(EfficiencyFile, read_json(path)).model_dump(
        mode="json", exclude={"stacks": {"__all__": {"name"}}})


def clear_caches() -> None:
    """Forget every loaded data file (``unicron_plan.perf.clear_caches`` also forgets derived tables)."""
    for f in (_models, _gpus, _efficiency_data, _get_efficiency):
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
        from unicron_plan.text import shown

        raise InvalidInstanceError(
            field, f"unknown model '{shown(name, 60)}'; valid models (`unicron-plan models` describes them): "
                   f"{', '.join(model_names())}", limit=2000) from None


def get_gpu(name: str, field: str = "gpu_type") -> GpuSpec:
    """The GPU type called ``name``; InvalidInstanceError naming the valid ones otherwise."""
    try:
        return _gpus()[name]
    except KeyError:
        from unicron_plan.text import shown

        raise InvalidInstanceError(
            field, f"unknown GPU type '{shown(name, 60)}'; valid GPU types: {', '.join(gpu_names())}",
            limit=2000) from None


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
