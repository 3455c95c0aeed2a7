"""Transition time D_trans of a reconfiguration from the state it must move.

The state of a GPU is its shard of weights and optimizer states
(``state_bytes_per_param`` bytes per parameter of its busiest pipeline stage).
It comes from the nearest copy, in Unicron's order:

``local`` (already on the GPU) < ``nvlink`` (a peer in the node) <
``dp_replica`` (a data-parallel replica over the network) <
``memory_checkpoint`` (host memory of another node: network, then PCIe) <
``remote_storage`` (checkpoint storage, shared by a node's GPUs).

D_trans = restart_seconds + bytes_per_gpu / bandwidth(source); see docs/perf.md.

Example::

    >>> from unicron_plan.perf import transition_seconds
    >>> lay = {"tp": 8, "pp": 12, "dp": 4, "micro_batch": 1}
    >>> grow = {"tp": 8, "pp": 12, "dp": 8, "micro_batch": 1}
    >>> transition_seconds("gpt3-175b", "a100", 384, 768, lay, grow) > 60.0
    True
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Optional

from unicron_plan.errors import InvalidInstanceError
from unicron_plan.perf.iteration import stage_layers
from unicron_plan.perf.library import _data_dir, get_gpu, get_model

SOURCES = ("local", "nvlink", "dp_replica", "memory_checkpoint", "remote_storage")


@lru_cache(maxsize=1)
def default_costs() -> dict:
    """The shipped cost parameters (models/transition.json)."""
    return json.loads(_data_dir().joinpath("transition.json").read_text(encoding="utf-8"))


def _layout(lay: dict, field: str) -> tuple[int, int, int]:
    try:  # context-parallel ranks hold the same shards as data-parallel ones
        tp, pp, dp = int(lay["tp"]), int(lay["pp"]), int(lay["dp"]) * int(lay.get("cp", 1))
    except (KeyError, TypeError, ValueError):
        raise InvalidInstanceError(field, f"{lay!r} needs integer tp, pp and dp") from None
    if min(tp, pp, dp) < 1:
        raise InvalidInstanceError(field, f"{lay!r} has a degree < 1")
    return tp, pp, dp


def shard_params(model: str, tp: int, pp: int) -> float:
    """Parameters held by the GPU of the busiest stage under (tp, pp)."""
    m = get_model(model)
    per, first, last, ok = stage_layers(m.layers, pp)
    if not bool(ok):
        raise InvalidInstanceError("layout.pp", f"pp {pp} does not split {m.layers} layers")
    emb = m.embedding_params()
    n_emb = 1 if pp > 1 else (1 if m.tied_embeddings else 2)
    return max(int(first) * m.layer_params() + n_emb * emb, int(per) * m.layer_params()) / tp


def nearest_source(old_layout: dict, new_layout: dict, old_gpus: int, new_gpus: int,
                   lost_state: bool = False, memory_checkpoint: bool = True,
                   gpus_per_node: int = 8, hit: bool = False) -> str:
    """Unicron's choice of the nearest copy of the state the new layout needs.

    Same (tp, pp) and no more GPUs: every GPU keeps its shard (``local``),
    unless the job was ``hit`` by a failure: replacements then copy a
    data-parallel replica (or, with dp = 1, the checkpoint).
    Same (tp, pp) and more GPUs: newcomers copy a data-parallel replica.
    Changed (tp, pp): shards are re-cut; peers in the node hold the pieces
    when the old model replica fits in one node (``nvlink``), else
    replicas over the network. ``lost_state`` (no surviving replica of some
    shard) falls back to the in-memory checkpoint, else remote storage.
    """
    otp, opp, odp = _layout(old_layout, "old_layout")
    ntp, npp, _ = _layout(new_layout, "new_layout")
    if lost_state or (hit and odp == 1):
        return "memory_checkpoint" if memory_checkpoint else "remote_storage"
    if (otp, opp) == (ntp, npp):
        return "local" if new_gpus <= old_gpus and not hit else "dp_replica"
    in_node = otp * opp <= gpus_per_node and ntp * npp <= gpus_per_node
    return "nvlink" if in_node else "dp_replica"


def transition_breakdown(model: str, gpu_type: str, old_gpus: int, new_gpus: int,
                         old_layout: dict, new_layout: dict, source: str = "auto",
                         costs: Optional[dict] = None, lost_state: bool = False,
                         hit: bool = False) -> dict:
    """D_trans and its parts: {"source", "bytes_per_gpu", "move_seconds", "restart_seconds", "seconds"}."""
    g = get_gpu(gpu_type)
    c = dict(default_costs())
    c.update(costs or {})
    for k, n in (("old_gpus", old_gpus), ("new_gpus", new_gpus)):
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise InvalidInstanceError(k, f"{n!r} is not an integer >= 0")
    ntp, npp, ndp = _layout(new_layout, "new_layout")
    if new_gpus and ntp * npp * ndp != new_gpus:
        raise InvalidInstanceError("new_layout", f"tp*pp*dp = {ntp * npp * ndp} != new_gpus {new_gpus}")
    if source == "auto":
        source = nearest_source(old_layout, new_layout, old_gpus, new_gpus, lost_state,
                                gpus_per_node=g.gpus_per_node, hit=hit)
    if source not in SOURCES:
        raise InvalidInstanceError("source", f"{source!r} is not one of auto, {', '.join(SOURCES)}")
    nbytes = shard_params(model, ntp, npp) * float(c["state_bytes_per_param"]) if new_gpus else 0.0
    gb = 1e9
    bw = {
        "local": None,
        "nvlink": g.nvlink_gb_per_s * gb,
        "dp_replica": g.network_gb_per_s * gb,
        "memory_checkpoint": None,
        "remote_storage": float(c["storage_gb_per_s_per_node"]) * gb / g.gpus_per_node,
    }[source]
    if source == "local":
        move = 0.0
    elif source == "memory_checkpoint":
        move = nbytes / (g.network_gb_per_s * gb) + nbytes / (float(c["host_memory_gb_per_s"]) * gb)
    else:
        move = nbytes / bw
    restart = float(c["restart_seconds"])
    return {"source": source, "bytes_per_gpu": nbytes, "move_seconds": move,
            "restart_seconds": restart, "seconds": restart + move}


def transition_seconds(model: str, gpu_type: str, old_gpus: int, new_gpus: int,
                       old_layout: dict, new_layout: dict, source: str = "auto",
                       costs: Optional[dict] = None, lost_state: bool = False,
                       hit: bool = False) -> float:
    """D_trans in seconds: restart set-up plus moving each GPU's new shard from ``source``.

    ``source`` is ``auto`` (the nearest copy, :func:`nearest_source`; ``hit``
    and ``lost_state`` describe the failure) or one of :data:`SOURCES`;
    ``costs`` overrides entries of models/transition.json.
    """
    return transition_breakdown(model, gpu_type, old_gpus, new_gpus, old_layout, new_layout,
                                source, costs, lost_state, hit)["seconds"]
