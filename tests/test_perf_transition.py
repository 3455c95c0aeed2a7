"""Transition time: nearer copies of the state are faster to restore."""

import pytest

from unicron_plan.errors import InvalidInstanceError
from unicron_plan.perf import transition_seconds
from unicron_plan.perf.transition import SOURCES, nearest_source, transition_breakdown

OLD = {"tp": 8, "pp": 12, "dp": 4, "micro_batch": 1}
NEW = {"tp": 8, "pp": 12, "dp": 8, "micro_batch": 1}


@pytest.mark.parametrize("model,gpu", [("gpt3-175b", "a100"), ("llama3-70b", "h100"), ("gpt3-13b", "a800")])
def test_source_order(model, gpu):
    new = {"tp": 8, "pp": 4, "dp": 2, "micro_batch": 1} if model != "gpt3-175b" else NEW
    n = new["tp"] * new["pp"] * new["dp"]
    t = [transition_seconds(model, gpu, n // 2, n, OLD, new, source=s) for s in SOURCES]
    assert t == sorted(t) and len(set(t)) == len(t), dict(zip(SOURCES, t))


def test_restart_and_state_size():
    b = transition_breakdown("gpt3-175b", "a100", 384, 768, OLD, NEW, source="dp_replica")
    assert b["restart_seconds"] == 60.0
    # 175B / (8 x 12) parameters per GPU, 14 bytes each, within the embedding's share
    assert b["bytes_per_gpu"] == pytest.approx(175e9 / 96 * 14, rel=0.05)
    assert b["seconds"] == pytest.approx(60.0 + b["bytes_per_gpu"] / 25e9)
    cheap = transition_seconds("gpt3-175b", "a100", 384, 768, OLD, NEW, source="dp_replica",
                               costs={"restart_seconds": 0.0})
    assert cheap == pytest.approx(b["move_seconds"])


def test_nearest_source_rules():
    assert nearest_source(NEW, OLD, 768, 384) == "local"  # shrink, same shards
    assert nearest_source(OLD, NEW, 384, 768) == "dp_replica"  # grow: copy a replica
    small = {"tp": 4, "pp": 1, "dp": 1}
    assert nearest_source(small, {"tp": 8, "pp": 1, "dp": 1}, 4, 8) == "nvlink"
    assert nearest_source(OLD, NEW, 384, 768, lost_state=True) == "memory_checkpoint"
    assert nearest_source(OLD, NEW, 384, 768, lost_state=True, memory_checkpoint=False) == "remote_storage"
    assert transition_seconds("gpt3-175b", "a100", 768, 384, NEW, OLD) == 60.0
    assert nearest_source(OLD, OLD, 384, 384, hit=True) == "dp_replica"  # replacements copy a replica
    assert nearest_source(small, small, 4, 4, hit=True) == "memory_checkpoint"  # dp = 1: no replica
    assert transition_seconds("gpt3-175b", "a100", 384, 384, OLD, OLD, hit=True) > 60.0


def test_bad_input():
    with pytest.raises(InvalidInstanceError):
        transition_seconds("gpt3-175b", "a100", 384, 768, OLD, NEW, source="tape")
    with pytest.raises(InvalidInstanceError):
        transition_seconds("gpt3-175b", "a100", 384, 700, OLD, NEW)
    with pytest.raises(InvalidInstanceError):
        transition_seconds("gpt3-175b", "a100", 384, 768, OLD, {"tp": 8})
    with pytest.raises(InvalidInstanceError):
        transition_seconds("gpt3-175b", "a100", 384, 768, OLD, {"tp": 8, "pp": 7, "dp": 13})
