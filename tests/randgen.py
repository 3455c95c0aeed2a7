"""Random small instances for property tests (explicit numpy Generator, as everywhere)."""

from __future__ import annotations

import numpy as np

GPU_SPEC = {"peak_tflops": 312.0, "memory_gib": 80.0, "intra_node_gbps": 1600.0, "inter_node_gbps": 200.0}


def random_instance(rng: np.random.Generator, *, max_nodes: int = 4, max_jobs: int = 3,
                    gpu_types: int = 1, isolation: str | None = None, mtbf: bool = False) -> dict:
    """A random valid v1 instance dict: jagged curves, zero weights, queued jobs, multi-job failures."""
    types = [f"t{k}" for k in range(gpu_types)]
    nodes = []
    for k in range(int(rng.integers(1, max_nodes + 1))):
        gpus = int(rng.choice([1, 2, 4, 8]))
        failed = sorted(rng.choice(gpus, size=int(rng.integers(0, 2)) if gpus > 1 else 0, replace=False).tolist())
        nodes.append({"id": f"n{k}", "gpu_type": types[int(rng.integers(0, gpu_types))], "gpus": gpus,
                      "failed_gpus": failed, "rack": f"r{k % 2}"})
    free = {n["id"]: n["gpus"] - len(n["failed_gpus"]) for n in nodes}
    jobs = []
    for k in range(int(rng.integers(1, max_jobs + 1))):
        gtype = types[int(rng.integers(0, gpu_types))]
        total = sum(n["gpus"] for n in nodes if n["gpu_type"] == gtype) or 1
        keys = sorted({int(c) for c in rng.integers(1, total + 3, size=int(rng.integers(1, 5)))})
        table = {str(c): float(np.round(rng.uniform(0, 100) * (c ** rng.uniform(0.3, 1.1)), 3)) for c in keys}
        weight = float(rng.choice([0.0, 0.5, 1.0, 2.0, 3.0]))
        current = {"gpus": 0, "nodes": []}
        if rng.random() < 0.7:
            for c in sorted(keys, reverse=True):
                mine = [n for n in nodes if n["gpu_type"] == gtype and free[n["id"]] > 0]
                if sum(free[n["id"]] for n in mine) >= c:
                    left, used = c, []
                    for n in rng.permutation(len(mine)).tolist():
                        nid = mine[n]["id"]
                        take = min(left, free[nid])
                        if take:
                            free[nid] -= take
                            left -= take
                            used.append(nid)
                        if left == 0:
                            break
                    current = {"gpus": c, "nodes": used}
                    break
        job = {"id": f"j{k}", "weight": weight, "throughput": {"gpu_type": gtype, "tflops": table},
               "current": current}
        if rng.random() < 0.7:
            job["transition_seconds"] = float(rng.choice([0.0, 60.0, 600.0, 3600.0]))
        jobs.append(job)
    failed_nodes = [n["id"] for n in nodes if rng.random() < 0.25]
    failed_gpus = []
    for n in nodes:
        if n["id"] not in failed_nodes and rng.random() < 0.25:
            gpu = int(rng.integers(0, n["gpus"]))
            if gpu not in n["failed_gpus"]:  # an already failed GPU cannot fail again (exit 2)
                failed_gpus.append({"node": n["id"], "gpu": gpu})
    inst = {
        "schema_version": "1", "name": "random",
        "cluster": {"gpu_types": {t: dict(GPU_SPEC) for t in types}, "nodes": nodes},
        "jobs": jobs,
        "cost": ({"node_mtbf_hours": float(rng.uniform(100, 5000))} if mtbf
                 else {"expected_run_seconds": float(rng.choice([600.0, 3600.0, 36000.0]))})
                | {"default_transition_seconds": 300.0},
    }
    if rng.random() < 0.85:
        inst["event"] = {"kind": "failure", "failed_nodes": failed_nodes, "failed_gpus": failed_gpus}
    if isolation is not None:
        inst["isolation"] = isolation
    elif rng.random() < 0.3:
        inst["isolation"] = "gpu"
    return inst
