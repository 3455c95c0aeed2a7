"""Where a cold request's time goes during the warm-up, in process: per request its wall time, the CPU
time of the request's thread, its wait for a CPU (run queue) and the garbage collection and publishing
of the warm workers' messages that fell within it.

    PYTHONPATH=.:tests python benchmarks/service_cold.py [--gpus 131072 --curves KIND | --file I.json]
        [--workers N] [--interval S] [--bound S] [--off] [--json OUT]

A :class:`unicron_plan.service.coordinator.Coordinator` (``settle_heap`` as ``serve`` sets it, warm
contingency with ``--workers`` processes, or none with ``--off``) gets the cluster (``--file``, or
``generate_instance(1, gpus, jobs=gpus // 128, failed_nodes=0, curves)``: running jobs on shuffled
nodes); then, every ``--interval`` seconds until every class of nodes has its stored answer (or
``--bound`` seconds), a dry-run failure of two random nodes (never stored: each is solved), as
``POST /v1/events?dry_run=true`` runs it (:meth:`Coordinator.dry_run_reply`, the workers stopped
meanwhile). Per request: *wall* (``time.perf_counter``), *cpu* (``time.thread_time`` of the
request's thread), *runq* (the thread's time waiting for a CPU while runnable, from
``/proc/self/task/TID/schedstat``: the machine's load), *gc* (the collector's time within the
request, from ``gc.callbacks``, any thread) and *publish* (the time the thread that receives the
workers' messages spent storing them within the request). What wall has beyond cpu + runq is waiting
for something else: the interpreter lock, I/O. The first 3 requests are dropped (imports, caches).
Every 2 s the RSS and PSS of this process and every process under it (the fork server and the
workers) are read from /proc; the peaks are reported.

Prints one JSON object: the time to warm, percentiles of each column, the five slowest requests'
columns, the peak memory, the load average at start and end.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))


def _schedstat() -> float:
    """Seconds this thread has waited for a CPU while runnable."""
    with open(f"/proc/self/task/{threading.get_native_id()}/schedstat") as f:
        return int(f.read().split()[1]) / 1e9


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", type=int, default=131072)
    ap.add_argument("--curves", default="identical")
    ap.add_argument("--file", default=None, help="the cluster (an instance's JSON; its event is dropped)")
    ap.add_argument("--workers", type=int, default=None, help="warm workers (default: the coordinator's)")
    ap.add_argument("--interval", type=float, default=0.5)
    ap.add_argument("--bound", type=float, default=600.0)
    ap.add_argument("--off", action="store_true", help="no warm contingency")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()

    from service_warm import memory

    from unicron_plan.service.coordinator import Coordinator

    if a.file:
        inst = json.loads(Path(a.file).read_text())
    else:
        from unicron_plan.tools.generate import generate_instance

        inst = generate_instance(1, gpus=a.gpus, jobs=a.gpus // 128, failed_nodes=0, curves=a.curves)
    inst.pop("event", None)
    nodes = [n["id"] for n in inst["cluster"]["nodes"] if not n.get("failed_gpus")]

    collected = {"s": 0.0}
    started: dict[int, float] = {}

    def on_gc(phase, info):
        if phase == "start":
            started[threading.get_ident()] = time.perf_counter()
        else:
            collected["s"] += time.perf_counter() - started.pop(threading.get_ident(), time.perf_counter())

    gc.callbacks.append(on_gc)
    published = {"s": 0.0}
    publish = Coordinator._publish

    def timed(self, snapshot, message, start):
        t = time.perf_counter()
        publish(self, snapshot, message, start)
        published["s"] += time.perf_counter() - t

    Coordinator._publish = timed
    load = [os.getloadavg()[0]]
    coord = Coordinator(Path(tempfile.mkdtemp()) / "s", contingency=not a.off, settle_heap=True,
                        warm_workers=a.workers)
    try:
        t = time.monotonic()
        coord.put_cluster(inst)
        upload = time.monotonic() - t
        del inst
        rng = np.random.default_rng(0)
        rows, k, warm_at, peak, last_mem = [], 0, None, None, 0.0
        began = time.monotonic()
        while time.monotonic() - began < a.bound:
            if time.monotonic() - last_mem > 2:
                m = memory(os.getpid())
                peak = m if peak is None else {key: max(peak[key], m[key]) for key in m}
                last_mem = time.monotonic()
            pair = [nodes[int(i)] for i in rng.choice(len(nodes), 2, replace=False)]
            g0, p0, q0 = collected["s"], published["s"], _schedstat()
            c0, t0 = time.thread_time(), time.perf_counter()
            coord.dry_run_reply({"kind": "failure", "failed_nodes": pair})
            wall, cpu = time.perf_counter() - t0, time.thread_time() - c0
            if k >= 3:
                rows.append((wall, cpu, _schedstat() - q0, collected["s"] - g0, published["s"] - p0))
            k += 1
            if not a.off:
                done = coord.precomputed_status()
                if done["total"] and done["done"] >= done["total"]:
                    warm_at = time.monotonic() - began
                    break
            time.sleep(max(0.0, a.interval - wall))
        load.append(os.getloadavg()[0])
        x = np.asarray(rows) * 1e3
        names = ("wall", "cpu", "runq", "gc", "publish")
        out = {"workers": None if a.off else coord.warm_workers, "warm_pids": len(set(coord.warm_pids)),
               "upload_s": round(upload, 1), "time_to_warm_s": warm_at, "ran_s": round(time.monotonic() - began, 1),
               "precomputed": coord.precomputed_status(), "requests": len(rows), "load_1min": load,
               "peak_rss_mib": round(peak["rss_mib"]), "peak_pss_mib": round(peak["pss_mib"]),
               "processes_at_peak": peak["processes"]}
        for j, name in enumerate(names):
            out[f"{name}_ms"] = {q: round(float(np.percentile(x[:, j], q)), 1) for q in (50, 90, 99)}
        other = x[:, 0] - x[:, 1] - x[:, 2]
        out["other_ms"] = {q: round(float(np.percentile(other, q)), 1) for q in (50, 90, 99)}
        out["slowest"] = [dict(zip(names, (round(float(v), 1) for v in x[i]))) for i in np.argsort(-x[:, 0])[:5]]
        text = json.dumps(out)
        print(text, flush=True)
        if a.json:
            Path(a.json).write_text(text + "\n")
    finally:
        coord.close()


if __name__ == "__main__":
    main()
