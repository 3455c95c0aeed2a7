"""`unicron-plan explain`: the event, each changed job with its reason and numbers, the cheapest
alternatives, in text with units and in JSON; a plan that does not validate is exit 1."""

from __future__ import annotations

import copy
import json

import pytest
from typer.testing import CliRunner

from conftest import ROOT
from test_stay_rule import EXAMPLE
from unicron_plan import api
from unicron_plan.cli import app
from unicron_plan.tools.explain import explain

TINY = ROOT / "instances" / "tiny-one-job-two-nodes.json"


def _files(tmp_path, instance: dict):
    ipath, ppath = tmp_path / "instance.json", tmp_path / "plan.json"
    ipath.write_text(json.dumps(instance))
    ppath.write_text(api.solve(instance).model_dump_json(exclude_none=True))
    return ipath, ppath


def test_explain_text_names_event_reason_numbers_and_units(tmp_path):
    res = CliRunner().invoke(app, ["explain", str(TINY), str(_files(tmp_path, json.loads(TINY.read_text()))[1])])
    assert res.exit_code == 0, res.output
    out = res.stdout
    assert "1 node failed (n1); 1 node drained, 8 GPUs out of service." in out
    # objective as a rate with its horizon: 38,697,000 TFLOP / 36,000 s = 1,075 weighted TFLOP/s over 10 h
    assert "1,075 weighted TFLOP/s over a 10 h horizon (objective 38,697,000 TFLOP)" in out
    assert "changes: 1 hit, 0 chosen, 0 unchanged; transitions lose 112 GPU-min in all." in out
    assert "hit by the event (forced): 1 job" in out
    assert "gpt3-13b: shrink, shrunk from 16 to 8 GPUs" in out
    assert "keeping it, the others as planned: not feasible (hit by the event)" in out


def test_explain_json_lists_changed_jobs_forced_first_with_alternatives():
    inst = api.load_instance(EXAMPLE)
    ex = explain(inst, api.solve(inst))
    assert ex["changes"] == {"hit": 1, "chosen": 1, "unchanged": 1}
    assert [j["reason"] for j in ex["jobs"]] == ["hit", "chosen"]
    chosen = ex["jobs"][1]
    assert chosen["keep_cost"] is None  # its node goes to the hit job
    # kept in place, with the others re-planned: the other of the two alike jobs moves instead, so
    # keeping it costs nothing (the optimum with it pinned, solved again here, is the same)
    assert chosen["keep_replanned"]["feasible"]
    with_move = api.solve(inst).objective
    pinned = copy.deepcopy(EXAMPLE)
    pinned["jobs"][[j["id"] for j in EXAMPLE["jobs"]].index(chosen["id"])]["pinned"] = True
    assert chosen["keep_replanned"]["objective_loss"] == pytest.approx(with_move - api.solve(pinned).objective)
    assert chosen["keep_replanned"]["objective_loss"] == pytest.approx(0.0, abs=1e-6)
    assert ex["objective"]["rate_tflops"] == pytest.approx(with_move / 36000.0)


def test_explain_refuses_a_plan_that_does_not_validate(tmp_path):
    ipath, ppath = _files(tmp_path, json.loads(TINY.read_text()))
    plan = json.loads(ppath.read_text())
    plan["jobs"][0]["reason"] = "chosen"
    ppath.write_text(json.dumps(plan))
    res = CliRunner().invoke(app, ["explain", str(ipath), str(ppath), "--json"])
    assert res.exit_code == 1
    assert "invalid: job 'gpt3-13b': reason 'chosen', expected 'hit'" in res.stderr


def test_explain_bad_input_is_exit_2(tmp_path):
    bad = tmp_path / "plan.json"
    bad.write_text("{")
    res = CliRunner().invoke(app, ["explain", str(TINY), str(bad)])
    assert res.exit_code == 2 and res.stderr.startswith("error:")


def test_next_best_count_of_a_grown_job_is_keeping_it():
    """A job grown on a repair (4 -> 12 GPUs, its table {4, 12}): its next best count is its old 4, whose
    loss is exactly its keep cost; keeping it with the others re-planned costs the same here."""
    inst = copy.deepcopy(EXAMPLE)
    inst["jobs"][0]["throughput"]["tflops"] = {"4": 500.0, "12": 1600.0}
    inst["cluster"]["nodes"][2]["failed_gpus"] = list(range(8))
    inst["jobs"][1]["current"] = {"gpus": 0, "nodes": []}
    inst["jobs"][1]["throughput"]["tflops"] = {"8": 100.0}
    inst["event"] = {"kind": "repair", "repaired_nodes": ["n2"]}
    inst = api.load_instance(inst)
    ex = explain(inst, api.solve(inst))
    a = next(j for j in ex["jobs"] if j["id"] == "a")
    assert (a["action"], a["reason"], a["next_best"]["gpus"]) == ("grow", "chosen", 4)
    assert a["next_best"]["objective_loss"] == pytest.approx(a["keep_cost"])
    assert a["keep_cost"] == pytest.approx((1600.0 * 36000.0 - 500.0 * 600.0) - 500.0 * 36000.0)
    assert "next best count 4 GPUs" in a["alternatives"]
