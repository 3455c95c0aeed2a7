"""Where the time of one `solve` goes: read, validate, build the problem, solve, place, check, write.

    PYTHONPATH=. python benchmarks/read_path.py [--gpus 131072 --jobs 1024] [--curves synthetic]
        [--compact] [--runs 3]

Generates the instance (seed 1, outside the clock) into a temporary JSON file, then times, in
this process, the steps `api.solve` + the CLI take in order: reading and strictly parsing the
file (``io.read_json``), validating it into the schema (``Instance.model_validate``), the instance
checks and the problem (``build_problem``), the DP, placing the counts on nodes and assembling
the plan (``to_plan``), the independent validation, and writing the plan as canonical JSON.
``--compact`` writes every table in the compact form (``{"counts": [...], "tflops": [...]}``).
Medians of ``--runs`` runs (wall and CPU seconds per step); the load average is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

STEPS = ("read", "validate", "build", "solve", "place", "check", "write")


def compact(doc: dict) -> dict:
    """The same instance with every table in the compact form."""
    for j in doc["jobs"]:
        t = j["throughput"]
        table = t.pop("tflops", None)
        if table is not None:
            t["compact"] = {"counts": [int(k) for k in table], "tflops": list(table.values())}
    return doc


def one_run(path: Path, out: Path) -> dict[str, tuple[float, float]]:
    from unicron_plan import api
    from unicron_plan.core.problem import build_problem
    from unicron_plan.io import dumps, read_json, write_atomic
    from unicron_plan.plan.assemble import to_plan
    from unicron_plan.schema import Instance
    from unicron_plan.solvers import get_solver

    times: dict[str, tuple[float, float]] = {}

    def step(name, fn):
        w, c = time.perf_counter(), time.process_time()
        value = fn()
        times[name] = (time.perf_counter() - w, time.process_time() - c)
        return value

    doc = step("read", lambda: read_json(path))
    inst = step("validate", lambda: Instance.model_validate(doc))
    problem = step("build", lambda: build_problem(inst))
    raw = step("solve", lambda: get_solver("dp")(problem, None))
    plan = step("place", lambda: to_plan(problem, raw, "dp", 0.0))
    report = step("check", lambda: api._validate(inst, plan, derived=api._derived(problem)))
    assert report.valid
    step("write", lambda: write_atomic(out, dumps(plan)))
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, default=131072)
    ap.add_argument("--jobs", type=int, default=1024)
    ap.add_argument("--curves", default="synthetic")
    ap.add_argument("--compact", action="store_true")
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    from unicron_plan.tools.generate import generate_instance

    doc = generate_instance(1, gpus=a.gpus, jobs=a.jobs, curves=a.curves)
    if a.compact:
        doc = compact(doc)
    entries = sum(len(j["throughput"].get("tflops") or j["throughput"].get("compact", {}).get("counts", []))
                  for j in doc["jobs"])
    load = os.getloadavg()
    with tempfile.TemporaryDirectory() as td:
        path, out = Path(td) / "instance.json", Path(td) / "plan.json"
        path.write_text(json.dumps(doc))
        size = path.stat().st_size
        del doc
        runs = [one_run(path, out) for _ in range(a.runs)]
    print(f"{a.curves} {a.gpus} x {a.jobs}{' compact' if a.compact else ''}: {entries} table entries, "
          f"{size / 2**20:.1f} MiB; load average {load[0]:.1f} -> {os.getloadavg()[0]:.1f}; median of {a.runs}")
    total_w = total_c = 0.0
    for s in STEPS:
        w = statistics.median(r[s][0] for r in runs)
        c = statistics.median(r[s][1] for r in runs)
        total_w += w
        total_c += c
        print(f"  {s:9s} wall {w:7.3f} s   cpu {c:7.3f} s")
    print(f"  {'total':9s} wall {total_w:7.3f} s   cpu {total_c:7.3f} s")


if __name__ == "__main__":
    main()
