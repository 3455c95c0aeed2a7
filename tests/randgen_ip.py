"""Random small instances with the constraints of issue 3 (tp, pinned, max_nodes, same_rack,
min_gain_fraction, max_changed_jobs), on top of tests/randgen.py. Explicit numpy Generator."""

from __future__ import annotations

import copy

import numpy as np

from randgen import random_instance
from unicron_plan.errors import InvalidInstanceError
from unicron_plan.io import parse_model
from unicron_plan.schema import Instance
from unicron_plan.schema.checks import check_instance

NODE_LEVEL = ("tp", "max_nodes", "same_rack")
COUNT_LEVEL = ("pinned", "min_gain_fraction")


def _valid(inst: dict) -> InvalidInstanceError | None:
    try:
        check_instance(parse_model(Instance, inst))
    except InvalidInstanceError as exc:
        return exc
    return None


def add_constraints(rng: np.random.Generator, inst: dict, *, node_level: bool = True,
                    churn: bool = True, p: float = 0.5) -> dict:
    """A copy of ``inst`` with random constraint fields; ones the current allocation violates are dropped."""
    out = copy.deepcopy(inst)
    fields = COUNT_LEVEL + (NODE_LEVEL if node_level else ())
    for job in out["jobs"]:
        for name in fields:
            if rng.random() >= p:
                continue
            if name == "tp":
                job["tp"] = int(rng.choice([1, 2, 4]))
            elif name == "max_nodes":
                job["max_nodes"] = int(rng.integers(1, 3))
            elif name == "same_rack":
                job["same_rack"] = True
            elif name == "pinned":
                if rng.random() < 0.4:
                    job["pinned"] = True
            elif name == "min_gain_fraction":
                job["min_gain_fraction"] = float(rng.choice([0.0, 0.05, 0.5, 2.0]))
    if churn and rng.random() < p:
        out["max_changed_jobs"] = int(rng.integers(0, len(out["jobs"]) + 1))
    # Drop what the current allocation violates (the schema rejects those, by design).
    for _ in range(4 * len(out["jobs"]) * len(fields) + 1):
        err = _valid(out)
        if err is None:
            return out
        k = int(err.field.split("[")[1].split("]")[0]) if err.field.startswith("jobs[") else None
        if k is None:
            raise err
        job = out["jobs"][k]
        present = [f for f in NODE_LEVEL if f in job]
        if present:
            del job[present[0]]
            continue
        # A job sharing nodes with a tp job can fail the greedy tp split: drop tp elsewhere.
        others = [j for j in out["jobs"] if "tp" in j]
        if not others:
            raise err
        del others[0]["tp"]
    raise AssertionError("could not make a valid constrained instance")


def random_ip_instance(rng: np.random.Generator, *, max_nodes: int = 3, max_jobs: int = 3,
                       gpu_types: int = 1, node_level: bool = True, churn: bool = True) -> dict:
    """A random valid instance with random constraints (small enough for the node-level brute force)."""
    base = random_instance(rng, max_nodes=max_nodes, max_jobs=max_jobs, gpu_types=gpu_types)
    return add_constraints(rng, base, node_level=node_level, churn=churn)
