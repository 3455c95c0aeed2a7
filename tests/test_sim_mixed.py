"""The simulator on mixed fleets: a job runs on one GPU type at a time; unicron may move it to another
type (paying its transition), type-bound never does; accounting and determinism as on one type."""

import copy

import numpy as np
import pytest

from simfixtures import GPU, library
from unicron_plan.errors import InvalidInstanceError
from unicron_plan.io import dumps
from unicron_plan.simulate import load_scenario, run_seeds, simulate
from unicron_plan.simulate.engine import Engine
from unicron_plan.simulate.mixed import greedy_types, is_mixed
from unicron_plan.simulate.policies import POLICIES, make_policy
from unicron_plan.simulate.run import DEFAULT_POLICIES, default_policies
from unicron_plan.simulate.trace import draw_events, planning_mtbf_hours

H = 3600.0
H100 = {"peak_tflops": 989.0, "memory_gib": 79.6, "intra_node_gbps": 450.0, "inter_node_gbps": 50.0}


def idle_a100(trace: list[dict], duration: float = 48.0) -> dict:
    """Two H100 nodes (h0, h1) and two A100 nodes (a0, a1). Jobs a and b run on one H100 node each and
    may run on A100 at a quarter of the speed; c runs on a0 and may use 8 GPUs only; a1 is idle (no job
    gains from it while a and b have their H100s)."""
    def job(jid, node, h, a, gpu_type="h100"):
        return {"id": jid, "weight": 1.0, "transition_seconds": 60.0,
                "throughput": {"gpu_type": gpu_type, "by_type": {"h100": h, "a100": a}},
                "current": {"gpus": 8, "nodes": [node]}}

    return {"schema_version": "1", "name": "idle-a100",
            "cluster": {"gpu_types": {"h100": H100, "a100": dict(GPU)}, "nodes": [
                {"id": "h0", "gpu_type": "h100", "gpus": 8}, {"id": "h1", "gpu_type": "h100", "gpus": 8},
                {"id": "a0", "gpu_type": "a100", "gpus": 8}, {"id": "a1", "gpu_type": "a100", "gpus": 8}]},
            "jobs": [job("a", "h0", {"8": 4000.0}, {"8": 1000.0}),
                     job("b", "h1", {"8": 4000.0}, {"8": 1000.0}),
                     job("c", "a0", {"8": 3000.0}, {"8": 900.0}, gpu_type="a100")],
            "cost": {"node_mtbf_hours": 1000.0}, "duration_hours": duration, "trace": trace}


H0_FAILS = [{"time_hours": 1.0, "kind": "failure", "node": "h0", "severity": "sev1", "error": "ecc_error"},
            {"time_hours": 13.0, "kind": "repair", "node": "h0"}]


def _engine(doc, name, seed=0):
    sc = load_scenario(doc)
    eng = Engine(sc, draw_events(sc, np.random.default_rng(seed)), make_policy(name, sc),
                 planning_mtbf_hours(sc), checks=True)
    return eng, eng.run()


def test_unicron_moves_a_job_onto_idle_a100_when_its_h100_fails_and_type_bound_does_not():
    u_eng, u = _engine(idle_a100(H0_FAILS), "unicron")
    b_eng, b = _engine(idle_a100(H0_FAILS), "type-bound")
    # unicron: a runs on a1 while h0 is out, and returns to h0 after the repair
    assert u["type_changes"] == 2
    assert b["type_changes"] == 0
    assert [j.gpu_type for j in b_eng.jobs] == ["h100", "h100", "a100"]
    # type-bound suspends a from the detection to the repair 12 h after the failure; unicron runs it on
    # a1 at 1000 TFLOP/s from the end of its 60 s transition there (both pay the same transition back
    # onto h0 after the repair)
    detect = make_policy("unicron").detection_seconds("ecc_error")
    assert u["weighted_tflop"] - b["weighted_tflop"] == pytest.approx(1000.0 * (12 * H - detect - 60.0), rel=1e-9)
    # the whole-run GPU-hours: unicron held a1 for the 12 h the job a ran there
    assert u["gpu_hours"]["a100"] - b["gpu_hours"]["a100"] == pytest.approx(8 * 12.0, abs=8 * 0.1)


def test_a_move_back_that_is_not_worth_its_transition_is_not_made():
    # With a node MTBF of 0.004 h the planner values a's choice over 14.4 s: moving back onto the
    # repaired h0 would gain 3000 TFLOP/s x 14.4 s, less than its 60 s transition at 1000 TFLOP/s.
    doc = idle_a100(H0_FAILS)
    doc["cost"]["node_mtbf_hours"] = 0.004
    eng, u = _engine(doc, "unicron")
    assert u["type_changes"] == 1
    assert [j.gpu_type for j in eng.jobs] == ["a100", "h100", "a100"]


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in ("rollout", "rollout-to-end") else n
                                  for n in sorted(POLICIES)])  # the rollouts fork the run: slow runs only
def test_every_policy_keeps_the_invariants_and_the_accounting_on_a_mixed_fleet(name):
    doc = copy.deepcopy(idle_a100([], duration=240.0))
    del doc["trace"]
    doc["failures"] = {"failure_every_hours": 2.0, "repair_hours": {"median": 6.0, "sigma": 1.0},
                       "severity_mix": {"sev1": 0.5, "sev2": 0.25, "sev3": 0.25}}
    for seed in range(3):
        eng, r = _engine(doc, name, seed)
        lost = eng.scenario.duration_hours - r["weighted_tflop"] / (r["healthy_waf_tflops"] * H)
        assert sum(r["downtime_hours"].values()) == pytest.approx(lost, rel=1e-9, abs=1e-9)
        # GPU-hours held: at most the cluster's 16 GPUs of each type over the run
        assert set(r["gpu_hours"]) == {"a100", "h100"}
        assert all(0 <= v <= 16 * 240.0 + 1e-6 for v in r["gpu_hours"].values())
        if name not in ("unicron", "greedy", "clairvoyant", "lookahead", "rollout", "rollout-to-end"):  # choose types
            assert r["type_changes"] == 0
            assert [j.gpu_type for j in eng.jobs] == ["h100", "h100", "a100"]


def test_type_bound_never_changes_type_on_the_shipped_mixed_scenario():
    doc = copy.deepcopy(library("gpt3-mix-1024-h100-a100"))
    doc["duration_hours"] = 120.0
    doc["failures"]["domains"][0]["mtbf_hours"] = 100.0  # switch failures: 256 GPUs of one type at once
    sc = load_scenario(doc)
    start = [j.throughput.gpu_type for j in sc.jobs]
    for seed in range(2):
        events = draw_events(sc, np.random.default_rng(seed))
        eng = Engine(sc, events, make_policy("type-bound", sc), planning_mtbf_hours(sc), checks=True)
        r = eng.run()
        assert r["type_changes"] == 0 and r["plans"] > 10
        assert [j.gpu_type for j in eng.jobs] == start


def test_same_seed_same_json_and_parallel_seeds_equal_single_runs():
    doc = copy.deepcopy(idle_a100([], duration=120.0))
    del doc["trace"]
    doc["failures"] = {"failure_every_hours": 3.0, "repair_hours": {"median": 6.0, "sigma": 1.0},
                       "severity_mix": {"sev1": 0.5, "sev2": 0.25, "sev3": 0.25}}
    sc = load_scenario(doc)
    names = default_policies(sc)
    a = dumps(simulate(sc, names, seed=4))
    assert a == dumps(simulate(load_scenario(copy.deepcopy(doc)), names, seed=4))
    assert a != dumps(simulate(sc, names, seed=5))
    runs = run_seeds(sc, ["unicron", "type-bound"], seed=4, seeds=2, workers=2)
    for i, r in enumerate(runs):
        assert dumps(r) == dumps(simulate(sc, ["unicron", "type-bound"], seed=4 + i))


def test_type_bound_is_a_default_policy_only_on_a_mixed_fleet():
    mixed = load_scenario(idle_a100(H0_FAILS))
    single = load_scenario(library("gpt3-mix-128-a800"))
    assert is_mixed(mixed) and not is_mixed(single)
    assert default_policies(single) == list(DEFAULT_POLICIES)
    assert default_policies(mixed)[:2] == ["unicron", "type-bound"]
    out = simulate(single, ["unicron"], seed=0)["policies"]["unicron"]
    assert "type_changes" not in out and "gpu_hours" not in out  # single-type results keep their fields


def test_greedy_steps_over_job_and_type_pairs():
    from unicron_plan.core.problem import build_problem
    from unicron_plan.schema import Instance

    doc = idle_a100([])
    inst = Instance.model_validate({"schema_version": "1", "name": "g", "cluster": doc["cluster"],
                                    "jobs": doc["jobs"], "cost": {"node_mtbf_hours": 1000.0},
                                    "event": {"kind": "failure", "failed_nodes": ["h0"]}})
    problem = build_problem(inst)
    counts, types = greedy_types(problem)
    # one H100 node left: a and b both want it (4000 per 8 GPUs) and a, listed first, takes it; b's
    # and c's steps on H100 no longer fit, so both step onto A100 (1000 and 900 per 8 GPUs)
    assert counts == {"a": 8, "b": 8, "c": 8}
    assert types == {"a": "h100", "b": "a100", "c": "a100"}
    used = {}
    for jid, y in counts.items():
        used[types[jid]] = used.get(types[jid], 0) + y
    assert all(used[t] <= problem.capacity[t] for t in used)


def test_a_job_on_nodes_of_another_type_than_its_own_is_refused():
    doc = idle_a100(H0_FAILS)
    doc["jobs"][2]["current"]["nodes"] = ["a1"]
    doc["jobs"][2]["throughput"]["gpu_type"] = "h100"
    with pytest.raises(InvalidInstanceError) as err:
        load_scenario(doc)
    assert "jobs[2]" in err.value.field


def test_a_type_the_cluster_does_not_have_is_refused():
    doc = idle_a100(H0_FAILS)
    doc["jobs"][0]["throughput"]["by_type"]["b200"] = {"8": 9000.0}
    with pytest.raises(InvalidInstanceError) as err:
        load_scenario(doc)
    assert "jobs[0]" in err.value.field


def test_a_job_naming_a_model_gets_its_derived_table_per_type():
    from unicron_plan.perf import derive_table

    doc = idle_a100(H0_FAILS)
    doc["jobs"][0]["throughput"] = {"gpu_type": "h100", "model": "gpt3-1.3b", "gpu_types": ["h100", "a100"],
                                    "global_batch": 512, "seq_len": 2048}
    sc = load_scenario(doc)
    tp = sc.jobs[0].throughput
    assert tp.gpu_type == "h100" and set(tp.by_type) == {"h100", "a100"}
    for t in ("h100", "a100"):  # each type up to the cluster's 16 GPUs of it
        want = derive_table("gpt3-1.3b", t, 512, 2048, max_gpus=16).tflops_table()
        assert tp.type_table(t) == pytest.approx(want, rel=1e-12)
    r = simulate(sc, ["unicron", "type-bound"], seed=0)["policies"]
    assert r["unicron"]["type_changes"] >= 1 and r["type-bound"]["type_changes"] == 0


def test_a_model_on_a_type_the_cluster_lacks_is_refused_naming_the_field():
    doc = idle_a100(H0_FAILS)
    doc["jobs"][0]["throughput"] = {"gpu_type": "h100", "model": "gpt3-1.3b", "gpu_types": ["h100", "h200"],
                                    "global_batch": 512, "seq_len": 2048}
    with pytest.raises(InvalidInstanceError) as err:
        load_scenario(doc)
    assert err.value.field == "jobs[0].throughput.gpu_types" and "h200" in err.value.message


def test_the_type_check_can_fail():
    eng, _ = _engine(idle_a100([], duration=1.0), "unicron")
    eng.jobs[0].alloc = {"a1": 8}  # a runs on h100
    with pytest.raises(AssertionError, match="job 'a' on h100 holds GPUs of node"):
        eng.check_invariants()


def test_means_over_seeds_report_type_changes_and_gpu_hours():
    from unicron_plan.simulate.run import summarize

    sc = load_scenario(idle_a100(H0_FAILS))
    runs = [simulate(sc, ["unicron", "type-bound"], seed=s) for s in (0, 1)]
    out = summarize(runs, ["unicron", "type-bound"])["policies"]
    assert out["unicron"]["type_changes"] == 2.0 and out["type-bound"]["type_changes"] == 0.0
    assert out["unicron"]["gpu_hours"] == {t: runs[0]["policies"]["unicron"]["gpu_hours"][t] for t in ("a100", "h100")}


def test_the_command_line_runs_type_bound_by_default_on_a_mixed_fleet(tmp_path):
    import json

    from typer.testing import CliRunner

    from unicron_plan.cli import app

    path = tmp_path / "mixed.json"
    path.write_text(json.dumps(idle_a100(H0_FAILS)))
    res = CliRunner().invoke(app, ["simulate", str(path), "--json"])
    assert res.exit_code == 0, res.stderr
    out = json.loads(res.stdout)["policies"]
    assert set(out) == set(default_policies(load_scenario(idle_a100(H0_FAILS)))) and "type-bound" in out
    assert out["unicron"]["type_changes"] == 2 and out["type-bound"]["type_changes"] == 0
    res = CliRunner().invoke(app, ["simulate", str(path), "-p", "unicron", "-p", "type-bound"])
    assert res.exit_code == 0 and "type changes" in res.stdout and "type-bound" in res.stdout


@pytest.mark.long  # (out of the default run for its time: run by `pytest -m long`)
def test_the_simulators_mixed_plans_are_the_planners(monkeypatch):
    from test_sim_engine import CheckedUnicron
    from unicron_plan.simulate import policies

    doc = copy.deepcopy(library("gpt3-mix-1024-h100-a100"))
    doc["duration_hours"] = 150.0
    doc["failures"]["domains"][0]["mtbf_hours"] = 100.0
    monkeypatch.setitem(policies.POLICIES, "unicron", CheckedUnicron)
    CheckedUnicron.checked = 0
    r = simulate(load_scenario(doc), ["unicron"], seed=1)["policies"]["unicron"]
    assert CheckedUnicron.checked >= 5 and r["type_changes"] >= 1
