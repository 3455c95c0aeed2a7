"""Per-policy models (models/policies.json): healthy speed, recovery constants, overrides, and the
varuna, bamboo and manual down-scaling behaviours they drive."""

import copy

import numpy as np
import pytest

from simfixtures import F8, F16, one_job_trace, stressed_128
from unicron_plan.errors import InvalidInstanceError
from unicron_plan.faults import faultdata
from unicron_plan.simulate import load_scenario, simulate
from unicron_plan.simulate.engine import Engine
from unicron_plan.simulate.policies import MODEL_OF, POLICIES, make_policy, packaged_models, policy_model
from unicron_plan.simulate.trace import draw_events, planning_mtbf_hours

H = 3600.0
SEV1_N1 = [{"time_hours": 1.25, "kind": "failure", "node": "n1", "severity": "sev1", "error": "ecc_error"},
           {"time_hours": 20.0, "kind": "repair", "node": "n1"}]


def _run(events, policies, duration=30.0, overrides=None):
    sc = one_job_trace(events, duration=duration, figure2=True)
    for name, over in (overrides or {}).items():
        sc["policy_models"][name] = {**sc["policy_models"].get(name, {}), **over}
    return simulate(load_scenario(sc), policies, seed=0)["policies"]


def test_the_packaged_timeout_baselines_use_the_published_detection_and_save_times():
    m = make_policy("megatron")
    assert m.detection_seconds("ecc_error") == 60.0  # an explicit failure (ByteRobust: about 60 s)
    assert m.detection_seconds("task_hang") == faultdata.NCCL_TIMEOUT_SECONDS  # a hang waits for the timeout
    assert m.healthy_factor() == pytest.approx(1800.0 / (1800.0 + 6.8))  # ByteRobust Table 8 blocking save
    for name in ("oobleck", "varuna", "bamboo"):
        assert make_policy(name).detection_seconds("ecc_error") == 60.0
    assert make_policy("unicron").detection_seconds("ecc_error") == faultdata.EXCEPTION_PROPAGATION_SECONDS


def test_every_policy_has_a_model_and_every_value_a_source():
    models = packaged_models().policies
    assert set(models) == set(POLICIES) - set(MODEL_OF) and set(MODEL_OF.values()) <= set(models)
    for name, m in models.items():
        for field, value in m.model_dump(exclude_none=True, exclude={"sources"}).items():
            assert m.sources.get(field), (name, field)


def test_megatron_constants_are_the_documented_figure_2_ones():
    m = policy_model("megatron")
    assert m.restart_seconds == faultdata.RESTART_SECONDS
    assert m.checkpoint_interval_seconds == faultdata.CHECKPOINT_INTERVAL_SECONDS


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_each_policy_runs_at_its_own_healthy_speed(name):
    out = _run([], [name, "megatron"], duration=5.0)
    factor = policy_model(name).healthy_throughput_factor
    assert out[name]["weighted_tflop"] == pytest.approx(factor * out["megatron"]["weighted_tflop"], rel=1e-12)
    assert out[name]["weighted_tflop"] == pytest.approx(factor * F16 * 5.0 * H, rel=1e-12)


def test_a_policy_output_scales_exactly_with_its_healthy_factor():
    base = load_scenario(stressed_128(hours=120.0))
    slow = copy.deepcopy(stressed_128(hours=120.0))
    slow["policy_models"] = {"varuna": {"healthy_throughput_factor": 0.4}}
    a = simulate(base, ["varuna"], seed=4)["policies"]["varuna"]
    b = simulate(load_scenario(slow), ["varuna"], seed=4)["policies"]["varuna"]
    assert a["failures"] > 3
    assert b["weighted_tflop"] == pytest.approx(a["weighted_tflop"] * 0.4 / 0.8, rel=1e-12)


def test_checkpoint_saves_slow_the_healthy_speed():
    out = _run([], ["megatron"], duration=5.0, overrides={"megatron": {"checkpoint_save_seconds": 180.0}})
    assert out["megatron"]["weighted_tflop"] == pytest.approx(F16 * 5.0 * H * 1800.0 / 1980.0, rel=1e-12)


def test_varuna_restarts_from_its_checkpoint_and_loses_the_work_since():
    r = _run(SEV1_N1, ["varuna"])["varuna"]
    # failure at 1.25 h, checkpoints every 0.5 h from time 0: 0.25 h recomputed
    assert r["recompute_hours"] == pytest.approx(0.25, rel=1e-9)
    assert r["reconfigurations"] == 2  # shrink onto n0, grow back on the repair


def _one_pipeline(events, duration=30.0):
    """The one-job scenario with 16 GPUs as the only allowed count: one pipeline over n0 and n1."""
    sc = one_job_trace(events, duration=duration)
    sc["jobs"][0]["throughput"]["tflops"] = {"16": F16}
    return load_scenario(sc)


def _waf_at(series, hours):
    """WAF of a recorded series at ``hours`` (the last sample at or before it)."""
    return [w for h, _, w in series if h <= hours][-1]


def test_bamboo_absorbs_a_first_node_failure_at_the_same_count_and_a_degraded_speed():
    sc = _one_pipeline(SEV1_N1)
    run = simulate(sc, ["bamboo", "oobleck"], seed=0, record=True)
    b, o = run["policies"]["bamboo"], run["policies"]["oobleck"]
    model = policy_model("bamboo")
    healthy = F16 * model.healthy_throughput_factor
    # between detection and the repair it runs on n0 at its 16-GPU rate x the degraded factor
    assert _waf_at(run["series"]["bamboo"], 10.0) == pytest.approx(healthy * model.degraded_throughput_factor)
    # oobleck, allowed only 16 GPUs, has nothing to run on until the repair
    assert _waf_at(run["series"]["oobleck"], 10.0) == 0.0
    assert b["recompute_hours"] == 0.0
    assert b["downtime_hours"]["detection"] > 0
    # no restart after the failure; only the rejoin on the repair costs D_trans (600 s)
    assert b["reconfigurations"] == 1
    assert b["downtime_hours"]["transition"] == pytest.approx(600.0 / H, rel=1e-9)


def test_bamboo_restarts_on_a_second_failure_in_the_same_pipeline():
    events = [{"time_hours": 1.25, "kind": "failure", "node": "n1", "severity": "sev1", "error": "ecc_error"},
              {"time_hours": 3.1, "kind": "failure", "node": "n0", "severity": "sev1", "error": "ecc_error"},
              {"time_hours": 20.0, "kind": "repair", "node": "n1"}]
    run = simulate(_one_pipeline(events), ["bamboo"], seed=0, record=True)
    b = run["policies"]["bamboo"]
    # the second failure hits the absorbing pipeline: it stops (no GPUs left for its only count)
    assert b["reconfigurations"] == 1
    assert _waf_at(run["series"]["bamboo"], 10.0) == 0.0


def test_bamboo_absorbs_one_failure_per_pipeline():
    # 24 GPUs in three pipelines of 8 (n0, n1, n2): each pipeline wholly on a node cannot absorb;
    # 48 GPUs as three pipelines of 16 on six nodes absorb one failure each.
    sc = one_job_trace([{"time_hours": 1.0, "kind": "failure", "node": "n0", "severity": "sev1", "error": "ecc_error"},
                        {"time_hours": 2.0, "kind": "failure", "node": "n2", "severity": "sev1", "error": "ecc_error"},
                        {"time_hours": 3.1, "kind": "failure", "node": "n1", "severity": "sev1", "error": "ecc_error"}],
                       duration=6.0)
    sc["cluster"]["nodes"] = [{"id": f"n{k}", "gpu_type": "a800", "gpus": 8} for k in range(6)]
    sc["jobs"][0]["throughput"]["tflops"] = {"16": F16, "32": 2 * F16, "48": 3 * F16}
    sc["jobs"][0]["current"] = {"gpus": 48, "nodes": [f"n{k}" for k in range(6)]}
    run = simulate(load_scenario(sc), ["bamboo"], seed=0, record=True)
    model = policy_model("bamboo")
    slow = 3 * F16 * model.healthy_throughput_factor * model.degraded_throughput_factor
    # n0 (pipeline 0) and n2 (pipeline 1) are absorbed: 48 GPUs' rate, degraded, no restart
    assert _waf_at(run["series"]["bamboo"], 2.9) == pytest.approx(slow)
    # n1 is pipeline 0's second failure: a restart from the checkpoint on the 24 surviving GPUs (16)
    assert run["policies"]["bamboo"]["reconfigurations"] == 1
    assert run["policies"]["bamboo"]["recompute_hours"] == pytest.approx(0.1, rel=1e-9)


def test_megatron_manual_downscaling_restarts_on_the_surviving_gpus():
    waits = _run(SEV1_N1, ["megatron"])["megatron"]
    scaled = _run(SEV1_N1, ["megatron"], overrides={"megatron": {"manual_downscale_after_hours": 2.0}})["megatron"]
    assert scaled["weighted_tflop"] > waits["weighted_tflop"]
    assert scaled["reconfigurations"] == waits["reconfigurations"] + 1  # down-scale, then back at the repair
    # Down-scaled at detection + 2 h: restart and recompute the 0.25 h since the checkpoint, then 8 GPUs
    # until the repair at 20 h; its restart to 16 GPUs then has nothing to recompute, while the job
    # that waited recomputes those 0.25 h after the repair.
    detect = faultdata.NCCL_TIMEOUT_SECONDS
    lost = 1.25 * H % 1800.0
    down_at = 1.25 * H + detect + 2 * H
    gain = F8 * (20 * H - down_at - faultdata.RESTART_SECONDS - lost) + F16 * lost
    assert scaled["weighted_tflop"] - waits["weighted_tflop"] == pytest.approx(gain, rel=1e-9)


@pytest.mark.parametrize("name", ["varuna", "bamboo", "megatron"])
def test_invariants_hold_with_the_new_behaviours(name):
    _check_invariants_dense(name, {"megatron": {"manual_downscale_after_hours": 1.0}})


def _check_invariants_dense(name: str, policy_models: dict) -> None:
    """Run ``name`` with the engine's invariant checks on, at a dense failure rate, two seeds."""
    sc = load_scenario({**stressed_128(mtbf=100.0, hours=120.0), "policy_models": policy_models})
    for seed in (0, 1):
        eng = Engine(sc, draw_events(sc, np.random.default_rng(seed)), make_policy(name, sc),
                     planning_mtbf_hours(sc), checks=True)
        assert eng.run()["weighted_tflop"] > 0


@pytest.mark.parametrize("models,field", [
    ({"nosuch": {"restart_seconds": 1.0}}, "policy_models.nosuch"),
    ({"oobleck": {"healthy_throughput_factor": 0}}, "healthy_throughput_factor"),
    ({"unicron": {"spare_nodes": 1}}, "policy_models.unicron.spare_nodes"),  # spares: the baselines only
    ({"megatron": {"spare_nodes": 16}}, "policy_models.megatron.spare_nodes"),  # none left to train on
])
def test_overrides_name_their_field(models, field):
    with pytest.raises(InvalidInstanceError) as exc:
        load_scenario({**stressed_128(), "policy_models": models})
    assert field in str(exc.value)


def test_detection_per_error_kind_is_scenario_data():
    default = _run(SEV1_N1, ["megatron"])["megatron"]
    fast = _run(SEV1_N1, ["megatron"], overrides={"megatron": {"detection_seconds": {"ecc_error": 120.0}}})["megatron"]
    assert default["downtime_hours"]["detection"] == pytest.approx(faultdata.NCCL_TIMEOUT_SECONDS / H)
    assert fast["downtime_hours"]["detection"] == pytest.approx(120.0 / H)


def test_unknown_error_kinds_are_named():
    with pytest.raises(InvalidInstanceError) as exc:
        load_scenario({**stressed_128(), "policy_models": {"megatron": {"detection_seconds": {"nosuch": 1.0}}}})
    assert "policy_models.megatron.detection_seconds.nosuch" in str(exc.value)
    bad = stressed_128()
    bad["failures"]["domains"] = [{"kind": "rack", "mtbf_hours": 500.0, "error": "task_hang"}]
    with pytest.raises(InvalidInstanceError) as exc:
        load_scenario(bad)
    assert "failures.domains[0].error" in str(exc.value)


def _with_spare_node(events, duration=30.0):
    """one_job_trace (Figure 2's baseline constants) plus an idle third node n2."""
    sc = one_job_trace(events, duration=duration, figure2=True)
    sc["cluster"]["nodes"].append({"id": "n2", "gpu_type": "a800", "gpus": 8})
    return sc


def test_megatron_with_a_hot_spare_restarts_at_once_instead_of_waiting():
    sc = _with_spare_node(SEV1_N1)
    waits = simulate(load_scenario(sc), ["megatron"], seed=0)["policies"]["megatron"]
    sc["policy_models"]["megatron"]["spare_nodes"] = 1
    spare = simulate(load_scenario(sc), ["megatron"], seed=0)["policies"]["megatron"]
    detect, lost = faultdata.NCCL_TIMEOUT_SECONDS, 1.25 * H % 1800.0
    # on n0 + n2 right after the detection, restart and recomputation; nothing happens at the repair
    expected = F16 * (30 * H - detect - faultdata.RESTART_SECONDS - lost)
    assert spare["weighted_tflop"] == pytest.approx(expected, rel=1e-12)
    assert spare["weighted_tflop"] > waits["weighted_tflop"]
    assert spare["reconfigurations"] == 1


def test_the_repaired_node_is_the_next_spare():
    events = SEV1_N1 + [{"time_hours": 25.0, "kind": "failure", "node": "n0", "severity": "sev1",
                         "error": "ecc_error"}]
    sc = _with_spare_node(events, duration=30.0)
    sc["policy_models"]["megatron"]["spare_nodes"] = 1
    sc["policy_models"]["oobleck"]["spare_nodes"] = 1
    out = simulate(load_scenario(sc), ["megatron", "oobleck"], seed=0)["policies"]
    # n1 is back at 20 h as a spare, so the failure of n0 at 25 h is answered at once too: never below 16 GPUs
    assert out["megatron"]["reconfigurations"] == 2
    assert out["megatron"]["downtime_hours"]["sub_healthy"] == pytest.approx(0.0, abs=1e-12)
    assert out["oobleck"]["downtime_hours"]["sub_healthy"] == pytest.approx(0.0, abs=1e-12)


def test_spares_taken_from_busy_nodes_shrink_the_jobs_at_time_0():
    sc = one_job_trace([], duration=5.0)
    sc["policy_models"] = {"oobleck": {"spare_nodes": 1}}
    r = simulate(load_scenario(sc), ["oobleck"], seed=0)["policies"]["oobleck"]
    factor = policy_model("oobleck").healthy_throughput_factor
    assert r["healthy_waf_tflops"] == pytest.approx(factor * F8)  # 8 of its 16 GPUs kept as a spare


@pytest.mark.parametrize("name", ["megatron", "oobleck", "varuna", "bamboo"])
def test_invariants_hold_with_hot_spares(name):
    _check_invariants_dense(name, {name: {"spare_nodes": 2}})


@pytest.mark.parametrize("name", ["megatron", "varuna"])
def test_a_resubmission_queue_wait_delays_every_checkpoint_restart(name):
    base = _run(SEV1_N1, [name])[name]
    queued = _run(SEV1_N1, [name], overrides={name: {"queue_seconds": 1800.0}})[name]
    restarts = base["reconfigurations"]
    assert restarts >= 1 and queued["reconfigurations"] == restarts
    assert base["queue_hours"] == 0.0
    assert queued["queue_hours"] == pytest.approx(0.5 * restarts, rel=1e-9)  # each restart waits 0.5 h
    # the wait is part of the transition, the job produces nothing while it waits, and the accounting
    # identity still holds
    assert queued["downtime_hours"]["transition"] >= base["downtime_hours"]["transition"] + queued["queue_hours"] - 1e-9
    assert queued["weighted_tflop"] < base["weighted_tflop"]
    assert queued["weighted_tflop"] == pytest.approx(
        queued["healthy_waf_tflops"] * H * (30.0 - sum(queued["downtime_hours"].values())), rel=1e-9)
