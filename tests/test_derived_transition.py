"""D_trans derived from the transition model for jobs that name a model."""

import json

from unicron_plan import load_instance, solve, validate_plan
from unicron_plan.core import cost
from unicron_plan.perf import derive_table, transition_seconds

from conftest import ROOT


def _instance(**cost_fields):
    d = json.loads((ROOT / "instances" / "model-derived-128-a800.json").read_text())
    d.pop("reference")
    for j in d["jobs"]:
        j.pop("transition_seconds", None)
    d["cost"].update(cost_fields)
    return d


def test_default_is_kept_unless_derivation_is_asked_for():
    inst = load_instance(_instance())
    assert all(cost.d_trans_seconds(inst, j) == 600.0 for j in inst.jobs)


def test_derived_when_asked_or_without_default():
    for d in (_instance(derive_transition_seconds=True), _instance()):
        if "derive_transition_seconds" not in d["cost"]:
            d["cost"].pop("default_transition_seconds")
        inst = load_instance(d)
        job = inst.jobs[0]
        tp = job.throughput
        x = job.current.gpus
        layout = derive_table(tp.model, tp.gpu_type, tp.global_batch, tp.seq_len, gpus=[x]).layout(x)
        expected = transition_seconds(tp.model, tp.gpu_type, x, x, layout, layout, hit=True)
        assert cost.d_trans_seconds(inst, job) == expected > 0
        plan = solve(inst)
        assert validate_plan(inst, plan).valid
        hit_or_changed = [j for j in plan.jobs if j.action != "keep" and j.previous_gpus > 0]
        assert hit_or_changed
        for pj in hit_or_changed:
            ij = next(j for j in inst.jobs if j.id == pj.id)
            f_x = ij.weight * derive_table(ij.throughput.model, ij.throughput.gpu_type, ij.throughput.global_batch,
                                           ij.throughput.seq_len, gpus=[ij.current.gpus]).tflops_table()[ij.current.gpus]
            assert abs(pj.transition_penalty - f_x * cost.d_trans_seconds(inst, ij)) <= 1e-6 * pj.transition_penalty


def test_bigger_state_takes_longer():
    small = cost.derived_transition_seconds("gpt3-1.3b", "a800", 512, 2048, "full", 8)
    big = cost.derived_transition_seconds("gpt3-175b", "a800", 1536, 2048, "full", 64)
    assert big > small > 0
    assert cost.derived_transition_seconds("gpt3-175b", "a800", 1536, 2048, "full", 0) == 0.0
