"""Random small instances with the node-level and churn constraints (tp, pinned, max_nodes, same_rack,
min_gain_fraction, max_changed_jobs), on top of tests/randgen.py. Explicit numpy Generator."""

from __future__ import annotations

import copy

import numpy as np

from randgen import GPU_SPEC, random_instance
from unicron_plan.errors import InvalidInstanceError
from unicron_plan.io import parse_model
from unicron_plan.schema import Instance
from unicron_plan.core.checks import check_instance

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


def large_instance(rng: np.random.Generator, *, racks: int = 16, nodes_per_rack: int = 16,
                   gpus_per_node: int = 8, jobs: int = 24, failed_nodes: int = 3,
                   failed_gpus: int = 6, constraints: bool = True) -> dict:
    """A 2,048-GPU-class instance (defaults: 16 racks x 16 nodes x 8 GPUs) with GPU isolation,
    so partially failed nodes make tp a packing problem. Jobs start on whole nodes, rack by rack."""
    nodes = [{"id": f"r{r}n{k}", "gpu_type": "a800", "gpus": gpus_per_node, "failed_gpus": [],
              "rack": f"r{r}"} for r in range(racks) for k in range(nodes_per_rack)]
    total = len(nodes) * gpus_per_node
    out_jobs, cursor = [], 0
    for k in range(jobs):
        step = gpus_per_node
        keys = sorted({int(step * c) for c in rng.integers(1, max(2, total // (step * jobs) * 3), size=8)})
        base = float(rng.uniform(80, 160))
        expo = float(rng.uniform(0.75, 0.98))
        table = {str(c): float(np.round(base * c ** expo * rng.uniform(0.97, 1.03), 3)) for c in keys}
        job = {"id": f"job{k}", "weight": float(rng.choice([0.5, 1.0, 2.0])),
               "throughput": {"gpu_type": "a800", "tflops": table},
               "transition_seconds": float(rng.choice([300.0, 600.0, 1800.0])),
               "current": {"gpus": 0, "nodes": []}}
        c = keys[len(keys) // 3]
        need = c // gpus_per_node
        if cursor + need <= len(nodes) and rng.random() < 0.9:
            job["current"] = {"gpus": c, "nodes": [n["id"] for n in nodes[cursor:cursor + need]]}
            cursor += need
        if constraints:
            job["tp"] = int(rng.choice([4, 8]))
            if rng.random() < 0.3 and need:
                job["max_nodes"] = need + int(rng.integers(0, 4))
            if rng.random() < 0.2:
                job["min_gain_fraction"] = 0.05
        out_jobs.append(job)
    down = rng.choice(len(nodes), size=failed_nodes + failed_gpus, replace=False).tolist()
    event = {"kind": "failure", "failed_nodes": [nodes[i]["id"] for i in down[:failed_nodes]],
             "failed_gpus": [{"node": nodes[i]["id"], "gpu": int(rng.integers(0, gpus_per_node))}
                             for i in down[failed_nodes:]]}
    inst = {"schema_version": "1", "name": f"large-{total}-gpus", "isolation": "gpu",
            "cluster": {"gpu_types": {"a800": dict(GPU_SPEC)}, "nodes": nodes}, "jobs": out_jobs,
            "event": event, "cost": {"expected_run_seconds": 36000.0, "default_transition_seconds": 600.0}}
    if constraints:
        inst["max_changed_jobs"] = max(len(out_jobs) // 3, failed_nodes + failed_gpus)
    return inst
