"""Write the instance library in instances/ and record each optimum.

Hand-checkable instances are written literally (their arithmetic is in
instances/README.md); larger ones are generated from a documented synthetic
curve rule with a fixed seed. The recorded optimum comes from the exhaustive
solver where it is small enough, else from the DP; `reference.method` says
which. Run from the repository root:  python scripts/build_instances.py
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from unicron_plan.io import dumps, write_atomic

A800 = {"peak_tflops": 312.0, "memory_gib": 80.0, "intra_node_gbps": 1600.0, "inter_node_gbps": 200.0}
A100 = {"peak_tflops": 312.0, "memory_gib": 80.0, "intra_node_gbps": 1600.0, "inter_node_gbps": 200.0}
H100 = {"peak_tflops": 989.0, "memory_gib": 80.0, "intra_node_gbps": 3600.0, "inter_node_gbps": 400.0}
OUT = Path("instances")


def nodes(n, gpu_type="a800", prefix="n", per_rack=4, gpus=8, start=0):
    return [{"id": f"{prefix}{k}", "gpu_type": gpu_type, "gpus": gpus, "failed_gpus": [],
             "rack": f"r{k // per_rack}"} for k in range(start, start + n)]


def job(jid, table, gpus, on, weight=1.0, gpu_type="a800", trans=None):
    j = {"id": jid, "weight": weight,
         "throughput": {"gpu_type": gpu_type, "tflops": {str(k): float(v) for k, v in table.items()}},
         "current": {"gpus": gpus, "nodes": on}}
    if trans is not None:
        j["transition_seconds"] = float(trans)
    return j


def instance(name, cluster_nodes, jobs, event=None, cost=None, gpu_types=None, **extra):
    inst = {"schema_version": "1", "name": name,
            "cluster": {"gpu_types": gpu_types or {"a800": A800}, "nodes": cluster_nodes},
            "jobs": jobs, "cost": cost or {"expected_run_seconds": 3600.0, "default_transition_seconds": 600.0}}
    if event is not None:
        inst["event"] = event
    inst.update(extra)
    return inst


def fail(nodes_=(), gpus=()):
    return {"kind": "failure", "failed_nodes": list(nodes_),
            "failed_gpus": [{"node": n, "gpu": g} for n, g in gpus]}


def hand_made():
    yield instance("tiny-one-job-two-nodes", nodes(2, per_rack=2),
                   [job("gpt3-13b", {8: 1100, 16: 2150, 32: 4100}, 16, ["n0", "n1"], trans=420)],
                   fail(["n1"]), {"expected_run_seconds": 36000.0, "default_transition_seconds": 600.0})
    yield instance("tiny-no-event-keep", nodes(2),
                   [job("a", {8: 1000, 16: 1900}, 8, ["n0"]), job("b", {8: 900}, 8, ["n1"])])
    yield instance("tiny-weighted-trade", nodes(3),
                   [job("big", {8: 1000, 16: 1950}, 16, ["n0", "n1"]),
                    job("small", {8: 1200}, 8, ["n2"], weight=0.5)],
                   fail(["n1"]), {"expected_run_seconds": 36000.0, "default_transition_seconds": 600.0})
    yield instance("tiny-gpu-isolation", nodes(1),
                   [job("a", {4: 500, 8: 900}, 8, ["n0"], trans=300)], fail(gpus=[("n0", 3)]),
                   isolation="gpu")
    yield instance("tiny-node-isolation", nodes(1),
                   [job("a", {4: 500, 8: 900}, 8, ["n0"], trans=300)], fail(gpus=[("n0", 3)]))
    yield instance("tiny-queued-resume", nodes(1),
                   [job("a", {4: 500}, 4, ["n0"]), job("b", {4: 450}, 0, [])])
    yield instance("tiny-mtbf-horizon", nodes(4),
                   [job("a", {8: 1000, 16: 1900, 24: 2700, 32: 3500}, 32, ["n0", "n1", "n2", "n3"])],
                   fail(["n3"]), {"node_mtbf_hours": 1000.0, "default_transition_seconds": 600.0})
    yield instance("tiny-zero-weight", nodes(2),
                   [job("prod", {8: 1000, 16: 1900}, 8, ["n0"]),
                    job("scavenger", {8: 1100}, 8, ["n1"], weight=0.0)])
    yield instance("tiny-non-monotone", nodes(2),
                   [job("a", {8: 1000, 12: 900, 16: 1800}, 16, ["n0", "n1"])],
                   fail(gpus=[("n1", 0)]), isolation="gpu")
    yield instance("tiny-two-gpu-types", nodes(1, "h100", "h") + nodes(2, "a100", "a"),
                   [job("j1", {8: 3000}, 8, ["h0"], gpu_type="h100"),
                    job("j2", {8: 1000, 16: 1900}, 16, ["a0", "a1"], gpu_type="a100")],
                   fail(["a1"]), gpu_types={"h100": H100, "a100": A100})
    yield instance("small-shared-node-failure", nodes(4),
                   [job("j1", {4: 450, 8: 880, 12: 1300}, 12, ["n0", "n1"], trans=300),
                    job("j2", {4: 460, 8: 900}, 4, ["n1"], trans=300),
                    job("j3", {8: 1000, 16: 1950}, 16, ["n2", "n3"], trans=900)],
                   fail(["n1"]), {"expected_run_seconds": 7200.0, "default_transition_seconds": 600.0})


# GPT-3 family, per-GPU TFLOP/s and the smallest GPU count each runs on (synthetic but plausible).
GPT3 = {"gpt3-1.3b": (150.0, 1), "gpt3-2.7b": (148.0, 2), "gpt3-6.7b": (145.0, 4),
        "gpt3-13b": (142.0, 8), "gpt3-175b": (138.0, 64)}


def synthetic_table(per_gpu, min_gpus, max_gpus, rng):
    """Allowed counts are multiples of min_gpus; throughput scales with decaying
    efficiency (1 - 0.04 log2(n / min)) and counts with an odd number of
    pipeline-able groups lose 3-12% (a jagged curve)."""
    table = {}
    n = min_gpus
    while n <= max_gpus:
        eff = 1.0 - 0.04 * math.log2(n / min_gpus)
        groups = n // min_gpus
        jag = 1.0 if groups % 2 == 0 or groups == 1 else 1.0 - rng.uniform(0.03, 0.12)
        table[n] = round(per_gpu * n * eff * jag, 3)
        n += min_gpus
    return table


def generated(name, n_nodes, mix, rng, event, cost, isolation=None):
    cluster_nodes = nodes(n_nodes, per_rack=8)
    jobs, cursor = [], 0
    for k, (model, size, weight) in enumerate(mix):
        per_gpu, min_gpus = GPT3[model]
        table = synthetic_table(per_gpu, min_gpus, n_nodes * 8, rng)
        on = [n["id"] for n in cluster_nodes[cursor // 8: (cursor + size + 7) // 8]] if size else []
        cursor += size if size % 8 == 0 else (size // 8 + 1) * 8
        jobs.append(job(f"{model}-{k}", table, size, on, weight=weight,
                        trans=round(float(rng.uniform(120, 900)), 1)))
    extra = {"isolation": isolation} if isolation else {}
    return instance(name, cluster_nodes, jobs, event(cluster_nodes, rng), cost, **extra)


def large():
    rng = np.random.default_rng(20240101)
    yield generated("paper-128-a800", 16,
                    [("gpt3-175b", 64, 2.0), ("gpt3-13b", 32, 1.5), ("gpt3-6.7b", 16, 1.0),
                     ("gpt3-2.7b", 8, 1.0), ("gpt3-1.3b", 8, 0.5)], rng,
                    lambda ns, r: fail([ns[int(r.integers(0, 8))]["id"]]),
                    {"node_mtbf_hours": 6332.0, "default_transition_seconds": 600.0})
    yield generated("cluster-512-gpu-failures", 64,
                    [("gpt3-175b", 192, 3.0), ("gpt3-175b", 128, 2.0), ("gpt3-13b", 64, 1.0),
                     ("gpt3-13b", 64, 1.0), ("gpt3-6.7b", 32, 1.0), ("gpt3-2.7b", 16, 0.5),
                     ("gpt3-1.3b", 0, 1.0)], rng,
                    lambda ns, r: fail(gpus=[(ns[int(i)]["id"], int(r.integers(0, 8)))
                                             for i in r.choice(len(ns), 5, replace=False)]),
                    {"expected_run_seconds": 21600.0, "default_transition_seconds": 600.0}, isolation="gpu")
    mix = [("gpt3-175b", 256, 3.0), ("gpt3-175b", 192, 2.0), ("gpt3-13b", 128, 1.5)] + \
          [("gpt3-6.7b", 64, 1.0)] * 4 + [("gpt3-2.7b", 32, 0.8)] * 3 + [("gpt3-1.3b", 0, 1.2)] * 2
    yield generated("cluster-1024-rack-failure", 128, mix, rng,
                    lambda ns, r: fail([n["id"] for n in ns if n["rack"] == "r3"]),
                    {"node_mtbf_hours": 6332.0, "default_transition_seconds": 600.0})
    mix = [("gpt3-175b", 512, 3.0), ("gpt3-175b", 384, 2.5), ("gpt3-175b", 256, 2.0)] + \
          [("gpt3-13b", 128, 1.5)] * 3 + [("gpt3-6.7b", 64, 1.0)] * 6 + [("gpt3-2.7b", 32, 0.7)] * 4 + \
          [("gpt3-1.3b", 0, 1.0)] * 2
    yield generated("cluster-2048-multi-failure", 256, mix, rng,
                    lambda ns, r: fail([ns[int(i)]["id"] for i in r.choice(len(ns), 3, replace=False)]),
                    {"expected_run_seconds": 36000.0, "default_transition_seconds": 600.0})


def model_derived():
    """paper-128-a800 with each job naming its model: tables come from unicron_plan.perf."""
    base = next(large())
    assert base["name"] == "paper-128-a800"
    batch = {"gpt3-175b": 1536, "gpt3-13b": 1024, "gpt3-6.7b": 1024, "gpt3-2.7b": 512, "gpt3-1.3b": 512}
    for j in base["jobs"]:
        model = j["id"].rsplit("-", 1)[0]
        j["throughput"] = {"gpu_type": "a800", "model": model, "global_batch": batch[model], "seq_len": 2048}
    base["name"] = "model-derived-128-a800"
    yield base


def record_reference(inst: dict) -> dict:
    """Solve and store the optimum: exhaustive search where small, else the DP."""
    from unicron_plan import api
    from unicron_plan.errors import SolverUnavailableError

    inst.pop("reference", None)
    dp = api.solve(inst, solver="dp")
    try:
        brute = api.solve(inst, solver="brute")
        assert math.isclose(brute.objective, dp.objective, rel_tol=1e-12), inst["name"]
        method = "brute force (all combinations); dp agrees"
    except SolverUnavailableError:
        method = "dp (exact)"
    inst["reference"] = {"objective": dp.objective, "method": method}
    return inst


if __name__ == "__main__":
    import argparse

    argparse.ArgumentParser(description="Rewrite the instance library instances/*.json (hand-made, "
                                        "generated and model-derived) with recorded optima.").parse_args()
    for inst in [*hand_made(), *large(), *model_derived()]:
        inst = record_reference(inst)
        write_atomic(OUT / f"{inst['name']}.json", dumps(inst))
        print(f"{inst['name']:32s} {inst['reference']['objective']:>22.3f}  {inst['reference']['method']}")
