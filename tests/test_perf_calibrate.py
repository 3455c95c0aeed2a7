"""calibrate.py: points generated from known constants are fitted back to them."""

import json

import pytest

from unicron_plan.perf import derive_table
from unicron_plan.perf.calibrate import calibrate
from unicron_plan.perf.iteration import evaluate
from unicron_plan.perf.library import efficiency_data, get_efficiency, get_gpu, get_model

TRUE = {"gemm_efficiency": 0.62, "attention_efficiency": 0.40, "nvlink_efficiency": 0.80,
        "network_efficiency": 0.60}
LAYOUTS = [  # (model, batch, tp, pp, dp, micro_batch): compute-, NVLink- and network-heavy mixes
    ("gpt3-1.3b", 256, 1, 1, 16, 4), ("gpt3-1.3b", 64, 1, 1, 32, 1), ("gpt3-13b", 512, 8, 1, 4, 4),
    ("gpt3-13b", 512, 4, 2, 4, 2), ("gpt3-6.7b", 128, 2, 1, 32, 2), ("megatron-39.1b", 1536, 8, 2, 8, 1),
    ("gpt3-2.7b", 512, 1, 1, 8, 8)]


def test_round_trip_recovers_constants(tmp_path):
    base = get_efficiency("a100")
    truth = base.model_copy(update={"constants": base.constants.model_copy(update=TRUE)})
    g = get_gpu("a100")
    points = []
    for name, batch, tp, pp, dp, b in LAYOUTS:
        r = evaluate(get_model(name), g, truth, batch, 2048, "full", tp, pp, dp, b, 1)
        assert bool(r.fits)
        points.append({"model": name, "global_batch": batch, "seq_len": 2048, "recompute": "full",
                       "tp": tp, "pp": pp, "dp": dp, "micro_batch": b, "virtual_stages": 1,
                       "iteration_seconds": float(r.iteration_seconds)})
    pts = tmp_path / "points.json"
    pts.write_text(json.dumps({"gpu_type": "a100", "stack": "megatron-sc21", "fit": list(TRUE),
                               "points": points}))
    out = tmp_path / "efficiency.json"
    fitted = calibrate(str(pts), str(out))
    for k, v in TRUE.items():
        assert fitted[k] == pytest.approx(v, rel=0.02), k
    # the written file is a complete efficiency document that derive_table can use
    doc = json.loads(out.read_text())
    assert doc["constants"]["a100"]["megatron-sc21"]["gemm_efficiency"] == pytest.approx(fitted["gemm_efficiency"])
    assert set(doc["stacks"]) == set(efficiency_data()["stacks"])
    c = derive_table("gpt3-1.3b", "a100", 256, 2048, gpus=[16], efficiency_file=str(out))
    ref = derive_table("gpt3-1.3b", "a100", 256, 2048, gpus=[16])
    assert c.points[0].hardware_tflops_per_gpu != ref.points[0].hardware_tflops_per_gpu


def test_bad_points_file(tmp_path):
    from unicron_plan.errors import InvalidInstanceError
    pts = tmp_path / "p.json"
    pts.write_text(json.dumps({"gpu_type": "a100", "points": []}))
    with pytest.raises(InvalidInstanceError):
        calibrate(str(pts), str(tmp_path / "o.json"))
    pts.write_text(json.dumps({"gpu_type": "a100", "fit": ["magic"], "points": [{"tp": 1}]}))
    with pytest.raises(InvalidInstanceError):
        calibrate(str(pts), str(tmp_path / "o.json"))
    with pytest.raises(InvalidInstanceError):
        calibrate(str(tmp_path / "missing.json"), str(tmp_path / "o.json"))


def test_rewritten_efficiency_file_is_reread(tmp_path):
    import os
    doc = json.loads(json.dumps(efficiency_data()))
    path = tmp_path / "eff.json"
    path.write_text(json.dumps(doc))
    a = derive_table("gpt3-1.3b", "a100", 256, 2048, gpus=[16], efficiency_file=str(path))
    doc["constants"]["a100"]["megatron-sc21"]["gemm_efficiency"] *= 0.5
    path.write_text(json.dumps(doc))
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10_000_000))
    b = derive_table("gpt3-1.3b", "a100", 256, 2048, gpus=[16], efficiency_file=str(path))
    assert b.points[0].hardware_tflops_per_gpu < a.points[0].hardware_tflops_per_gpu


def test_points_file_must_be_a_strict_json_object(tmp_path):
    import pytest

    from unicron_plan.errors import InvalidInstanceError
    from unicron_plan.perf.calibrate import calibrate

    for text in ("[]", '{"points": NaN}'):
        path = tmp_path / "points.json"
        path.write_text(text)
        with pytest.raises(InvalidInstanceError):
            calibrate(str(path), str(tmp_path / "out.json"))
