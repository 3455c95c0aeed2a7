"""Megatron-LM's layout rules hold for every layout the model can report, inputs that would
cause unbounded work are refused up front, and measured points flow into plans by commands."""

import json
import subprocess
import sys
import time

import numpy as np
import pytest

from unicron_plan.perf import derive_table
from unicron_plan.perf.iteration import MIN_LAYERS_UNEVEN, evaluate
from unicron_plan.perf.layouts import enumerate_layouts
from unicron_plan.perf.library import get_efficiency, get_gpu, get_model, gpu_names, model_names

CLI = [sys.executable, "-m", "unicron_plan.cli"]


def _assert_megatron_rules(model, gpu, batch, lay, seq_len):
    tp, pp, dp, mb, v, n = (lay[k] for k in ("tp", "pp", "dp", "micro_batch", "virtual_stages", "gpus"))
    cp = lay["cp"]
    assert np.all(tp * cp * pp * dp == n)
    assert np.all(seq_len % (2 * cp[cp > 1]) == 0)  # load-balanced causal split of ring attention
    assert np.all((tp & (tp - 1)) == 0) and np.all(tp <= gpu.gpus_per_node)
    assert np.all(model.heads % tp == 0) and np.all(model.kv_heads % tp == 0)
    even = model.layers % pp == 0
    uneven = ((model.layers + 2) % pp == 0) & (pp > 1) & ((model.layers + 2) // pp >= MIN_LAYERS_UNEVEN)
    assert np.all(even | uneven)
    assert np.all(batch % (mb * dp) == 0)
    per_stage = np.where(even, model.layers // pp, (model.layers + 2) // pp)
    inter = v > 1
    assert np.all(pp[inter] > 1)
    assert np.all(per_stage[inter] % v[inter] == 0)
    assert np.all(((batch // dp // mb)[inter]) % pp[inter] == 0)
    ep = lay["ep"]  # expert parallelism is carved out of dp and splits the routed experts
    assert np.all(dp % ep == 0)
    if model.moe:
        assert np.all(model.experts % ep == 0)
    else:
        assert np.all(ep == 1)


@pytest.mark.parametrize("name", model_names())
def test_every_layout_of_every_library_model_up_to_4096_gpus_follows_megatron_rules(name):
    model = get_model(name)
    for gpu_type in gpu_names():
        gpu = get_gpu(gpu_type)
        for batch, seq in ((512, 8192), (1536, 2048), (64, 32768)):
            lay = enumerate_layouts(model, gpu, batch, max_gpus=4096, seq_len=seq)
            assert lay["gpus"].size > 0
            _assert_megatron_rules(model, gpu, batch, lay, seq)


def test_175b_has_no_49_stage_pipeline():
    """96 layers do not split into 49 stages: 98 GPUs (2 x 49) has no layout for GPT-3 175B."""
    curve = derive_table("gpt3-175b", "a800", 1536, 2048, gpus=[96, 98])
    assert [p.gpus for p in curve.points] == [96]
    assert curve.points[0].tp > 1


def test_llama3_405b_keeps_its_published_16_stage_pipeline():
    """126 layers on 16 stages (8 per stage, 7 on the first and last) as Llama 3 trained."""
    lay = enumerate_layouts(get_model("llama3-405b"), get_gpu("h100"), 2048, counts=[16384])
    assert np.any((lay["tp"] == 8) & (lay["pp"] == 16) & (lay["dp"] == 128))


def _cli(args, timeout=60):
    start = time.perf_counter()
    r = subprocess.run(CLI + args, capture_output=True, text=True, timeout=timeout)
    return r, time.perf_counter() - start


def _model_instance(**throughput_over):
    thr = {"gpu_type": "a800", "model": "gpt3-13b", "global_batch": 512, "seq_len": 2048}
    thr.update(throughput_over)
    return {"schema_version": "1", "name": "bounds",
            "cluster": {"gpu_types": {"a800": {"inter_node_gbps": 200.0, "intra_node_gbps": 1600.0,
                                               "memory_gib": 80.0, "peak_tflops": 312.0}},
                        "nodes": [{"id": f"n{i}", "gpus": 8, "gpu_type": "a800", "failed_gpus": [], "rack": "r0"}
                                  for i in range(4)]},
            "jobs": [{"id": "j", "weight": 1.0, "throughput": thr,
                      "current": {"gpus": 16, "nodes": ["n0", "n1"]}}],
            "event": {"kind": "failure", "failed_nodes": ["n0"], "failed_gpus": []},
            "cost": {"node_mtbf_hours": 6332.0, "default_transition_seconds": 60.0}}


@pytest.mark.parametrize("over,field", [
    ({"global_batch": 10 ** 18}, "global_batch"),
    ({"seq_len": 10 ** 15}, "seq_len"),
])
def test_huge_batch_shapes_are_refused_at_once(tmp_path, over, field):
    path = tmp_path / "i.json"
    path.write_text(json.dumps(_model_instance(**over)))
    r, seconds = _cli(["solve", str(path)])
    assert r.returncode == 2 and field in r.stderr and "Traceback" not in r.stderr


def test_huge_current_count_is_refused_before_any_layout_search(tmp_path):
    doc = _model_instance()
    doc["jobs"][0]["current"]["gpus"] = 10 ** 15
    path = tmp_path / "i.json"
    path.write_text(json.dumps(doc))
    r, seconds = _cli(["solve", str(path)])
    assert r.returncode == 2 and "jobs[0].current.gpus" in r.stderr


# --- calibrate: bad points files are bad input, a failed fit is exit 1 -------------------------

GOOD_POINT = {"model": "gpt3-1.3b", "global_batch": 256, "seq_len": 2048, "recompute": "full",
              "tp": 1, "pp": 1, "dp": 16, "micro_batch": 4, "iteration_seconds": 2.0}


@pytest.mark.parametrize("doc,field", [
    ({"points": [GOOD_POINT]}, "gpu_type"),
    ({"gpu_type": "a100"}, "points"),
    ({"gpu_type": "a100", "points": []}, "points"),
    ({"gpu_type": "a100", "points": [dict(GOOD_POINT, tp="2")]}, "points[0].tp"),
    ({"gpu_type": "a100", "points": [dict(GOOD_POINT, tp=0)]}, "points[0].tp"),
    ({"gpu_type": "a100", "points": [dict(GOOD_POINT, tp=True)]}, "points[0].tp"),
    ({"gpu_type": "a100", "points": [dict(GOOD_POINT, global_batch=10 ** 18)]}, "points[0].global_batch"),
    ({"gpu_type": "a100", "points": [dict(GOOD_POINT, iteration_seconds=-1.0)]}, "points[0].iteration_seconds"),
    ({"gpu_type": "a100", "points": [dict(GOOD_POINT, hardware_tflops_per_gpu=100.0)]}, "points[0]"),
    ({"gpu_type": "a100", "points": [dict(GOOD_POINT, recompute="auto")]}, "points[0].recompute"),
    ({"gpu_type": "a100", "points": [dict(GOOD_POINT, model="no-such-model")]}, "points[0].model"),
    ({"gpu_type": "a100", "points": [dict(GOOD_POINT, tp=3)]}, "points[0]"),
    ({"gpu_type": "no-such-gpu", "points": [GOOD_POINT]}, "gpu_type"),
    ({"gpu_type": "a100", "fit": ["magic"], "points": [GOOD_POINT]}, "fit[0]"),
    ({"gpu_type": "a100", "fit": [], "points": [GOOD_POINT]}, "fit"),
    ({"gpu_type": "a100", "points": [dict(GOOD_POINT, extra=1)]}, "points[0].extra"),
    ({"gpu_type": "a100", "points": [GOOD_POINT] * 1001}, "points"),
    ({"gpu_type": "a100", "points": [dict(GOOD_POINT, tp=1024, pp=1024, dp=2)]}, "points[0]"),
])
def test_bad_points_files_exit_2_naming_the_field(tmp_path, doc, field):
    pts = tmp_path / "points.json"
    pts.write_text(json.dumps(doc))
    out = tmp_path / "eff.json"
    r, _ = _cli(["calibrate", str(pts), "--out", str(out)])
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("error: " + field), r.stderr
    assert "Traceback" not in r.stderr and not out.exists()


def test_failed_fit_exits_1_with_the_reason_and_writes_nothing(tmp_path):
    # Two runs of the same layout, one ten times slower: no constants explain both.
    pts = tmp_path / "points.json"
    pts.write_text(json.dumps({"gpu_type": "a100", "points": [GOOD_POINT, dict(GOOD_POINT, iteration_seconds=20.0)]}))
    out = tmp_path / "eff.json"
    r, _ = _cli(["calibrate", str(pts), "--out", str(out)])
    assert r.returncode == 1 and "RMS log error" in r.stderr
    assert not out.exists()


def test_schema_points_is_the_json_schema_of_the_points_file():
    r, _ = _cli(["schema", "points"])
    assert r.returncode == 0
    schema = json.loads(r.stdout)
    assert set(schema["required"]) == {"gpu_type", "points"}
    assert "iteration_seconds" in json.dumps(schema)


# --- from five measured iterations to a plan, with commands alone --------------------------------

TRUE = {"gemm_efficiency": 0.55, "attention_efficiency": 0.45, "nvlink_efficiency": 0.7,
        "network_efficiency": 0.5}
MEASURED = [("gpt3-1.3b", 256, 1, 1, 16, 4), ("gpt3-13b", 512, 8, 1, 4, 4), ("gpt3-13b", 512, 4, 2, 4, 2),
            ("gpt3-6.7b", 128, 2, 1, 32, 2), ("gpt3-2.7b", 512, 1, 1, 8, 8)]


def test_five_measured_iterations_to_a_calibrated_curve_and_a_plan(tmp_path):
    base = get_efficiency("a800")
    truth = base.model_copy(update={"constants": base.constants.model_copy(update=TRUE)})
    g = get_gpu("a800")
    points = []
    for name, batch, tp, pp, dp, b in MEASURED:  # what a user measured on their cluster
        r = evaluate(get_model(name), g, truth, batch, 2048, "full", tp, pp, dp, b, 1)
        points.append({"model": name, "global_batch": batch, "seq_len": 2048, "recompute": "full",
                       "tp": tp, "pp": pp, "dp": dp, "micro_batch": b,
                       "iteration_seconds": float(r.iteration_seconds)})
    pts, eff = tmp_path / "points.json", tmp_path / "efficiency.json"
    pts.write_text(json.dumps({"gpu_type": "a800", "fit": list(TRUE), "points": points}))
    r, _ = _cli(["calibrate", str(pts), "--out", str(eff)])
    assert r.returncode == 0, r.stderr
    fitted = json.loads(r.stdout)
    for k, v in TRUE.items():
        assert fitted[k] == pytest.approx(v, rel=0.03), k

    r, _ = _cli(["curve", "gpt3-13b", "--gpu-type", "a800", "--global-batch", "512", "--seq-len", "2048",
                 "--gpus", "16,32", "--efficiency", str(eff), "--json"])
    assert r.returncode == 0, r.stderr
    calibrated = {p["gpus"]: p for p in json.loads(r.stdout)["points"]}
    r, _ = _cli(["curve", "gpt3-13b", "--gpu-type", "a800", "--global-batch", "512", "--seq-len", "2048",
                 "--gpus", "16,32", "--json"])
    packaged = {p["gpus"]: p for p in json.loads(r.stdout)["points"]}
    assert calibrated[16]["model_tflops_per_gpu"] != pytest.approx(packaged[16]["model_tflops_per_gpu"], rel=1e-3)

    doc = _model_instance()
    doc["efficiency"] = {"a800": {k: v for k, v in fitted.items()}}
    inst = tmp_path / "inst.json"
    inst.write_text(json.dumps(doc))
    r, _ = _cli(["solve", str(inst)])
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    job = plan["jobs"][0]
    assert job["gpus"] in calibrated or job["gpus"] in (8, 24)
    curve = derive_table("gpt3-13b", "a800", 512, 2048, gpus=[job["gpus"]],
                         constants=get_efficiency("a800").constants.model_copy(update=fitted))
    assert job["waf_tflops"] == pytest.approx(curve.tflops_table()[job["gpus"]], rel=1e-9)
    assert job["parallelism"]["recompute"] in ("full", "selective", "none")


def test_instance_efficiency_must_name_a_library_gpu_type(tmp_path):
    doc = _model_instance()
    doc["efficiency"] = {"b9000": dict(get_efficiency("a800").constants.model_dump())}
    path = tmp_path / "i.json"
    path.write_text(json.dumps(doc))
    r, _ = _cli(["solve", str(path)])
    assert r.returncode == 2 and r.stderr.startswith("error: efficiency.b9000")
