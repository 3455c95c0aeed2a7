"""Each stored failure's ``changes`` in a contingency index (counted from the jobs on the failed nodes
and each plan's changed jobs) equals reasons.failure_changes, which looks at every job."""

from __future__ import annotations

import copy

import numpy as np

from randgen import random_instance
from unicron_plan.errors import InfeasibleError, InvalidInstanceError
from unicron_plan.plan.contingency import build_contingency
from unicron_plan.plan.reasons import failure_changes
from unicron_plan.schema import Instance
from unicron_plan.tools.generate import generate_instance


def _same_as_the_reference(inst: dict, racks: bool) -> int:
    base = Instance.model_validate(inst).model_copy(update={"event": None})
    index = build_contingency(base, racks=racks)
    for entry in index["failures"].values():
        stored = index["plans"][entry["plan"]]
        assert entry["changes"] == failure_changes(base, entry["failed_nodes"], stored["counts"], stored.get("types"))
    return len(index["failures"])


def test_random_instances():
    rng = np.random.default_rng(11)
    checked = 0
    for _ in range(40):
        inst = copy.deepcopy(random_instance(rng, max_nodes=6, max_jobs=5, gpu_types=int(rng.integers(1, 3))))
        inst.pop("event", None)
        try:
            checked += _same_as_the_reference(inst, racks=bool(rng.random() < 0.5))
        except (InvalidInstanceError, InfeasibleError):  # (an instance the planner refuses has no index)
            pass
    assert checked > 100


def test_a_generated_cluster_with_running_jobs_on_shuffled_nodes():
    inst = generate_instance(2, gpus=2048, jobs=16, failed_nodes=0, curves="linear-step")
    assert _same_as_the_reference(inst, racks=True) > 256
