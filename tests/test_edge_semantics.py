"""Semantics at the edges of the format: leaving wins over pinned and hysteresis, an event may not
fail what already failed, tp jobs sharing nodes, and throughput keys of any size."""

from __future__ import annotations

import copy
import json
import math
import os
import subprocess
import sys

import pytest

from conftest import ROOT
from unicron_plan import api
from unicron_plan.errors import InvalidInstanceError

GPU = {"peak_tflops": 312.0, "memory_gib": 80.0, "intra_node_gbps": 1600.0, "inter_node_gbps": 200.0}


def _job_exit() -> dict:
    return json.loads((ROOT / "instances" / "tiny-job-exit.json").read_text())


@pytest.mark.parametrize("extra", [{"pinned": True}, {"min_gain_fraction": 0.5},
                                   {"pinned": True, "min_gain_fraction": 2.0}])
@pytest.mark.parametrize("solver", ["dp", "milp", "cpsat", None])
def test_leaving_wins_over_pinned_and_hysteresis(extra, solver):
    inst = _job_exit()
    leaving = inst["event"]["jobs"][0]
    job = next(j for j in inst["jobs"] if j["id"] == leaving)
    job.update(extra)
    plan = api.solve(inst, solver=solver)
    pj = next(j for j in plan.jobs if j.id == leaving)
    assert pj.gpus == 0 and pj.transition_penalty == 0.0
    assert api.validate_plan(inst, plan).valid
    plain = api.solve(_job_exit(), solver=solver)
    assert plan.objective == pytest.approx(plain.objective, rel=1e-12)


def test_validator_accepts_the_leaving_pinned_job_at_zero():
    inst = _job_exit()
    leaving = inst["event"]["jobs"][0]
    plan = api.solve(inst).model_dump(mode="json")
    for j in inst["jobs"]:
        if j["id"] == leaving:
            j["pinned"] = True
    assert api.validate_plan(inst, plan).valid


def _two_nodes(failed_before: list[int], event: dict) -> dict:
    return {"schema_version": "1", "name": "refail",
            "cluster": {"gpu_types": {"a800": GPU},
                        "nodes": [{"id": "n0", "gpu_type": "a800", "gpus": 2, "failed_gpus": failed_before},
                                  {"id": "n1", "gpu_type": "a800", "gpus": 2, "failed_gpus": []}]},
            "jobs": [{"id": "a", "weight": 1.0, "throughput": {"gpu_type": "a800", "tflops": {"1": 10.0, "2": 18.0}},
                      "current": {"gpus": 1, "nodes": ["n0"]}}],
            "event": event, "cost": {"expected_run_seconds": 3600.0, "default_transition_seconds": 60.0}}


def test_event_failing_an_already_failed_gpu_is_bad_input():
    inst = _two_nodes([0], {"kind": "failure", "failed_nodes": [], "failed_gpus": [{"node": "n0", "gpu": 0}]})
    with pytest.raises(InvalidInstanceError) as exc:
        api.solve(inst)
    assert exc.value.field == "event.failed_gpus[0].gpu"
    assert "already in its failed_gpus" in exc.value.message


def test_event_failing_a_node_with_no_healthy_gpu_is_bad_input():
    inst = _two_nodes([0, 1], {"kind": "failure", "failed_nodes": ["n0"], "failed_gpus": []})
    inst["jobs"][0]["current"] = {"gpus": 1, "nodes": ["n1"]}
    with pytest.raises(InvalidInstanceError) as exc:
        api.solve(inst)
    assert exc.value.field == "event.failed_nodes[0]"


def test_cli_names_the_field_of_a_refailed_gpu(tmp_path):
    path = tmp_path / "i.json"
    path.write_text(json.dumps(_two_nodes([1], {"kind": "failure", "failed_nodes": [],
                                                "failed_gpus": [{"node": "n0", "gpu": 1}]})))
    r = subprocess.run([sys.executable, "-m", "unicron_plan.cli", "solve", str(path)], capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.startswith("error: event.failed_gpus[0].gpu:"), r.stderr


def test_tp_jobs_sharing_nodes_are_split_exactly():
    # n0 has 8 GPUs, n1 4. a (tp 2) holds 8 on n0; b (tp 4) holds 4 on n0 + n1. The only split
    # puts b on n1; taking the larger tp first would put b on n0 and refuse valid input.
    inst = {"schema_version": "1", "name": "tp-shared",
            "cluster": {"gpu_types": {"a800": GPU},
                        "nodes": [{"id": "n0", "gpu_type": "a800", "gpus": 8, "failed_gpus": []},
                                  {"id": "n1", "gpu_type": "a800", "gpus": 4, "failed_gpus": []}]},
            "jobs": [{"id": "a", "weight": 1.0, "tp": 2, "current": {"gpus": 8, "nodes": ["n0"]},
                      "throughput": {"gpu_type": "a800", "tflops": {"8": 100.0}}},
                     {"id": "b", "weight": 1.0, "tp": 4, "current": {"gpus": 4, "nodes": ["n0", "n1"]},
                      "throughput": {"gpu_type": "a800", "tflops": {"4": 50.0}}}],
            "cost": {"expected_run_seconds": 3600.0, "default_transition_seconds": 60.0}}
    plan = api.solve(inst)
    by_id = {j.id: j for j in plan.jobs}
    assert by_id["a"].action == "keep" and by_id["b"].action == "keep"
    assert {p.node: p.gpus for p in by_id["b"].placement} == {"n1": 4}
    bad = copy.deepcopy(inst)
    bad["cluster"]["nodes"][1]["gpus"] = 2  # now no split in whole tp groups exists
    with pytest.raises(InvalidInstanceError) as exc:
        api.solve(bad)
    assert exc.value.field.startswith("jobs[")


@pytest.mark.parametrize("key", ["100000000", "99999999999999999999", "1" + "0" * 5000])
def test_throughput_keys_have_no_upper_limit(tiny_instance, key):
    tiny_instance["jobs"][0]["throughput"]["tflops"][key] = 1e9
    plan = api.solve(tiny_instance)
    assert plan.jobs[0].gpus == 8  # the huge count never fits and is never chosen
    assert api.validate_plan(tiny_instance, plan).valid
    for solver in ("milp", "cpsat", "brute"):
        assert api.solve(tiny_instance, solver=solver).objective == pytest.approx(plan.objective)


def test_huge_churn_limit_and_constraint_values_do_not_overflow(tiny_instance):
    tiny_instance["max_changed_jobs"] = 10 ** 30
    tiny_instance["jobs"][0]["max_nodes"] = 10 ** 30
    for solver in ("milp", "milp-cbc", "cpsat", "auto"):
        assert api.solve(tiny_instance, solver=solver).jobs[0].gpus == 8


def test_huge_objective_coefficients_are_solved_not_errors():
    # Found by the fuzz test: D_run = 2**63 s made HiGHS give up ("Unknown"), an exit 3.
    inst = json.loads((ROOT / "instances" / "ip-max-changed-jobs.json").read_text())
    inst["cost"]["expected_run_seconds"] = 2 ** 63
    plans = {s: api.solve(inst, solver=s) for s in ("milp", "milp-cbc", "cpsat", "auto")}
    for s, plan in plans.items():
        assert plan.status.solution == "optimal", s
        assert plan.objective == pytest.approx(plans["cpsat"].objective, rel=1e-9)


def test_terms_whose_sum_overflows_are_refused_naming_jobs():
    # Each job's terms are finite, their sum over the jobs is not: a plan's objective could be inf.
    inst = json.loads((ROOT / "instances" / "jagged-128-4jobs.json").read_text())
    inst["cost"] = {"default_transition_seconds": 600.0, "expected_run_seconds": 3600.0}
    top = max(max(j["throughput"]["tflops"].values()) if "tflops" in j["throughput"] else 1.0 for j in inst["jobs"])
    for job in inst["jobs"]:
        job["weight"] = 0.6 * 1.7976931348623157e308 / 3600.0 / top
    with pytest.raises(InvalidInstanceError) as err:
        api.solve(inst)
    assert err.value.field == "jobs" and "overflow a float" in str(err.value)
    inst["jobs"] = inst["jobs"][:1]  # one job alone: its terms are a plan's objective, finite
    assert math.isfinite(api.solve(inst).objective)


@pytest.mark.parametrize("cost", [{"expected_run_seconds": 1e-305}, {"node_mtbf_hours": 5e-324}])
def test_a_horizon_so_short_that_rates_overflow_is_refused_naming_it(cost, tmp_path):
    inst = json.loads((ROOT / "instances" / "jagged-128-4jobs.json").read_text())
    inst["cost"] = {"default_transition_seconds": 600.0, **cost}
    with pytest.raises(InvalidInstanceError) as err:
        api.solve(inst)
    assert err.value.field == f"cost.{next(iter(cost))}"
    # the command line: exit 2 naming it, and no JSON with an Infinity in it
    path = tmp_path / "short.json"
    path.write_text(json.dumps(inst))
    res = subprocess.run([sys.executable, "-m", "unicron_plan.cli", "solve", str(path)], capture_output=True,
                         text=True, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert res.returncode == 2 and f"cost.{next(iter(cost))}" in res.stderr and not res.stdout
