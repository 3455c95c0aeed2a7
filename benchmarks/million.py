"""Instances at the next scale: 1,048,576 GPUs (131,072 nodes of 8), 8,192 jobs, tables in the compact form.

    PYTHONPATH=. python benchmarks/million.py OUT.json --curves synthetic [--queued] [--seed 0]
        [--placement shuffled|ordered]

Writes one instance (``generate``'s distributions, every table as ``throughput.compact``;
``--queued``: every job at 0 GPUs; running jobs on nodes in a random order unless
``--placement ordered``). Time the planner on it from outside, whole processes:
``unicron-plan solve OUT.json --out PLAN.json`` (exact) and with ``--time-limit 2``;
``/usr/bin/time -v`` reports CPU and peak RSS. ``near-linear`` and ``dense`` are left out at this
size: their tables (every count up to a quarter of the cluster, or every count) would hold about
2e9 entries, far over the reader's limits.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from read_path import compact  # noqa: E402

from unicron_plan.io import dumps, write_atomic  # noqa: E402
from unicron_plan.tools.generate import generate_instance  # noqa: E402

GPUS, JOBS = 1_048_576, 8_192


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--curves", default="synthetic")
    ap.add_argument("--queued", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--gpus", type=int, default=GPUS)
    ap.add_argument("--jobs", type=int, default=JOBS)
    ap.add_argument("--placement", choices=("shuffled", "ordered"), default="shuffled")
    a = ap.parse_args()
    if a.curves in ("near-linear", "dense", "queued-near-linear"):
        ap.error(f"{a.curves}: tables too large at this size (module docstring)")
    doc = compact(generate_instance(a.seed, gpus=a.gpus, jobs=a.jobs, curves=a.curves,
                                     placement=a.placement))
    if a.queued:
        for j in doc["jobs"]:
            j["current"] = {"gpus": 0, "nodes": []}
    write_atomic(a.out, dumps(doc))
    entries = sum(len(j["throughput"]["compact"]["counts"]) for j in doc["jobs"] if "compact" in j["throughput"])
    print(f"{a.out}: {a.gpus} GPUs, {a.jobs} jobs, {entries} table entries", file=sys.stderr)


if __name__ == "__main__":
    main()
