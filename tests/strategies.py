"""Hypothesis strategies: tiny v1 instances covering the objective's corner cases."""

from __future__ import annotations

from hypothesis import strategies as st

GPU = {"peak_tflops": 312.0, "memory_gib": 80.0, "intra_node_gbps": 1600.0, "inter_node_gbps": 200.0}


@st.composite
def tiny_instances(draw, max_nodes: int = 3, max_jobs: int = 3) -> dict:
    """Non-monotone curves, zero weights, queued jobs, failures that hit several jobs,
    node or GPU isolation, one or two GPU types, D_run given or from MTBF."""
    types = ["a", "b"][: draw(st.integers(1, 2))]
    n_nodes = draw(st.integers(1, max_nodes))
    nodes = []
    for k in range(n_nodes):
        gpus = draw(st.sampled_from([1, 2, 4, 8]))
        failed = sorted(draw(st.sets(st.integers(0, gpus - 1), max_size=1 if gpus > 1 else 0)))
        nodes.append({"id": f"n{k}", "gpu_type": draw(st.sampled_from(types)), "gpus": gpus,
                      "failed_gpus": failed})
    free = {n["id"]: n["gpus"] - len(n["failed_gpus"]) for n in nodes}
    jobs = []
    for k in range(draw(st.integers(1, max_jobs))):
        gtype = draw(st.sampled_from(types))
        top = max(1, sum(n["gpus"] for n in nodes if n["gpu_type"] == gtype)) + 2
        keys = draw(st.sets(st.integers(1, top), min_size=1, max_size=4))
        # Arbitrary (non-monotone) values, zero included.
        table = {str(c): draw(st.sampled_from([0.0, 1.0, 7.5, 10.0, 33.0, 50.0, 99.0, 120.0])) for c in keys}
        weight = draw(st.sampled_from([0.0, 0.5, 1.0, 2.0]))
        current = {"gpus": 0, "nodes": []}
        mine = [n["id"] for n in nodes if n["gpu_type"] == gtype and free[n["id"]] > 0]
        if mine and draw(st.booleans()):
            chosen = draw(st.lists(st.sampled_from(mine), min_size=1, max_size=len(mine), unique=True))
            room = sum(free[n] for n in chosen)
            fitting = sorted(c for c in keys if c <= room)
            if fitting:
                c = draw(st.sampled_from(fitting))
                left, used = c, []
                for n in chosen:
                    take = min(left, free[n])
                    if take:
                        free[n] -= take
                        left -= take
                        used.append(n)
                current = {"gpus": c, "nodes": used}
        job = {"id": f"j{k}", "weight": weight, "throughput": {"gpu_type": gtype, "tflops": table},
               "current": current}
        if draw(st.booleans()):
            job["transition_seconds"] = draw(st.sampled_from([0.0, 30.0, 600.0, 5000.0]))
        jobs.append(job)
    inst = {"schema_version": "1", "name": "hyp",
            "cluster": {"gpu_types": {t: dict(GPU) for t in types}, "nodes": nodes},
            "jobs": jobs,
            "cost": {"default_transition_seconds": draw(st.sampled_from([0.0, 100.0, 900.0]))}}
    if draw(st.booleans()):
        inst["cost"]["expected_run_seconds"] = draw(st.sampled_from([60.0, 1000.0, 36000.0]))
    else:
        inst["cost"]["node_mtbf_hours"] = draw(st.sampled_from([0.5, 10.0, 2000.0]))
    if draw(st.booleans()):
        ids = [n["id"] for n in nodes]
        failed_nodes = draw(st.lists(st.sampled_from(ids), unique=True, max_size=len(ids)))
        failed_gpus = []
        for n in nodes:
            healthy = [g for g in range(n["gpus"]) if g not in n["failed_gpus"]]
            if healthy and draw(st.integers(0, 3)) == 0:  # only a healthy GPU can fail
                failed_gpus.append({"node": n["id"], "gpu": draw(st.sampled_from(healthy))})
        inst["event"] = {"kind": "failure", "failed_nodes": failed_nodes, "failed_gpus": failed_gpus}
    if draw(st.booleans()):
        inst["isolation"] = draw(st.sampled_from(["node", "gpu"]))
    return inst
