"""Effective training time at Llama 3's scale and failure rate, per policy (docs/simulation.md).

    python benchmarks/llama3_effective_time.py [--seeds 10] [--quick] [--out benchmarks/results-llama3-effective-time.json]

Llama 3 (arXiv 2407.21783, section 3.3.4) reports 419 unexpected interruptions in 54 days of
pre-training on 16,384 GPUs and more than 90% effective training time. The scenario here is the
library's 16,384-GPU cluster (2,048 nodes x 8, node MTBF 6,332.5 h: 419 failures expected in 54
days) with ONE job over all of it, for 54 days. Its table is ASSUMPTION: 123.16 TFLOP/s per GPU
(the 175B job's rate at 960 GPUs in ``scenarios/gpt3-mix-16384-a800.json``) at every multiple of
64 GPUs from 8,192 to 16,384, and its D_trans the 175B job's derived 61.8 s. A policy's effective
training time is its weighted TFLOP over its own healthy rate x the duration, i.e. 1 - its
downtime hours / duration (what Llama 3's figure measures: the share of time spent training).
``unicron-sev1`` is unicron with the planner's node MTBF that of the failures that re-plan (node
MTBF / SEV1 share, docs/model.md "Planning horizon"). ``--quick``: 3 seeds.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from unicron_plan.io import dumps, read_json, write_atomic  # noqa: E402

POLICIES = ["unicron", "unicron-sev1", "megatron", "megatron+spares", "oobleck", "varuna", "bamboo", "greedy"]
DAYS = 54
PER_GPU_TFLOPS = 118231.579 / 960  # the 175B job's rate per GPU at 960 GPUs (scenario table)
SPARE_NODES = 16  # megatron+spares: hot spares, 128 GPUs (0.8% of the cluster)


def scenario(spares: int = 0, sev1_rate: bool = False) -> dict:
    data = read_json(ROOT / "scenarios" / "gpt3-mix-16384-a800.json")
    nodes = [n["id"] for n in data["cluster"]["nodes"]]
    data["name"] = "llama3-scale-one-job-16384"
    data["description"] = "16,384 GPUs, one job on every node, Llama 3 failure rate, 54 days."
    data["duration_hours"] = DAYS * 24.0
    data["jobs"] = [{
        "id": "llm", "weight": 1.0, "transition_seconds": 61.8,
        "throughput": {"gpu_type": "a800",
                       "tflops": {str(c): round(c * PER_GPU_TFLOPS, 3) for c in range(8192, 16385, 64)}},
        "current": {"gpus": 8 * len(nodes), "nodes": nodes}}]
    if spares:
        data["policy_models"] = {"megatron": {"spare_nodes": spares}}
    if sev1_rate:  # the planner's node MTBF: that of the failures that re-plan (SEV1), docs/model.md
        f = data["failures"]
        data["cost"] = {**data.get("cost", {}),
                        "node_mtbf_hours": f["node_mtbf_hours"] / f["severity_mix"]["sev1"]}
    return data


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    from unicron_plan.simulate.run import load_scenario, simulate

    seeds = range(3 if args.quick else args.seeds)
    plain, spared = load_scenario(scenario()), load_scenario(scenario(SPARE_NODES))
    sev1 = load_scenario(scenario(sev1_rate=True))
    rows: dict[str, list] = {p: [] for p in POLICIES}
    failures = []
    for seed in seeds:
        out = simulate(plain, [p for p in POLICIES if p not in ("megatron+spares", "unicron-sev1")], seed)["policies"]
        out["unicron-sev1"] = simulate(sev1, ["unicron"], seed)["policies"]["unicron"]
        out["megatron+spares"] = simulate(spared, ["megatron"], seed)["policies"]["megatron"]
        failures.append(out["unicron"]["failures"])
        for p in POLICIES:
            r = out[p]
            down = r["downtime_hours"]
            rows[p].append({"effective": 1.0 - sum(down.values()) / (DAYS * 24.0),
                            "detection_h": down["detection"], "transition_h": down["transition"],
                            "sub_healthy_h": down["sub_healthy"], "weighted_tflop": r["weighted_tflop"]})
    import numpy as np

    print(f"one job on 16,384 GPUs, {DAYS} days, node MTBF 6,332.5 h, seeds 0-{len(seeds) - 1}: "
          f"{np.mean(failures):.0f} failures per run on average")
    print("| policy | effective training time, mean [min, max] | detection h | transition h | sub-healthy h |")
    print("| --- | --- | --- | --- | --- |")
    summary = {}
    for p in POLICIES:
        e = [r["effective"] for r in rows[p]]
        summary[p] = {"effective_mean": float(np.mean(e)), "effective_min": float(min(e)),
                      "effective_max": float(max(e)),
                      **{k: float(np.mean([r[k] for r in rows[p]])) for k in ("detection_h", "transition_h",
                                                                            "sub_healthy_h")}}
        s = summary[p]
        print(f"| {p} | {100 * s['effective_mean']:.2f}% [{100 * s['effective_min']:.2f}, "
              f"{100 * s['effective_max']:.2f}] | {s['detection_h']:.2f} | {s['transition_h']:.2f} | "
              f"{s['sub_healthy_h']:.2f} |")
    versus = {}
    for u in ("unicron", "unicron-sev1"):
        ratios = [a["weighted_tflop"] / g["weighted_tflop"] for a, g in zip(rows[u], rows["greedy"])]
        versus[u] = ratios
        wins = sum(r >= 1 - 1e-12 for r in ratios)
        print(f"{u} / greedy per seed: mean {np.mean(ratios):.6f}, min {min(ratios):.6f}, "
              f"wins {wins}/{len(ratios)}")
    if args.out:
        write_atomic(args.out, dumps({"seeds": list(seeds), "failures_mean": float(np.mean(failures)),
                                     "spare_nodes": SPARE_NODES, "policies": summary,
                                     "per_seed": rows, "unicron_over_greedy": versus["unicron"],
                                     "unicron_sev1_over_greedy": versus["unicron-sev1"]}) + "\n")


if __name__ == "__main__":
    main()
