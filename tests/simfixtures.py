"""Small scenarios for the simulator tests (dicts, docs/format.md "Scenario")."""

from __future__ import annotations

import copy
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GPU = {"peak_tflops": 312.0, "memory_gib": 80.0, "intra_node_gbps": 1600.0, "inter_node_gbps": 200.0}
F8, F16 = 1000.0, 1900.0


def _figure2() -> dict:
    """Overrides that give the timeout baselines Unicron Figure 2's constants (every error detected at the
    30-minute NCCL timeout, no blocking checkpoint save) in place of the packaged published ones, for
    the runs computed by hand from those constants."""
    from unicron_plan.faults import faultdata, severity

    timeout = {e: faultdata.NCCL_TIMEOUT_SECONDS for e in severity.error_kinds()}
    out = {name: {"detection_seconds": dict(timeout)} for name in ("megatron", "oobleck", "varuna", "bamboo")}
    out["megatron"]["checkpoint_save_seconds"] = 0.0
    return out


def one_job_trace(events: list[dict], duration: float = 10.0, mtbf: float = 1000.0, figure2: bool = False) -> dict:
    """Two 8-GPU nodes, one job on both (8 -> 1000, 16 -> 1900 TFLOP/s), the given trace (``figure2``:
    the baselines with Unicron Figure 2's constants, see :func:`_figure2`)."""
    extra = {"policy_models": _figure2()} if figure2 else {}
    return {**extra, 
        "schema_version": "1", "name": "one-job-trace",
        "cluster": {"gpu_types": {"a800": dict(GPU)}, "nodes": [
            {"id": "n0", "gpu_type": "a800", "gpus": 8}, {"id": "n1", "gpu_type": "a800", "gpus": 8}]},
        "jobs": [{"id": "j", "weight": 1.0,
                  "throughput": {"gpu_type": "a800", "tflops": {"8": F8, "16": F16}},
                  "current": {"gpus": 16, "nodes": ["n0", "n1"]}, "transition_seconds": 600.0}],
        "cost": {"default_transition_seconds": 600.0, "node_mtbf_hours": mtbf},
        "duration_hours": duration,
        "trace": events,
    }


def library(stem: str) -> dict:
    """A library scenario as a dict."""
    return json.loads((ROOT / "scenarios" / f"{stem}.json").read_text())


def stressed_128(mtbf: float = 300.0, hours: float = 240.0) -> dict:
    """The 128-GPU library scenario with frequent failures and a shorter horizon (fast tests)."""
    sc = copy.deepcopy(library("gpt3-mix-128-a800"))
    sc["failures"]["node_mtbf_hours"] = mtbf
    sc["duration_hours"] = hours
    sc["name"] = "stressed-128"
    return sc
