"""Every plan says why: each job's reason, sentence and keep cost, the plan's change counts, and the
validator that recomputes them (docs/format.md, "Reasons")."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest

from randgen import random_instance
from test_stay_rule import EXAMPLE
from unicron_plan import api
from unicron_plan.plan.reasons import REASONS


def _plan_dict(instance) -> dict:
    return api.solve(instance).model_dump(mode="json", exclude_none=True)


def test_tiny_failure_is_a_hit_with_its_numbers():
    plan = _plan_dict("instances/tiny-one-job-two-nodes.json")
    job = plan["jobs"][0]
    assert job["reason"] == "hit"
    assert job["keep_cost"] is None  # written as null: keeping a hit job is not feasible
    # lost n1; 2150 -> 1100 weighted TFLOP/s; 420 s of transition on 16 GPUs = 112 GPU-minutes
    assert job["why"] == ("hit: n1 drained (8 of its GPUs there); shrunk from 16 to 8 GPUs: "
                          "-1,050 weighted TFLOP/s, 420 s of transition (112 GPU-min lost).")
    assert plan["changes"] == {"hit": 1, "chosen": 0, "unchanged": 0}


def test_stay_rule_example_names_the_chosen_move():
    plan = _plan_dict(EXAMPLE)
    by_id = {j["id"]: j for j in plan["jobs"]}
    assert by_id["b"]["reason"] == "hit"
    # a or c (the two are alike) moves beside the other to make room for b: chosen, and keeping it
    # is not feasible; the other is unchanged
    moved, kept = sorted((by_id["a"], by_id["c"]), key=lambda j: j["reason"])
    assert moved["action"] == "restart" and moved["reason"] == "chosen"
    assert moved["keep_cost"] is None and "not feasible" in moved["why"]
    assert kept["reason"] == "unchanged" and kept["keep_cost"] == 0.0
    assert plan["changes"] == {"hit": 1, "chosen": 1, "unchanged": 1}


def test_chosen_growth_has_a_keep_cost():
    """A job grown on a repair, not hit: keeping it is feasible and costs G(y) - F(x) D_run."""
    inst = copy.deepcopy(EXAMPLE)
    inst["jobs"][0]["throughput"]["tflops"] = {"4": 500.0, "12": 1600.0}
    inst["cluster"]["nodes"][2]["failed_gpus"] = list(range(8))
    inst["jobs"][1]["current"] = {"gpus": 0, "nodes": []}
    inst["event"] = {"kind": "repair", "repaired_nodes": ["n2"]}
    inst["jobs"][1]["max_nodes"] = 1
    inst["jobs"][1]["throughput"]["tflops"] = {"8": 100.0}
    plan = _plan_dict(inst)
    a = next(j for j in plan["jobs"] if j["id"] == "a")
    assert a["action"] == "grow" and a["reason"] == "chosen"
    expected = (1600.0 * 36000.0 - 500.0 * 600.0) - 500.0 * 36000.0
    assert math.isclose(a["keep_cost"], expected)
    assert "keeping it would lose 39,300,000 TFLOP" in a["why"]


@pytest.mark.parametrize("seed", range(60))
def test_random_plans_carry_reasons_that_validate(seed):
    """On random instances (every event kind, shared nodes, queued jobs): every job has a reason, the
    counts add up, an optimal plan never gains by keeping a job it changed, and the validator agrees."""
    rng = np.random.default_rng(seed)
    inst = api.load_instance(random_instance(rng, max_nodes=5, max_jobs=4, gpu_types=1 + seed % 2))
    plan = api.solve(inst)
    assert api.validate_plan(inst, plan).valid
    reasons = [j.reason for j in plan.jobs]
    assert set(reasons) <= set(REASONS)
    assert plan.changes == {r: reasons.count(r) for r in REASONS}
    for j in plan.jobs:
        assert j.why
        assert (j.reason == "hit") == bool(j.hit)
        if j.reason == "unchanged":
            assert j.transition_penalty == 0.0
        if plan.status.solution == "optimal" and j.keep_cost is not None:
            assert j.keep_cost >= -1e-9 * max(1.0, abs(j.gain))


@pytest.mark.parametrize("field,value,needle", [
    ("reason", "chosen", "reason"),
    ("why", "because", "why"),
    ("keep_cost", 5.0, "keep_cost"),
])
def test_validator_recomputes_each_reason_field(field, value, needle):
    inst = api.load_instance(EXAMPLE)
    plan = _plan_dict(inst)
    c = next(j for j in plan["jobs"] if j["reason"] == "unchanged")
    c[field] = value
    report = api.validate_plan(inst, plan)
    assert not report.valid
    assert any(f"job {c['id']!r}: {needle}" in p for p in report.problems), report.problems


def test_validator_recomputes_the_change_counts():
    inst = api.load_instance(EXAMPLE)
    plan = _plan_dict(inst)
    plan["changes"] = {"hit": 0, "chosen": 0, "unchanged": 3}
    report = api.validate_plan(inst, plan)
    assert any(p.startswith("changes:") for p in report.problems), report.problems


def test_a_plan_without_reasons_still_validates():
    """Other producers may leave the reasons out (docs/format.md): absent fields are not checked."""
    inst = api.load_instance(EXAMPLE)
    plan = _plan_dict(inst)
    plan.pop("changes")
    for j in plan["jobs"]:
        for key in ("reason", "why", "keep_cost"):
            j.pop(key)
    assert api.validate_plan(inst, plan).valid


@pytest.mark.parametrize("seed", range(8))
def test_contingency_changes_match_the_plans_solved_for_each_failure(seed):
    """Each stored failure's ``changes`` equals that of the plan solved when the failure happens
    (random instances without node-level constraints: no job moves within its count)."""
    from unicron_plan.plan.contingency import build_contingency

    rng = np.random.default_rng(1000 + seed)
    raw = random_instance(rng, max_nodes=5, max_jobs=4)
    raw.pop("event", None)
    base = api.load_instance(raw)
    index = build_contingency(base)
    assert index["failures"]
    for entry in index["failures"].values():
        inst = api.load_instance({**raw, "event": {"kind": "failure", "failed_nodes": entry["failed_nodes"]}})
        plan = api.solve(inst)
        assert plan.changes == entry["changes"], (entry, [(j.id, j.action, j.reason) for j in plan.jobs])


def test_simulator_counts_why_each_replan_changed_jobs():
    """The planner policies' results count, over all their re-plans, the jobs hit, chosen and unchanged
    (each job once per re-plan); the baselines, which do not re-plan, have no such count."""
    from conftest import ROOT
    from unicron_plan.simulate.run import load_scenario, simulate

    scenario = load_scenario(ROOT / "scenarios" / "gpt3-mix-128-a800.json")
    out = simulate(scenario, ["unicron", "megatron"], seed=0)["policies"]
    uni = out["unicron"]
    assert set(uni["changes"]) == set(REASONS)
    assert sum(uni["changes"].values()) == uni["plans"] * len(scenario.jobs) > 0
    assert uni["changes"]["hit"] > 0  # failures hit jobs
    assert "changes" not in out["megatron"]
