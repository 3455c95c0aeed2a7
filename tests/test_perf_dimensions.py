"""Mixture of experts, expert and context parallelism, multi-head latent attention and FP8 in the iteration model."""

import numpy as np
import pytest

from unicron_plan.perf import derive_table
from unicron_plan.perf.iteration import evaluate, iteration_flops
from unicron_plan.perf.layouts import enumerate_layouts
from unicron_plan.perf.library import ModelSpec, get_efficiency, get_gpu, get_model


@pytest.mark.parametrize("name, total, active", [
    ("deepseek-v3", 671e9, 37e9), ("mixtral-8x22b", 141e9, 39e9), ("qwen2-57b-a14b", 57e9, 14e9)])
def test_published_total_and_active_parameters(name, total, active):
    m = get_model(name)
    assert m.params() == pytest.approx(total, rel=0.02)
    assert m.active_params() == pytest.approx(active, rel=0.03)


def test_moe_model_flops_count_active_experts_only():
    """Model FLOPs per token are ~6 x active parameters (+ attention core), not 6 x total."""
    m = get_model("mixtral-8x22b")
    mf, hw = iteration_flops(m, 1, 4096, "none")
    per_token = mf / 4096
    assert 6 * m.active_params() < per_token < 6 * m.active_params() * 1.25
    assert hw == pytest.approx(mf)


def test_capacity_factor_pads_hardware_not_model_flops():
    m = get_model("mixtral-8x22b")
    padded = m.model_copy(update={"capacity_factor": 1.25})
    mf0, hw0 = iteration_flops(m, 8, 4096, "none")
    mf1, hw1 = iteration_flops(padded, 8, 4096, "none")
    assert mf1 == pytest.approx(mf0)
    assert hw1 > hw0 * 1.1


def _eval(model, gpu_type, ep, dp, tp=1, pp=1, batch=256, seq=4096, stack=None):
    g = get_gpu(gpu_type)
    return evaluate(model, g, get_efficiency(gpu_type, stack), batch, seq, "none", tp, pp, dp, 1, 1, ep)


def test_expert_parallelism_divides_expert_memory():
    m = get_model("mixtral-8x22b")
    r1, r8 = _eval(m, "h100", 1, 64), _eval(m, "h100", 8, 64)
    # distributed optimizer + sharded grads: 2 + (4 + 12) / shard bytes per parameter, where
    # routed experts shard over the expert-data-parallel group dp / ep
    e = m.expert_params()
    expected = e * (2 + 16 / 64) - e / 8 * (2 + 16 / 8)
    assert float(r1.memory_bytes - r8.memory_bytes) == pytest.approx(expected, rel=1e-6)


def test_all_to_all_across_nodes_costs_more_than_inside_a_node():
    """ep 8 with tp 1 stays in one 8-GPU node; ep 8 with tp 2 spans two nodes over the network."""
    m = get_model("mixtral-8x22b")
    inside = _eval(m, "h100", 8, 64, tp=1).iteration_seconds
    dense_like = m.model_copy(update={"top_k": 1})
    assert float(_eval(dense_like, "h100", 8, 64).iteration_seconds) < float(inside)
    spread = _eval(m, "h100", 8, 32, tp=2).iteration_seconds
    node_local = _eval(m, "h100", 4, 32, tp=2).iteration_seconds
    assert float(spread) > float(node_local)


def test_fp8_speeds_up_gpus_that_have_it_only():
    m = get_model("llama3.1-70b")
    for gpu_type, faster in (("h100", True), ("a100", False)):
        g = get_gpu(gpu_type)
        base = get_efficiency(gpu_type)
        fp8 = base.model_copy(update={"stack": base.stack.model_copy(update={"fp8": True})})
        t0 = float(evaluate(m, g, base, 64, 8192, "none", 8, 4, 4, 1).iteration_seconds)
        t1 = float(evaluate(m, g, fp8, 64, 8192, "none", 8, 4, 4, 1).iteration_seconds)
        assert (t1 < 0.9 * t0) if faster else (t1 == pytest.approx(t0))


def test_mla_attention_core_is_wider_than_mha_of_the_same_hidden():
    m = get_model("deepseek-v3")
    assert m.attention_core_width() == 128 * (192 + 128)
    assert m.attention_weights() == 187105280


def test_expert_parallel_layouts_and_reported_ep():
    m, g = get_model("deepseek-v3"), get_gpu("h800")
    lay = enumerate_layouts(m, g, 1024, counts=[256])
    assert set(np.unique(lay["ep"])) >= {1, 8, 64, 256}
    assert np.all(lay["dp"] % lay["ep"] == 0) and np.all(256 % lay["ep"] == 0)
    curve = derive_table("mixtral-8x22b", "h100", 1024, 4096, gpus=[256])
    p = curve.points[0]
    assert p.ep >= 1 and p.dp % p.ep == 0 and 8 % p.ep == 0
    assert curve.layout(256).get("ep", 1) == p.ep


@pytest.mark.parametrize("bad", [
    {"experts": 8, "top_k": 0, "expert_ffn_hidden": 10},
    {"experts": 8, "top_k": 9, "expert_ffn_hidden": 10},
    {"experts": 8, "top_k": 2},
    {"top_k": 2},
    {"experts": 8, "top_k": 2, "expert_ffn_hidden": 10, "dense_layers": 4},
])
def test_inconsistent_moe_shapes_are_refused(bad):
    base = dict(layers=4, hidden=64, heads=4, kv_heads=4, ffn_hidden=128, vocab=100, activation="swiglu")
    with pytest.raises(ValueError):
        ModelSpec(**base, **bad)


def test_context_parallel_layouts_follow_the_sequence():
    from unicron_plan.perf.layouts import context_parallel_sizes
    assert context_parallel_sizes(2048) == [1]
    assert context_parallel_sizes(8192) == [1, 2]
    assert context_parallel_sizes(131072) == [1, 2, 4, 8, 16, 32]
    lay = enumerate_layouts(get_model("llama3-405b"), get_gpu("h100"), 128, counts=[16384], seq_len=131072)
    # Llama 3's long-context layout: TP8 CP16 PP16 DP8
    assert np.any((lay["tp"] == 8) & (lay["cp"] == 16) & (lay["pp"] == 16) & (lay["dp"] == 8))


def test_context_parallelism_splits_activations_and_keeps_flops():
    m, g = get_model("llama3.1-70b"), get_gpu("h100")
    eff = get_efficiency("h100")
    one = evaluate(m, g, eff, 8, 65536, "full", 8, 4, 1, 1, 1, 1, 1)
    two = evaluate(m, g, eff, 8, 65536, "full", 8, 4, 1, 1, 1, 1, 2)
    assert float(two.memory_bytes) < 0.7 * float(one.memory_bytes)
    assert two.model_flops == one.model_flops
    # twice the GPUs on the same work: faster, but not more than twice
    assert 0.5 * float(one.iteration_seconds) <= float(two.iteration_seconds) < float(one.iteration_seconds)


def test_zero3_fsdp_shards_weights_and_gathers_them_twice():
    m, g = get_model("llama3.1-8b"), get_gpu("h100")
    z1 = get_efficiency("h100")  # distributed optimizer, sharded gradients (ZeRO-2 class)
    z3 = get_efficiency("h100", "fsdp-2024")
    args = (m, g, None, 512, 8192, "full", 1, 1, 64, 1, 1)
    a = evaluate(*args[:2], z1, *args[3:])
    b = evaluate(*args[:2], z3, *args[3:])
    saved = m.params() * 2.0 * (1 - 1 / 64) - 2 * m.layer_params() * 2.0
    assert float(a.memory_bytes - b.memory_bytes) == pytest.approx(saved, rel=0.02)
    assert float(b.iteration_seconds) >= float(a.iteration_seconds)


def test_moe_and_long_context_jobs_plan_end_to_end(tmp_path):
    """Model-named MoE and 32K-sequence jobs on H100 solve, validate, and report their layout."""
    import json
    import subprocess
    import sys

    nodes = [{"id": f"n{i}", "gpu_type": "h100", "gpus": 8, "rack": "r0", "failed_gpus": []} for i in range(8)]
    inst = {
        "schema_version": "1", "name": "moe-and-long-context",
        "cluster": {"gpu_types": {"h100": {"peak_tflops": 989.0, "memory_gib": 80.0,
                                           "intra_node_gbps": 3600.0, "inter_node_gbps": 400.0}},
                    "nodes": nodes},
        "cost": {"default_transition_seconds": 300.0, "node_mtbf_hours": 6000.0},
        "event": {"kind": "failure", "failed_nodes": ["n7"], "failed_gpus": []},
        "jobs": [
            {"id": "moe", "weight": 1.0, "current": {"gpus": 32, "nodes": ["n0", "n1", "n2", "n3"]},
             "throughput": {"gpu_type": "h100", "model": "qwen2-57b-a14b", "global_batch": 512, "seq_len": 4096}},
            {"id": "long", "weight": 1.0, "current": {"gpus": 32, "nodes": ["n4", "n5", "n6", "n7"]},
             "throughput": {"gpu_type": "h100", "model": "llama3.1-8b", "global_batch": 64, "seq_len": 32768}},
        ],
    }
    path, out = tmp_path / "inst.json", tmp_path / "plan.json"
    path.write_text(json.dumps(inst))
    cli = [sys.executable, "-m", "unicron_plan.cli"]
    r = subprocess.run(cli + ["solve", str(path), "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    r = subprocess.run(cli + ["validate", str(path), str(out)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    plan = json.loads(out.read_text())
    for j in plan["jobs"]:
        if j["gpus"]:
            par = j["parallelism"]
            assert par["tp"] * par.get("cp", 1) * par["pp"] * par["dp"] == j["gpus"]
            curve = derive_table(*(inst["jobs"][0 if j["id"] == "moe" else 1]["throughput"][k]
                                   for k in ("model", "gpu_type", "global_batch", "seq_len")), gpus=[j["gpus"]])
            assert curve.layout(j["gpus"]) == par


def test_calibration_points_take_context_and_expert_parallelism(tmp_path):
    """A point measured with cp and ep is matched to exactly that layout (and counts tp*cp*pp*dp GPUs)."""
    from unicron_plan.perf.calibrate import _point_time
    from unicron_plan.schema.efficiency import MeasuredPoint
    eff = get_efficiency("h100")
    p = MeasuredPoint(model="mixtral-8x22b", global_batch=256, seq_len=16384, recompute="full",
                      tp=2, cp=2, pp=4, dp=8, ep=8, micro_batch=1, virtual_stages=1, iteration_seconds=1.0)
    assert p.gpus == 128
    direct = evaluate(get_model("mixtral-8x22b"), get_gpu("h100"), eff, 256, 16384, "full", 2, 4, 8, 1, 1, 8, 2)
    assert bool(direct.fits)
    assert _point_time(p, "h100", eff, False) == pytest.approx(float(direct.iteration_seconds))
    other = p.model_copy(update={"ep": 4})
    assert _point_time(other, "h100", eff, False) != pytest.approx(float(direct.iteration_seconds))


def test_node_limited_routing_caps_the_copies_sent_across_nodes():
    m = get_model("deepseek-v3")
    assert m.max_nodes_per_token == 4
    free = m.model_copy(update={"max_nodes_per_token": None})
    # ep 64 at tp 1: 8 nodes; 8 experts per token would leave the node ~7 times, capped at 4
    limited = _eval(m, "h800", 64, 64, batch=64)
    unlimited = _eval(free, "h800", 64, 64, batch=64)
    assert float(limited.iteration_seconds) < float(unlimited.iteration_seconds)
    # inside one node the cap changes nothing
    assert float(_eval(m, "h800", 8, 64, batch=64).iteration_seconds) == pytest.approx(
        float(_eval(free, "h800", 8, 64, batch=64).iteration_seconds))
