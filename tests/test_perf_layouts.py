"""Layout search: every reported layout is valid, fits, and is the fastest."""


import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from unicron_plan.perf import derive_table
from unicron_plan.perf.curve import POINT_FIELDS
from unicron_plan.perf.iteration import evaluate
from unicron_plan.perf.layouts import pipeline_sizes, ranked, search
from unicron_plan.perf.library import get_efficiency, get_gpu, get_model

MODELS = ["gpt3-1.3b", "gpt3-13b", "llama2-13b", "llama3-8b", "llama3-70b", "megatron-39.1b"]


def _check_point(p, model, gpu_type, batch):
    m, g = get_model(model), get_gpu(gpu_type)
    assert p.tp * p.cp * p.pp * p.dp == p.gpus
    assert p.tp & (p.tp - 1) == 0 and p.tp <= g.gpus_per_node
    assert m.heads % p.tp == 0 and m.kv_heads % p.tp == 0
    assert m.layers % p.pp == 0 or (m.layers + 2) % p.pp == 0
    assert batch % (p.micro_batch * p.dp) == 0
    assert 0 < p.memory_gib_per_gpu <= g.memory_gib * get_efficiency(gpu_type).usable_fraction
    assert 0 < p.model_tflops_per_gpu <= p.hardware_tflops_per_gpu < g.peak_tflops
    assert p.mfu == pytest.approx(p.model_tflops_per_gpu / g.peak_tflops)


@settings(max_examples=25, deadline=None, derandomize=True)
@given(model=st.sampled_from(MODELS), gpu=st.sampled_from(["a100", "a800", "h100", "h800", "h200"]),
       batch=st.sampled_from([64, 256, 512, 1536]), rc=st.sampled_from(["full", "selective", "none"]))
def test_every_point_is_a_valid_fitting_layout(model, gpu, batch, rc):
    curve = derive_table(model, gpu, batch, 2048, recompute=rc, max_gpus=256)
    for p in curve.points:
        _check_point(p, model, gpu, batch)
    assert [p.gpus for p in curve.points] == sorted({p.gpus for p in curve.points})


def test_point_is_the_fastest_valid_layout():
    m, g, eff = get_model("gpt3-13b"), get_gpu("a100"), get_efficiency("a100")
    c = search(m, g, eff, 512, 2048, "full", counts=[64])
    best = derive_table("gpt3-13b", "a100", 512, 2048, recompute="full", gpus=[64]).points[0]
    order = ranked(c, 64)
    assert best.iteration_seconds == pytest.approx(float(c.iteration_seconds[order[0]]))
    assert all(c.iteration_seconds[i] >= best.iteration_seconds * (1 - 1e-12) for i in order)
    # brute force over the same rules, one layout at a time
    brute = np.inf
    for tp in (1, 2, 4, 8):
        for pp in pipeline_sizes(m):
            if 64 % (tp * pp):
                continue
            dp = 64 // (tp * pp)
            if 512 % dp:
                continue
            for b in (1, 2, 4, 8):
                if (512 // dp) % b:
                    continue
                r = evaluate(m, g, eff, 512, 2048, "full", tp, pp, dp, b, 1)
                if bool(r.fits):
                    brute = min(brute, float(r.iteration_seconds))
    assert best.iteration_seconds <= brute * (1 + 1e-12)


def test_counts_without_layout_are_absent():
    curve = derive_table("gpt3-13b", "a100", 512, 2048, gpus=[1, 3, 8, 11, 1024])
    got = {p.gpus for p in curve.points}
    assert 1 not in got  # 13B with Adam states does not fit in one GPU
    assert 3 not in got  # only pp = 3 (balanced, 42 slots) splits 3 GPUs, and it does not fit either
    assert 11 not in got  # 11 divides neither 40 or 42 layers nor the batch: no factorisation
    assert 8 in got and 1024 in got
    for p in curve.points:
        _check_point(p, "gpt3-13b", "a100", 512)


def test_table_and_layout_accessors():
    curve = derive_table("gpt3-175b", "a100", 1536, 2048, gpus=[384, 768])
    table = curve.tflops_table()
    assert set(table) == {384, 768}
    for p in curve.points:
        assert table[p.gpus] == pytest.approx(p.model_tflops_per_gpu * p.gpus)
        assert curve.layout(p.gpus) == {"tp": p.tp, "pp": p.pp, "dp": p.dp, "micro_batch": p.micro_batch,
                                        "virtual_stages": p.virtual_stages, "recompute": p.recompute}
    d = curve.to_dict()
    assert list(d) == ["model", "gpu_type", "global_batch", "seq_len", "recompute", "points"]
    assert all(tuple(pt) == POINT_FIELDS for pt in d["points"])


def test_fast_and_cached():
    from unicron_plan.perf import _derive
    _derive.cache_clear()
    a = derive_table("gpt3-175b", "a100", 1536, 2048, max_gpus=2048)
    hits = _derive.cache_info().hits
    b = derive_table("gpt3-175b", "a100", 1536, 2048, max_gpus=2048)
    assert a is b and _derive.cache_info().hits == hits + 1 and len(a.points) > 10
    assert max(p.gpus for p in a.points) <= 2048


def test_rank_layouts_distinct_and_sorted():
    from unicron_plan.perf import rank_layouts
    rows = rank_layouts("gpt3-175b", "a100", 1536, 2048, 1536, top=6)
    assert 1 <= len(rows) <= 6
    keys = [(r["tp"], r["pp"], r["dp"]) for r in rows]
    assert len(set(keys)) == len(keys)
    thr = [r["model_tflops_per_gpu"] for r in rows]
    assert thr == sorted(thr, reverse=True)
    best = derive_table("gpt3-175b", "a100", 1536, 2048, gpus=[1536]).points[0]
    assert thr[0] == pytest.approx(best.model_tflops_per_gpu)
    assert rows[0]["recompute"] == best.recompute
    assert all(r["tp"] * r["pp"] * r["dp"] == 1536 for r in rows)


def test_recompute_none_means_auto():
    a = derive_table("gpt3-13b", "a100", 512, 2048, recompute=None, gpus=[64])
    b = derive_table("gpt3-13b", "a100", 512, 2048, recompute="auto", gpus=[64])
    assert a.points == b.points


@pytest.mark.parametrize("model,gpu,batch,seq", [("llama3-405b", "h100", 2048, 8192),
                                                 ("gpt3-175b", "a100", 1536, 2048),
                                                 ("llama3-8b", "h100", 512, 8192)])
def test_recompute_auto_is_the_fastest_fitting_mode(model, gpu, batch, seq):
    counts = [512, 1024, 2048]
    auto = {p.gpus: p for p in derive_table(model, gpu, batch, seq, gpus=counts).points}
    fixed = {rc: {p.gpus: p for p in derive_table(model, gpu, batch, seq, recompute=rc, gpus=counts).points}
             for rc in ("none", "selective", "full")}
    assert set(auto) == set().union(*(set(f) for f in fixed.values()))
    for n, p in auto.items():
        times = {rc: f[n].iteration_seconds for rc, f in fixed.items() if n in f}
        assert p.iteration_seconds == pytest.approx(min(times.values()))
        assert p.recompute in times and times[p.recompute] == pytest.approx(p.iteration_seconds)
        assert p.to_dict()["recompute"] == p.recompute
