"""The simulator against hand-computed runs, its accounting identity, determinism and the planner it calls."""

from __future__ import annotations

import math

import numpy as np
import pytest

from simfixtures import F8, F16, one_job_trace, stressed_128
from unicron_plan import api
from unicron_plan.faults import faultdata
from unicron_plan.io import dumps
from unicron_plan.schema import Instance
from unicron_plan.simulate import load_scenario, simulate, summarize
from unicron_plan.simulate.policies import POLICIES, UnicronPolicy, policy_model
from unicron_plan.simulate.run import run_seeds
from unicron_plan.simulate.trace import draw_events

H = 3600.0
T = 10 * H
SEV1_AT_1_25H = [{"time_hours": 1.25, "kind": "failure", "node": "n1", "severity": "sev1", "error": "ecc_error"},
                 {"time_hours": 3.0, "kind": "repair", "node": "n1"}]


def run(events, policies, **kw):
    return simulate(load_scenario(one_job_trace(events, figure2=True, **kw)), policies, seed=0)["policies"]


def test_unicron_by_hand():
    r = run(SEV1_AT_1_25H, ["unicron"])["unicron"]
    det = faultdata.EXCEPTION_PROPAGATION_SECONDS
    t_fail, t_rep = 1.25 * H, 3 * H
    expected = F16 * t_fail + F8 * (t_rep - t_fail - det - 600) + F16 * (T - t_rep - 600)
    assert r["weighted_tflop"] == pytest.approx(expected, rel=1e-12)
    assert r["reconfigurations"] == 2 and r["plans"] == 3
    assert r["downtime_hours"]["detection"] == pytest.approx(det / H)
    assert r["downtime_hours"]["transition"] == pytest.approx(2 * 600 / H)


def test_megatron_by_hand_waits_for_repair_and_recomputes():
    r = run(SEV1_AT_1_25H, ["megatron"])["megatron"]
    t_fail, t_rep = 1.25 * H, 3 * H
    lost = t_fail % faultdata.CHECKPOINT_INTERVAL_SECONDS  # 900 s since the last checkpoint
    expected = F16 * t_fail + F16 * (T - t_rep - faultdata.RESTART_SECONDS - lost)
    assert r["weighted_tflop"] == pytest.approx(expected, rel=1e-12)
    assert r["downtime_hours"]["detection"] == pytest.approx(faultdata.NCCL_TIMEOUT_SECONDS / H)
    assert r["recompute_hours"] == pytest.approx(lost / H)
    assert r["downtime_hours"]["transition"] == pytest.approx((faultdata.RESTART_SECONDS + lost) / H)
    # waiting for the repair is sub-healthy time at rate 0
    assert r["downtime_hours"]["sub_healthy"] == pytest.approx((t_rep - t_fail - faultdata.NCCL_TIMEOUT_SECONDS) / H)


def test_oobleck_by_hand_shrinks_on_its_own_nodes():
    r = run(SEV1_AT_1_25H, ["oobleck"])["oobleck"]
    t_fail, t_rep, det = 1.25 * H, 3 * H, faultdata.NCCL_TIMEOUT_SECONDS
    expected = F16 * t_fail + F8 * (t_rep - t_fail - det - 600) + F16 * (T - t_rep - 600)
    factor = policy_model("oobleck").healthy_throughput_factor  # its failure-free speed vs Megatron's
    assert r["weighted_tflop"] == pytest.approx(factor * expected, rel=1e-12)


def test_sev2_and_sev3_by_hand():
    events = [{"time_hours": 1.0, "kind": "failure", "node": "n0", "severity": "sev2", "error": "cuda_error"},
              {"time_hours": 2.0, "kind": "failure", "node": "n0", "severity": "sev3", "error": "link_flapping"}]
    r = run(events, ["unicron", "megatron"])
    u = F16 * (T - faultdata.EXCEPTION_PROPAGATION_SECONDS - 600
               - faultdata.STATISTICAL_MONITORING_SECONDS - faultdata.REATTEMPT_SECONDS)
    assert r["unicron"]["weighted_tflop"] == pytest.approx(u, rel=1e-12)
    assert r["unicron"]["plans"] == 1  # only the time-0 plan: no capacity change
    # megatron: two timeouts and two restarts; lost work is 0 at exact checkpoint multiples
    restart_2 = faultdata.RESTART_SECONDS + ((2 * H - (H + 1800 + faultdata.RESTART_SECONDS))
                                             % faultdata.CHECKPOINT_INTERVAL_SECONDS)
    m = F16 * (T - 2 * 1800 - faultdata.RESTART_SECONDS - restart_2)
    assert r["megatron"]["weighted_tflop"] == pytest.approx(m, rel=1e-12)


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_downtime_hours_account_for_every_lost_tflop(policy):
    sc = load_scenario(stressed_128())
    r = simulate(sc, [policy], seed=3)["policies"][policy]
    lost_hours = sc.duration_hours - r["weighted_tflop"] / (r["healthy_waf_tflops"] * H)
    assert sum(r["downtime_hours"].values()) == pytest.approx(lost_hours, rel=1e-9, abs=1e-9)
    assert r["downtime_hours"]["detection"] >= 0 and r["downtime_hours"]["transition"] >= 0


def test_same_seed_same_json_and_different_seeds_differ():
    sc = load_scenario(stressed_128())
    names = ["unicron", "megatron", "oobleck"]
    a = dumps(simulate(sc, names, seed=11))
    b = dumps(simulate(load_scenario(stressed_128()), names, seed=11))
    c = dumps(simulate(sc, names, seed=12))
    assert a == b
    assert a != c


def test_parallel_seeds_equal_single_runs():
    sc = load_scenario(stressed_128(hours=120.0))
    runs = run_seeds(sc, ["unicron", "oobleck"], seed=5, seeds=3, workers=2)
    for i, r in enumerate(runs):
        assert dumps(r) == dumps(simulate(sc, ["unicron", "oobleck"], seed=5 + i))
    s = summarize(runs, ["unicron", "oobleck"])
    wt = [r["policies"]["oobleck"]["weighted_tflop"] for r in runs]
    assert s["policies"]["oobleck"]["weighted_tflop"] == pytest.approx(np.mean(wt))
    lo, hi = s["policies"]["oobleck"]["ci95"]["weighted_tflop"]
    assert lo <= np.mean(wt) <= hi
    assert s["policies"]["oobleck"]["unicron_ratio"]["wins"] <= 3


def test_events_follow_the_failure_model():
    sc = stressed_128(mtbf=100.0, hours=1000.0)
    sc["cluster"]["nodes"] = [dict(sc["cluster"]["nodes"][0], id=f"m{k}") for k in range(400)]
    sc["jobs"] = sc["jobs"][:1]
    sc["jobs"][0]["current"] = {"gpus": 0, "nodes": []}
    sc["failures"]["severity_mix"] = {"sev1": 0.0, "sev2": 1.0, "sev3": 0.0}
    for shape in (None, 0.7):
        if shape:
            sc["failures"]["weibull_shape"] = shape
        events = draw_events(load_scenario(sc), np.random.default_rng(0))
        # a renewal process: E[N(T)] ~ T / mean + (CV^2 - 1) / 2 failures per node
        k = shape or 1.0
        cv2 = math.gamma(1 + 2 / k) / math.gamma(1 + 1 / k) ** 2 - 1
        assert len(events) == pytest.approx(400 * (1000 / 100 + (cv2 - 1) / 2), rel=0.05)
        assert all(e.kind == "failure" and e.severity == "sev2" for e in events)
    sc["failures"]["severity_mix"] = {"sev1": 1.0, "sev2": 0.0, "sev3": 0.0}
    sc["failures"].pop("weibull_shape")
    events = draw_events(load_scenario(sc), np.random.default_rng(1))
    repairs = [e for e in events if e.kind == "repair"]
    assert repairs and all(e.node for e in repairs)
    last = {}
    for e in events:  # failure and repair alternate per node
        assert last.get(e.node) != e.kind
        last[e.node] = e.kind


class CheckedUnicron(UnicronPolicy):
    """Unicron whose every plan is also solved through api.solve and validated."""

    checked = 0

    def plan(self, eng, failed, repaired):
        from unicron_plan.plan.placement import place  # noqa: F401

        placement, hit, types = super().plan(eng, failed, repaired)
        # The engine's Instance is a copy of the validated scenario with only the changes patched in:
        # it must survive a full re-validation, and the planner must give the same plan on that (on a
        # mixed fleet the same GPU type for every job it gives GPUs).
        inst = Instance.model_validate(self.instance(eng, failed, repaired).model_dump(exclude_none=True))
        plan = api.solve(inst)
        assert api.validate_plan(inst, plan).valid
        assert {j.id: j.gpus for j in plan.jobs} == {k: sum(v.values()) for k, v in placement.items()}
        if types:
            assert {j.id: j.gpu_type for j in plan.jobs if j.gpus} == {k: types[k] for k, v in placement.items() if v}
        CheckedUnicron.checked += 1
        return placement, hit, types


def test_simulator_instances_are_valid_and_match_the_planner(monkeypatch):
    from unicron_plan.simulate import policies

    monkeypatch.setitem(policies.POLICIES, "unicron", CheckedUnicron)
    CheckedUnicron.checked = 0
    simulate(load_scenario(stressed_128(hours=120.0)), ["unicron"], seed=2)
    assert CheckedUnicron.checked >= 3


def test_unicron_is_not_beaten_on_average_on_a_stressed_cluster():
    sc = load_scenario(stressed_128(hours=240.0))
    names = ["unicron", "megatron", "oobleck", "greedy", "equal-share"]
    runs = [simulate(sc, names, seed=s) for s in range(4)]
    means = {n: np.mean([r["policies"][n]["weighted_tflop"] for r in runs]) for n in names}
    for n in names[1:]:
        assert means["unicron"] >= means[n] * (1 - 1e-9), (n, means)


def test_nodes_with_gpus_failed_before_time_0_keep_them_failed_after_a_repair(monkeypatch):
    from unicron_plan.simulate import policies

    sc = one_job_trace(SEV1_AT_1_25H)
    sc["cluster"]["nodes"][1]["failed_gpus"] = [7]
    sc["jobs"][0]["current"] = {"gpus": 8, "nodes": ["n0"]}
    monkeypatch.setitem(policies.POLICIES, "unicron", CheckedUnicron)
    CheckedUnicron.checked = 0
    out = simulate(load_scenario(sc), ["unicron", "megatron", "oobleck", "greedy", "equal-share"], seed=0)
    assert CheckedUnicron.checked == 3
    # 15 healthy GPUs at most: the job never reaches 16, so every policy earns F8 at best
    for r in out["policies"].values():
        assert r["weighted_tflop"] <= F8 * T * (1 + 1e-12)
