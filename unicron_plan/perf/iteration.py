"""Analytical model of one training iteration for a parallel layout.

A layout is (tp, pp, dp, micro_batch, virtual_stages) plus a recompute mode.
Every function takes numpy arrays (or scalars) for the layout and broadcasts,
so that a whole layout search is a handful of vector operations.

FLOPs follow Narayanan et al. (SC'21): per token and layer the forward pass
costs ``2h(h + 2 kv_dim) + 2h^2 + 2 n_mlp h f`` in GEMMs plus ``4 s h`` in
attention scores and context; backward is twice the forward; full
recomputation adds one more forward of every layer (hardware FLOPs), selective
recomputation one more forward of the attention core. For GPT (kv_dim = h,
f = 4h, n_mlp = 2) the hardware total is Narayanan's
``96 B s l h^2 (1 + s/(6h) + V/(16 l h))``. Memory follows Korthikanti et al.
(2022). See docs/perf.md for every equation.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from unicron_plan.perf.library import Efficiency, GpuSpec, ModelSpec

RECOMPUTE_MODES = ("full", "selective", "none")
GIB = float(1 << 30)
# Bytes moved per parameter by the Adam step (read fp32 grad, master, m, v;
# write master, m, v and the bf16 copy).
ADAM_STEP_BYTES = 30.0
OPTIMIZER_STATE_BYTES = 12.0  # fp32 master weights + Adam m + v
WEIGHT_BYTES = 2.0  # bf16 / fp16 working copy


def flops_per_token(model: ModelSpec, seq_len: int, useful: bool = False) -> tuple[float, float, float]:
    """Forward FLOPs per token: (GEMMs of one layer, attention core of one layer, LM head).

    MoE layers count the experts a token visits (top_k routed, padded by the
    capacity factor unless ``useful``, plus the shared ones) and the router;
    the per-layer figures are averages over the model's layers.
    """
    h = model.hidden
    f = model.useful_ffn if useful else model.active_ffn
    gemm = 2.0 * model.attention_weights() + 2.0 * model.mlp_matrices * h * f
    if model.moe:
        gemm += 2.0 * h * model.experts * model.moe_layers / model.layers  # router
    attn = 2.0 * seq_len * model.attention_core_width()
    head = 2.0 * h * model.vocab
    return gemm, attn, head


def iteration_flops(model: ModelSpec, global_batch: int, seq_len: int, recompute: str) -> tuple[float, float]:
    """(model FLOPs, hardware FLOPs) of one iteration of the whole job."""
    gemm, attn, head = flops_per_token(model, seq_len, useful=True)
    tokens = float(global_batch) * seq_len
    layer = gemm + attn
    model_flops = 3.0 * tokens * (model.layers * layer + head)
    hw_gemm, _, _ = flops_per_token(model, seq_len)
    extra = {"full": hw_gemm + attn, "selective": attn, "none": 0.0}[recompute]
    return model_flops, model_flops + 3.0 * tokens * model.layers * (hw_gemm - gemm) + tokens * model.layers * extra


#: Fewest layers a middle stage holds before the uneven split (first and last stage one layer
#: fewer) is allowed: below it, one layer is a large share of a stage and the split only adds
#: imbalance (e.g. 96 layers on 49 stages of 2, 1 on the edges, is refused).
MIN_LAYERS_UNEVEN = 4


def stage_layers(layers: int, pp):
    """(layers on the busiest stage, on the first stage, on the last stage) and validity.

    ``pp`` must divide ``layers`` (Megatron-LM's default split), or divide
    ``layers + 2`` with at least :data:`MIN_LAYERS_UNEVEN` layers per middle
    stage: then the first and last stages hold one layer fewer to make room for
    the embedding and the LM head (the memory-balanced pipeline of Llama 3;
    Megatron-LM's ``--decoder-first-pipeline-num-layers`` and
    ``--decoder-last-pipeline-num-layers``).
    """
    pp = np.asarray(pp)
    even = layers % pp == 0
    balanced = ~even & ((layers + 2) % pp == 0) & (pp > 1) & ((layers + 2) // pp >= MIN_LAYERS_UNEVEN)
    per = np.where(even, layers // pp, (layers + 2) // pp)
    edge = np.where(even, per, per - 1)
    return per, edge, edge, even | balanced


@dataclass
class LayoutResult:
    """Arrays (one entry per layout) produced by :func:`evaluate`."""

    iteration_seconds: np.ndarray
    memory_bytes: np.ndarray
    fits: np.ndarray
    model_flops: float
    hardware_flops: float


def evaluate(model: ModelSpec, gpu: GpuSpec, eff: Efficiency, global_batch: int, seq_len: int,
             recompute: str, tp, pp, dp, micro_batch, virtual_stages=1, ep=1, cp=1) -> LayoutResult:
    """Iteration time and peak per-GPU memory of each layout (arrays broadcast).

    The caller guarantees the divisibility rules (see layouts.py); this
    function only computes.
    """
    st, c = eff.stack, eff.constants
    tp = np.asarray(tp, dtype=float)
    pp_i = np.asarray(pp)
    pp = pp_i.astype(float)
    dp = np.asarray(dp, dtype=float)
    b = np.asarray(micro_batch, dtype=float)
    v = np.asarray(virtual_stages, dtype=float)
    ep = np.asarray(ep, dtype=float)
    cp = np.asarray(cp, dtype=float)
    h, f, s, a = float(model.hidden), float(model.active_ffn), float(seq_len), float(model.heads)
    kvd, V = float(model.kv_dim), float(model.vocab)
    tokens = b * s / cp  # context parallelism: each GPU holds 1/cp of every sequence
    full, selective = recompute == "full", recompute == "selective"
    peak = gpu.peak_tflops * 1e12
    hbm = gpu.hbm_gb_per_s * 1e9 * c.hbm_efficiency
    nvl = gpu.nvlink_gb_per_s * 1e9 * c.nvlink_efficiency
    net = gpu.network_gb_per_s * 1e9 * c.network_efficiency
    gpn = gpu.gpus_per_node
    sp = tp if st.sequence_parallel else 1.0

    # --- one layer, one micro-batch, forward + backward (+ recomputation) ---
    gemm_f, attn_f, head_f = flops_per_token(model, seq_len)
    passes = 4.0 if full else 3.0  # forward-equivalents of work: fwd + 2x for bwd (+ fwd again)
    attn_passes = 4.0 if (full or selective) else 3.0
    # FP8 GEMMs (stack.fp8, GPU with an FP8 peak) for the layers; attention core and LM head stay BF16
    gemm_peak = gpu.fp8_peak_tflops * 1e12 if (st.fp8 and gpu.fp8_peak_tflops) else peak
    t_gemm = passes * tokens * gemm_f / tp / (gemm_peak * c.gemm_efficiency)
    t_attn = attn_passes * tokens * attn_f / tp / (peak * c.attention_efficiency)
    drop = 1.0 if model.dropout else 0.0
    # element-wise bytes per token in one forward pass: 2 norms (r 2h, w 2h), 2 residual
    # adds (r 4h, w 2h) with their dropout masks, the activation, and without flash
    # attention the softmax (r/w 2as each) and attention dropout (5as).
    rep_bytes = 20.0 * h + 2.0 * drop * h
    act_bytes = (6.0 if model.activation == "swiglu" else 4.0) * f
    soft_bytes = 0.0 if st.flash_attention else (4.0 + 5.0 * drop) * a * s
    act_passes = passes + (1.0 if st.activation_recompute and not full else 0.0)
    elem = passes * rep_bytes / sp + act_passes * act_bytes / tp + attn_passes * soft_bytes / tp
    t_mem = tokens * elem / hbm
    coll = 4.0 + (2.0 if full else 0.0)  # all-reduces (or all-gather + reduce-scatter pairs)
    tp_bytes = coll * 2.0 * (tp - 1.0) / tp * tokens * h * 2.0
    t_tp = np.where(tp > 1, tp_bytes / nvl, 0.0) * (1.0 - st.tp_overlap)
    # context parallelism: every GPU receives the other cp - 1 chunks of K and V per forward,
    # twice that (K/V and their gradients) per backward. A ring passes them behind the
    # attention core (only the excess counts); an all-gather gathers them before it (exposed).
    cp_bytes = attn_passes * (cp - 1.0) * tokens / tp * 2.0 * kvd * 2.0  # fwd 1, bwd 2, recompute 1
    cp_bw = np.where(tp * cp <= gpn, nvl, net)
    hidden = t_attn if st.cp_comm == "ring" else 0.0
    t_cp = np.where(cp > 1, np.maximum(cp_bytes / cp_bw - hidden, 0.0), 0.0)
    t_layer = t_gemm + t_attn + t_mem + t_tp + t_cp + passes * c.layer_overhead_us * 1e-6
    if model.moe:
        # token dispatch and combine (all-to-all over the ep ranks, consecutive after tp):
        # each GPU sends its T/t tokens to top_k experts; peers in the node over NVLink,
        # the rest over the network. 2 per forward, 2 per backward, 2 per recomputation.
        cap = model.capacity_factor or 1.0
        copy_bytes = tokens / tp * cap * h * 2.0  # one copy of the GPU's tokens
        in_node = np.minimum(ep, np.maximum(gpn // tp, 1.0))
        remote = model.top_k * (ep - in_node) / ep  # copies per token leaving the node
        if model.max_nodes_per_token is not None:  # node-limited routing: one copy per remote node
            remote = np.minimum(remote, float(model.max_nodes_per_token))
        t_one = copy_bytes * (model.top_k * (in_node - 1.0) / ep / nvl + remote / net)
        n_a2a = 2.0 * (3.0 if full else 2.0)
        t_layer = t_layer + model.moe_layers / model.layers * n_a2a * t_one * (1.0 - st.ep_overlap)

    # LM head and loss on the last stage (never recomputed): GEMM plus fp32 logits traffic.
    t_head = (3.0 * tokens * head_f / tp / (peak * c.gemm_efficiency)
              + tokens * V / tp * 16.0 / hbm
              + np.where(tp > 1, 2.0 * 2.0 * (tp - 1.0) / tp * tokens * h * 2.0 / nvl, 0.0))

    per, first, last, _ = stage_layers(model.layers, pp_i)
    per, first, last = per.astype(float), first.astype(float), last.astype(float)
    t_stage = np.maximum(per * t_layer, last * t_layer + t_head)

    # pipeline point-to-point: activation forward, gradient backward, once per virtual stage
    p2p_bytes = tokens * h * 2.0 / np.where(st.p2p_scatter_gather | st.sequence_parallel, tp, 1.0)
    p2p_bw = np.where(tp * cp * dp < gpn, nvl, net)
    t_p2p = np.where(pp > 1, 2.0 * v * (p2p_bytes / p2p_bw + c.p2p_overhead_us * 1e-6), 0.0)
    t_mb = t_stage + t_p2p

    m = global_batch / (dp * b)
    t_pipe = (m + (pp - 1.0) / v) * t_mb

    # data parallel gradient reduction of the busiest stage (the one with an embedding)
    p_layer = float(model.layer_params())
    p_emb = float(model.embedding_params())
    # routed experts, per layer on average, sharded over tp and ep (expert tensor parallel = tp)
    e_layer = model.expert_params() / model.layers / ep
    n_emb_first = np.where(pp > 1, 1.0, 1.0 if model.tied_embeddings else 2.0)
    p_first = (first * (p_layer + e_layer) + n_emb_first * p_emb) / tp
    p_last = (last * (p_layer + e_layer) + p_emb) / tp
    p_mid = per * (p_layer + e_layer) / tp
    p_stage = np.maximum(np.maximum(p_first, p_last), p_mid)
    # expert weights of the busiest stage: reduced and sharded over dp / ep (expert data parallel)
    p_exp = np.maximum(per, first) * e_layer / tp
    p_dense = p_stage - p_exp
    # weights are replicated over dp and cp: gradients are reduced (and the optimizer
    # sharded) over dp * cp ranks; routed experts over dp * cp / ep
    dp = dp * cp
    edp = dp / ep
    dp_bw = np.where(tp * dp <= gpn, nvl, net)
    if st.distributed_optimizer:
        # reduce-scatter of gradients + all-gather of updated weights; ZeRO-3/FSDP gathers the
        # weights once more for the backward pass (kept across the micro-batches of a step)
        gathers = 2.0 if st.shard_weights else 1.0
        dp_bytes = ((dp - 1.0) / dp * p_dense + (edp - 1.0) / edp * p_exp) * (st.grad_bytes + gathers * WEIGHT_BYTES)
        opt_params = p_dense / dp + p_exp / edp
    else:
        dp_bytes = 2.0 * ((dp - 1.0) / dp * p_dense + (edp - 1.0) / edp * p_exp) * st.grad_bytes
        opt_params = p_stage
    t_dp = np.where(dp > 1, dp_bytes / dp_bw, 0.0) * (1.0 - st.dp_overlap)
    if model.tied_embeddings:  # first and last stage sum their copies of the shared embedding
        t_dp = t_dp + np.where(pp > 1, 2.0 * p_emb / tp * st.grad_bytes / net, 0.0)
    t_opt = opt_params * ADAM_STEP_BYTES / hbm
    t_iter = t_pipe + t_dp + t_opt

    # --- memory of the first and the last stage (Korthikanti et al. 2022) ---
    rep_act = (10.0 if model.dropout else 8.0) * h  # norm inputs, QKV/MLP inputs, dropout masks
    # MLP: GeLU keeps its input and output (4f); SwiGLU gate, up and product (6f); with
    # activation-function recomputation only the first GEMM's output is kept.
    mlp_act = (4.0 if model.activation == "swiglu" else 2.0) * f if st.activation_recompute else (
        (6.0 if model.activation == "swiglu" else 4.0) * f)
    split_act = 4.0 * h + 4.0 * kvd + mlp_act
    score_act = 0.0 if st.flash_attention else (2.0 + 3.0 * drop) * a * s
    none_layer = tokens * (rep_act / sp + (split_act + score_act) / tp)
    if full:
        stored_layer = tokens * 2.0 * h / sp
        working = none_layer
    elif selective:
        stored_layer = tokens * (rep_act / sp + split_act / tp)
        working = tokens * score_act / tp
    else:
        stored_layer = none_layer
        working = 0.0 * none_layer
    # micro-batches whose activations a stage holds at the peak: 1F1B stage k holds p - k;
    # the interleaved schedule's warm-up holds (2(p-k-1) + (v-1)p + 1) chunks of 1/v stage.
    def held(k):
        inter = (2.0 * (pp - k - 1.0) + (v - 1.0) * pp + 1.0) / v
        return np.minimum(m, np.maximum(np.where(v > 1, inter, pp - k), 1.0))
    in_flight, in_flight_2nd = held(0.0), held(1.0)
    logits = tokens * V / tp * 8.0  # fp32 logits and their gradient
    # bytes per parameter held: weights, gradients (sharded with shard_gradients), fp32 master
    # and Adam states (sharded with a distributed optimizer); experts shard over dp / ep.
    def state(n_shard):
        shard = n_shard if st.distributed_optimizer else 1.0
        return (WEIGHT_BYTES / (shard if st.shard_weights else 1.0)
                + st.grad_bytes / (shard if st.shard_gradients else 1.0)
                + OPTIMIZER_STATE_BYTES / shard)
    exp_frac = np.where(p_stage > 0, p_exp / p_stage, 0.0)
    state_per_param = (1.0 - exp_frac) * state(dp) + exp_frac * state(edp)
    mem_first = p_first * state_per_param + in_flight * first * stored_layer + working
    mem_last = p_last * state_per_param + last * stored_layer + working + logits
    mem_first = np.where(pp > 1, mem_first, mem_first + logits)
    mem_mid = np.where(pp > 2, p_mid * state_per_param + in_flight_2nd * per * stored_layer + working, 0.0)
    # at the optimizer step activations are freed but an FP32 gradient copy may exist
    p_max = np.maximum(np.maximum(p_first, p_last), p_mid)
    copy = st.optimizer_grad_copy_bytes * (opt_params / p_stage if st.distributed_optimizer else 1.0)
    mem_step = p_max * (state_per_param + copy)
    # ZeRO-3 / FSDP: one layer's weights gathered whole (and the next one prefetched)
    gathered = 2.0 * (p_layer + e_layer) / tp * WEIGHT_BYTES if st.shard_weights else 0.0
    mem = np.maximum(np.maximum(np.maximum(mem_first, mem_last), mem_mid), mem_step) + gathered + eff.reserved_gib * GIB
    fits = mem <= gpu.memory_gib * GIB * eff.usable_fraction

    model_flops, hw_flops = iteration_flops(model, global_batch, seq_len, recompute)
    return LayoutResult(iteration_seconds=np.asarray(t_iter), memory_bytes=np.asarray(mem),
                        fits=np.asarray(fits), model_flops=model_flops, hardware_flops=hw_flops)
