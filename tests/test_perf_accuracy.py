"""Accuracy against published throughput (Megatron SC'21 Table 1, GPT-3 175B, Llama 3 405B).

The a100 constants were fitted to Table 1 (calibrate.py, benchmarks/perf_megatron_table.py);
the h100 gemm_efficiency to the two Llama 3 points; see docs/perf.md.
"""

import csv
from pathlib import Path

import pytest

from unicron_plan.perf import derive_table
from unicron_plan.perf.layouts import ranked, search
from unicron_plan.perf.library import get_efficiency, get_gpu, get_model

# Narayanan et al. SC'21 Table 1 (also docs/data/megatron_table1.csv):
# params_billion, heads, hidden, layers, tp, pp, gpus, global_batch, tflops_per_gpu
MEGATRON_TABLE1 = [
    (1.7, 24, 2304, 24, 1, 1, 32, 512, 137), (3.6, 32, 3072, 30, 2, 1, 64, 512, 138),
    (7.5, 32, 4096, 36, 4, 1, 128, 512, 142), (18.4, 48, 6144, 40, 8, 1, 256, 1024, 135),
    (39.1, 64, 8192, 48, 8, 2, 512, 1536, 138), (76.1, 80, 10240, 60, 8, 4, 1024, 1792, 140),
    (145.6, 96, 12288, 80, 8, 8, 1536, 2304, 148), (310.1, 128, 16384, 96, 8, 16, 1920, 2160, 155),
    (529.6, 128, 20480, 105, 8, 35, 2520, 2520, 163), (1008.0, 160, 25600, 128, 8, 64, 3072, 3072, 163),
]
CSV = Path(__file__).resolve().parents[1] / "docs" / "data" / "megatron_table1.csv"


def megatron_name(params_billion: float) -> str:
    return f"megatron-{params_billion:g}b"


def test_embedded_table_matches_shared_csv():
    if not CSV.exists():
        pytest.skip("docs/data/megatron_table1.csv is missing")
    with CSV.open() as fh:
        rows = list(csv.DictReader(line for line in fh if not line.startswith("#")))
    got = [(float(r["params_billion"]), int(r["heads"]), int(r["hidden"]), int(r["layers"]), int(r["tp"]),
            int(r["pp"]), int(r["gpus"]), int(r["global_batch"]), int(r["tflops_per_gpu"])) for r in rows]
    assert got == MEGATRON_TABLE1


@pytest.mark.parametrize("row", MEGATRON_TABLE1)
def test_megatron_models_match_table(row):
    m = get_model(megatron_name(row[0]))
    assert (m.heads, m.hidden, m.layers, m.vocab, m.ffn_hidden) == (row[1], row[2], row[3], 51200, 4 * row[2])
    assert m.params() / 1e9 == pytest.approx(row[0], rel=0.04)  # the paper also counts position embeddings


@pytest.mark.parametrize("row", MEGATRON_TABLE1, ids=[megatron_name(r[0]) for r in MEGATRON_TABLE1])
def test_megatron_table1_row(row):
    params, _, _, _, tp, pp, n, batch, published = row
    name = megatron_name(params)
    curve = derive_table(name, "a100", batch, 2048, recompute="full", gpus=[n])
    assert [p.gpus for p in curve.points] == [n]
    hw = curve.points[0].hardware_tflops_per_gpu
    assert abs(hw / published - 1) <= 0.10, f"{name}: predicted {hw:.1f}, published {published}"
    c = search(get_model(name), get_gpu("a100"), get_efficiency("a100"), batch, 2048, "full", counts=[n])
    order = []
    for i in ranked(c, n):
        if (int(c.tp[i]), int(c.pp[i])) not in order:
            order.append((int(c.tp[i]), int(c.pp[i])))
    assert (tp, pp) in order[:5], f"{name}: published (tp, pp) = {(tp, pp)} not in top 5 {order[:5]}"


def test_gpt3_175b_on_1536_a100():
    p = derive_table("gpt3-175b", "a100", 1536, 2048, gpus=[1536]).points[0]
    assert abs(p.hardware_tflops_per_gpu / 140 - 1) <= 0.10


@pytest.mark.parametrize("n,published", [(8192, 430.0), (16384, 400.0)])
def test_llama3_405b_on_h100(n, published):
    p = derive_table("llama3-405b", "h100", 2048, 8192, recompute="none", gpus=[n]).points[0]
    assert abs(p.model_tflops_per_gpu / published - 1) <= 0.10
    assert 0.36 <= p.mfu <= 0.48


def test_llama3_405b_long_context_at_the_published_layout():
    """Held-out row (not used for fitting): Llama 3 405B, 131K sequence, TP8 CP16 PP16 DP8, 380 TFLOP/s."""
    from unicron_plan.perf import rank_layouts
    rows = [r for r in rank_layouts("llama3-405b", "h100", 128, 131072, 16384)
            if (r["tp"], r["pp"], r["dp"], r["cp"]) == (8, 16, 8, 16)]
    assert rows, "the published layout must be valid and fit"
    assert abs(rows[0]["model_tflops_per_gpu"] / 380 - 1) <= 0.10


def test_llama3_405b_long_context_at_the_defaults():
    """The same held-out row with the model's own best layout (recompute auto, default stack)."""
    p = derive_table("llama3-405b", "h100", 128, 131072, gpus=[16384]).points[0]
    assert abs(p.model_tflops_per_gpu / 380 - 1) <= 0.10, f"predicted {p.model_tflops_per_gpu:.1f}"


def test_all_gather_context_parallelism_is_exposed():
    """An all-gather CP stack pays the K/V traffic in full; a ring hides it behind attention."""
    from unicron_plan.perf.iteration import evaluate

    model, gpu = get_model("llama3-405b"), get_gpu("h100")
    eff = get_efficiency("h100")
    ring = eff.model_copy(update={"stack": eff.stack.model_copy(update={"cp_comm": "ring"})})
    gather = eff.model_copy(update={"stack": eff.stack.model_copy(update={"cp_comm": "all_gather"})})
    args = (model, gpu)
    kw = dict(global_batch=128, seq_len=131072, recompute="none", tp=8, pp=16, dp=8, micro_batch=1, cp=16)
    t_ring = float(evaluate(*args, ring, **kw).iteration_seconds)
    t_gather = float(evaluate(*args, gather, **kw).iteration_seconds)
    assert t_gather > t_ring
    no_cp = dict(kw, cp=1, dp=128)
    assert float(evaluate(*args, ring, **no_cp).iteration_seconds) == \
        float(evaluate(*args, gather, **no_cp).iteration_seconds)


def test_deepseek_v3_with_fp8_gemms_within_20_percent():
    """Held-out MoE row: 180K H800 GPU hours per trillion tokens on 2048 H800 (1543 tokens/s/GPU)."""
    p = derive_table("deepseek-v3", "h800", 15360, 4096, gpus=[2048], stack="megatron-core-fp8").points[0]
    assert abs(p.tokens_per_second / 2048 / 1543 - 1) <= 0.20
