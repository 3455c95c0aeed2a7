"""A short, bounded version of benchmarks/service_load.py (the full one runs 50 clients for 60 s)."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))


@pytest.mark.slow
def test_concurrent_load_loses_no_history_entry():
    from service_load import run

    from conftest import ROOT

    result = run(str(ROOT / "instances" / "paper-128-a800.json"), clients=12, seconds=4, pause=0.1)
    assert result["dry_runs"] > 0
    assert result["responses_5xx"] == 0 and result["unexpected_responses"] == 0
    assert result["transport_errors"] == 0
    assert result["history_matches"], (result["acknowledged"], result["history"])
