"""Model library, FLOP accounting and memory of the analytical throughput model."""

import numpy as np
import pytest

from unicron_plan.errors import InvalidInstanceError
from unicron_plan.perf import derive_table
from unicron_plan.perf.iteration import evaluate, iteration_flops
from unicron_plan.perf.library import gpu_names, get_efficiency, get_gpu, get_model, model_names

def test_library_names():
    names = set(model_names())
    expected = {"megatron-1.7b", "megatron-3.6b", "megatron-7.5b", "megatron-18.4b", "megatron-39.1b",
                "megatron-76.1b", "megatron-145.6b", "megatron-310.1b", "megatron-529.6b",
                "megatron-1008b"} | {
        "gpt3-1.3b", "gpt3-2.7b", "gpt3-6.7b", "gpt3-13b", "gpt3-175b", "llama2-7b", "llama2-13b",
        "llama2-70b", "llama3-8b", "llama3-70b", "llama3-405b"}
    assert expected <= names
    assert {"megatron-1.7b", "megatron-145.6b", "megatron-529.6b", "megatron-1008b"} <= names
    assert {"a100", "a800", "h100", "h800", "h200"} <= set(gpu_names())


@pytest.mark.parametrize("name,billions", [("gpt3-175b", 175), ("gpt3-13b", 13), ("gpt3-1.3b", 1.3),
                                           ("llama2-7b", 6.74), ("llama2-70b", 69.0), ("llama3-8b", 8.03),
                                           ("llama3-70b", 70.6), ("llama3-405b", 405.9)])
def test_parameter_counts(name, billions):
    assert get_model(name).params() / 1e9 == pytest.approx(billions, rel=0.03)


def test_gqa_and_swiglu_fields():
    m = get_model("llama3-70b")
    assert (m.heads, m.kv_heads, m.kv_dim, m.ffn_hidden, m.activation) == (64, 8, 1024, 28672, "swiglu")
    assert m.mlp_matrices == 3
    assert get_model("gpt3-175b").kv_heads == 96


def test_unknown_names_list_valid_ones():
    with pytest.raises(InvalidInstanceError) as e:
        get_model("gpt5")
    assert e.value.field == "model" and "gpt3-175b" in str(e.value)
    with pytest.raises(InvalidInstanceError) as e:
        get_gpu("v100")
    assert e.value.field == "gpu_type" and "a100" in str(e.value)
    with pytest.raises(InvalidInstanceError):
        derive_table("nope", "a100", 512, 2048)
    with pytest.raises(InvalidInstanceError):
        derive_table("gpt3-13b", "tpu", 512, 2048)
    with pytest.raises(InvalidInstanceError) as e:
        derive_table("gpt3-13b", "a100", 512, 2048, recompute="some")
    assert e.value.field == "recompute"
    with pytest.raises(InvalidInstanceError):
        derive_table("gpt3-13b", "a100", 0, 2048)
    with pytest.raises(InvalidInstanceError):
        derive_table("gpt3-13b", "a100", 512, 2048, gpus=[8, -1])


@pytest.mark.parametrize("name", ["gpt3-175b", "megatron-1008b", "megatron-1.7b"])
def test_hardware_flops_is_narayanan_formula(name):
    m = get_model(name)
    B, s, l, h, V = 1536, 2048, m.layers, m.hidden, m.vocab
    model_f, hw_f = iteration_flops(m, B, s, "full")
    assert hw_f == pytest.approx(96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h)), rel=1e-12)
    assert model_f == pytest.approx(72 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h)), rel=1e-12)


def test_more_recomputation_more_hardware_flops():
    m = get_model("llama3-70b")
    model_f, none_f = iteration_flops(m, 1024, 4096, "none")
    gm = get_model("gpt3-13b")
    ratio = iteration_flops(gm, 1024, 2048, "full")[1] / iteration_flops(gm, 1024, 2048, "full")[0]
    _, sel_f = iteration_flops(m, 1024, 4096, "selective")
    _, full_f = iteration_flops(m, 1024, 4096, "full")
    assert model_f == none_f < sel_f < full_f
    curve = derive_table("gpt3-13b", "a100", 1024, 2048, recompute="full", gpus=[64])
    p = curve.points[0]
    assert p.hardware_tflops_per_gpu > p.model_tflops_per_gpu
    assert p.hardware_tflops_per_gpu / p.model_tflops_per_gpu == pytest.approx(ratio, rel=1e-9)
    none = derive_table("gpt3-13b", "a100", 1024, 2048, recompute="none", gpus=[64]).points[0]
    assert none.hardware_tflops_per_gpu == pytest.approx(none.model_tflops_per_gpu)


def test_recomputation_trades_memory_for_time():
    m, g, eff = get_model("gpt3-13b"), get_gpu("a100"), get_efficiency("a100")
    res = {rc: evaluate(m, g, eff, 512, 2048, rc, 4, 2, 8, 2, 1) for rc in ("none", "selective", "full")}
    mem = {rc: float(r.memory_bytes) for rc, r in res.items()}
    t = {rc: float(r.iteration_seconds) for rc, r in res.items()}
    assert mem["full"] < mem["selective"] < mem["none"]
    assert t["none"] < t["selective"] < t["full"]


def test_gqa_shrinks_kv_work():
    g, eff = get_gpu("h100"), get_efficiency("h100")
    gqa = get_model("llama2-70b")
    mha = gqa.model_copy(update={"kv_heads": gqa.heads})
    assert gqa.params() < mha.params()
    a = evaluate(gqa, g, eff, 512, 4096, "full", 8, 4, 2, 1, 1)
    b = evaluate(mha, g, eff, 512, 4096, "full", 8, 4, 2, 1, 1)
    assert float(a.iteration_seconds) < float(b.iteration_seconds)
    assert float(a.memory_bytes) < float(b.memory_bytes)


def test_more_network_bandwidth_never_slower():
    m, eff = get_model("gpt3-175b"), get_efficiency("a100")
    slow, fast = get_gpu("a100"), get_gpu("a100").model_copy(update={"network_gb_per_s": 100.0})
    tp, pp, dp = np.array([8, 8, 4]), np.array([12, 8, 24]), np.array([16, 24, 16])
    a = evaluate(m, slow, eff, 1536, 2048, "full", tp, pp, dp, 1, 1).iteration_seconds
    b = evaluate(m, fast, eff, 1536, 2048, "full", tp, pp, dp, 1, 1).iteration_seconds
    assert np.all(b < a)
