"""Accuracy against published throughput (Megatron SC'21 Table 1, GPT-3 175B, Llama 3 405B).

The a100 constants were fitted to Table 1 (calibrate.py, benchmarks/perf_megatron_table.py);
the h100 gemm_efficiency to the two Llama 3 points; see docs/perf.md.
"""

import pytest

from tests.test_perf_model import MEGATRON_TABLE1, megatron_name
from unicron_plan.perf import derive_table
from unicron_plan.perf.layouts import ranked, search
from unicron_plan.perf.library import get_efficiency, get_gpu, get_model


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
