"""The shipped scenarios' D_trans comes from the package's transition model (scenarios/build.py)."""

import importlib.util
import json

import pytest

from simfixtures import ROOT

SHIPPED = sorted((ROOT / "scenarios").glob("*.json"))


def _build():
    spec = importlib.util.spec_from_file_location("scenario_build", ROOT / "scenarios" / "build.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _model(job_id: str) -> str:
    """gpt3-175b-03 -> gpt3-175b (the library's job ids are the model, with an index when repeated)."""
    head, _, tail = job_id.rpartition("-")
    return head if tail.isdigit() else job_id


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_every_shipped_job_has_the_derived_transition_time(path):
    build = _build()
    sc = json.loads(path.read_text())
    assert "default_transition_seconds" not in sc["cost"]  # no unsourced default behind the jobs
    for job in sc["jobs"]:
        tp = job["throughput"]  # on a mixed fleet: derived on the job's time-0 GPU type
        gpus = job["current"]["gpus"] or min(int(c) for c in (tp.get("tflops") or tp["by_type"][tp["gpu_type"]]))
        assert job["transition_seconds"] == build.derived_d_trans(_model(job["id"]), gpus, tp["gpu_type"]), job["id"]
        assert 55.0 <= job["transition_seconds"] <= 70.0
