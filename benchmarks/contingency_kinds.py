"""Rack contingency at 2,048 nodes on every curve kind: wall and CPU seconds and peak memory per kind.

    PYTHONPATH=. python benchmarks/contingency_kinds.py [--quick] [--runs N] [--kinds K1,K2] [--json OUT]
        [--placement shuffled|ordered]

Per kind (``synthetic`` and every kind of ``unicron_plan.tools.adversarial.KINDS``, the queued ones
included), the instance is ``generate_instance(0, gpus=16384, jobs=128, failed_nodes=0,
curves=KIND, placement=PLACEMENT)`` (2,048 nodes of 8 GPUs, 64 racks of 32 nodes: 2,112 failures); each run is a fresh
Python process that generates it, then times ``build_contingency(instance, racks=True)`` alone
(wall and process CPU seconds) and reports its peak RSS. Runs of the kinds alternate (all kinds, then
all again), so a drift in the machine's speed touches every kind alike; medians are reported.
``--quick``: one run per kind (about a minute on a quiet 2-core machine).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

CHILD = """
import json, resource, sys, time
from unicron_plan import api
from unicron_plan.plan.contingency import build_contingency
from unicron_plan.tools.generate import generate_instance
inst = api.load_instance(generate_instance(0, gpus=16384, jobs=128, failed_nodes=0, curves=sys.argv[1],
                                           placement=sys.argv[2]))
w, c = time.perf_counter(), time.process_time()
index = build_contingency(inst, racks=True)
w, c = time.perf_counter() - w, time.process_time() - c
print(json.dumps({"wall_s": w, "cpu_s": c, "failures": len(index["failures"]) + len(index["infeasible"]),
                  "stats": {k: v for k, v in index["stats"].items() if k != "wall_seconds"},
                  "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def main() -> None:
    from unicron_plan.tools.adversarial import KINDS

    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="one run per kind")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--kinds", default=",".join(("synthetic",) + KINDS))
    ap.add_argument("--json", default=None)
    ap.add_argument("--placement", choices=("shuffled", "ordered"), default="shuffled",
                    help="running jobs on shuffled nodes (as real clusters place them) or in node order")
    a = ap.parse_args()
    kinds = [k.strip() for k in a.kinds.split(",") if k.strip()]
    runs = 1 if a.quick else min(max(a.runs, 1), 7)
    out = {"machine": f"{platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()} (shared)",
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "load_start": os.getloadavg(),
           "placement": a.placement, "kinds": {}}
    got: dict[str, list] = {k: [] for k in kinds}
    for _ in range(runs):
        for kind in kinds:
            r = subprocess.run([sys.executable, "-c", CHILD, kind, a.placement], capture_output=True, text=True, timeout=600)
            if r.returncode != 0:
                raise SystemExit(f"{kind}: {r.stderr.strip().splitlines()[-1]}")
            got[kind].append(json.loads(r.stdout))
            print(f"{kind}: {r.stdout.strip()}", file=sys.stderr)
    for kind, rs in got.items():
        out["kinds"][kind] = {
            "runs": len(rs), "failures": rs[0]["failures"], "stats": rs[0]["stats"],
            "wall_s_median": statistics.median(x["wall_s"] for x in rs),
            "wall_s_max": max(x["wall_s"] for x in rs),
            "cpu_s_median": statistics.median(x["cpu_s"] for x in rs),
            "peak_rss_mib_max": max(x["peak_rss_mib"] for x in rs)}
    out["load_end"] = os.getloadavg()
    print(f"{'kind':24} {'wall s':>8} {'cpu s':>8} {'RSS MiB':>8}")
    for kind, v in out["kinds"].items():
        print(f"{kind:24} {v['wall_s_median']:8.2f} {v['cpu_s_median']:8.2f} {v['peak_rss_mib_max']:8.0f}")
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
