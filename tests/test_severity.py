"""Unicron's error taxonomy (Table 1) and the detection constants (failures.md)."""

from __future__ import annotations

import numpy as np
import pytest

from unicron_plan.faults import faultdata, severity
from unicron_plan.faults.severity import Action, Detection, Severity


@pytest.mark.parametrize("error,sev,action", [
    ("ecc_error", Severity.SEV1, Action.RECONFIGURE),
    ("lost_connection", Severity.SEV1, Action.RECONFIGURE),
    ("nvlink_error", Severity.SEV1, Action.RECONFIGURE),
    ("illegal_memory_access", Severity.SEV2, Action.RESTART),
    ("task_hang", Severity.SEV2, Action.RESTART),
    ("exited_abnormally", Severity.SEV2, Action.RESTART),
    ("link_flapping", Severity.SEV3, Action.REATTEMPT),
    ("connection_reset", Severity.SEV3, Action.REATTEMPT),
])
def test_table1_severity_and_action(error, sev, action):
    c = severity.classify(error)
    assert (c.severity, c.action) == (sev, action)


def test_every_error_kind_has_a_detection_method_and_a_time():
    for e in severity.error_kinds():
        c = severity.classify(e)
        assert isinstance(c.detection, Detection)
        assert 0 < severity.detection_seconds(e) < faultdata.NCCL_TIMEOUT_SECONDS
        assert severity.detection_seconds(e, in_band=False) == 30 * 60


def test_detection_methods_follow_table1():
    assert severity.classify("lost_connection").detection is Detection.NODE_HEALTH
    assert severity.classify("exited_abnormally").detection is Detection.PROCESS_SUPERVISION
    assert severity.classify("task_hang").detection is Detection.STATISTICAL_MONITORING
    assert severity.detection_seconds("task_hang") == 3 * faultdata.ITERATION_SECONDS


def test_unknown_error_lists_the_known_kinds():
    with pytest.raises(ValueError, match="ecc_error"):
        severity.classify("gremlins")


def test_figure1_mix_sums_to_one_and_matches_the_percentages():
    mix = severity.figure1_severity_mix()
    assert sum(mix.values()) == pytest.approx(1.0)
    # Figure 1: SEV1 5.0+4.5+2.1+0.6, SEV2 3.1+2.1+1.6+3.3, SEV3 3.9+4.0+2.1+1.0 (of 33.3)
    assert mix["sev1"] == pytest.approx(12.2 / 33.3)
    assert mix["sev2"] == pytest.approx(10.1 / 33.3)


def test_restart_cost_is_figure2():
    # 68 min = 30 hang + 9 resubmit + 14 setup + 15 recompute (mean lost work = half the interval)
    total = (faultdata.NCCL_TIMEOUT_SECONDS + faultdata.RESTART_SECONDS
             + faultdata.CHECKPOINT_INTERVAL_SECONDS / 2)
    assert total == 68 * 60
    assert faultdata.LLAMA3_NODE_MTBF_HOURS == pytest.approx(6332, abs=1)


def test_draw_error_is_seeded_and_respects_severity():
    a = [severity.draw_error(np.random.default_rng(7), "sev1") for _ in range(3)]
    b = [severity.draw_error(np.random.default_rng(7), "sev1") for _ in range(3)]
    assert a == b
    rng = np.random.default_rng(0)
    draws = [severity.draw_error(rng, "sev3") for _ in range(2000)]
    assert set(draws) <= set(severity.errors_of("sev3"))
    # other_network_error (4.0) is drawn about 4x as often as connection_reset (1.0)
    ratio = draws.count("other_network_error") / max(draws.count("connection_reset"), 1)
    assert 3.0 < ratio < 5.5
