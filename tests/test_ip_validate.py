"""The validator checks every node-level and churn constraint on its own: the unconstrained optimum of each
constraint instance must be rejected with a message naming the constraint it breaks."""

from __future__ import annotations

from pathlib import Path

import pytest

from test_ip_contract import _strip
from unicron_plan import api

HERE = Path(__file__).resolve().parent.parent / "instances"
CASES = [
    ("ip-tp-packing", "multiple of tp"),
    ("ip-pinned", "pinned"),
    ("ip-max-nodes", "max_nodes"),
    ("ip-same-rack", "same_rack"),
    ("ip-max-changed-jobs", "max_changed_jobs"),
    ("ip-hysteresis", "hysteresis"),
]


@pytest.mark.parametrize("name, message", CASES, ids=[c[0] for c in CASES])
def test_unconstrained_plan_is_rejected(name, message):
    inst = api.load_instance(HERE / f"{name}.json")
    free_plan = api.solve(_strip(inst), solver="dp")
    assert api.validate_plan(_strip(inst), free_plan).valid
    report = api.validate_plan(inst, free_plan)
    assert not report.valid
    assert any(message in p for p in report.problems), report.problems


@pytest.mark.parametrize("name", [c[0] for c in CASES])
def test_constrained_plan_is_accepted(name):
    inst = api.load_instance(HERE / f"{name}.json")
    plan = api.solve(inst, solver="auto")
    report = api.validate_plan(inst, plan)
    assert report.valid, report.problems


@pytest.mark.parametrize("solver", ["milp", "milp-cbc", "cpsat"])
def test_node_level_placement_keeps_gpus_where_they_were(solver):
    # a held n0+n1 (rack r0); n0 fails; 8 GPUs fit on n1 (kept) or n2 (moved): phase 2 keeps n1.
    inst = api.load_instance(HERE / "ip-same-rack.json")
    plan = api.solve(inst, solver=solver)
    job = plan.jobs[0]
    assert [(p.node, p.gpus) for p in job.placement] == [("n1", 8)]
    assert plan.solver.options["gpus_moved"] == 0
