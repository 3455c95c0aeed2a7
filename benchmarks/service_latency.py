"""Failure-to-plan latency of `unicron-plan serve` (warm and cold) against `unicron-plan solve` processes.

    PYTHONPATH=.:tests python benchmarks/service_latency.py [--instance FILE] [--events N] [--cli-runs N]
        [--steady] [--modes warm,cold] [--json OUT]

Both measurements come from the same run on the same instance and events:

- the service (a real uvicorn process on a free loopback port) gets the
  instance without its event, then N single-node failures as dry runs, each
  an HTTP round trip from a keep-alive client (plan placed and validated);
  *warm*: after the background work is done (contingency index ready and the
  answer of every single-node failure stored, ``/healthz`` ``precomputed``);
  *cold*: a second server started with --no-contingency;
- with ``--steady``, the uploaded jobs first hold the optimal plan of the instance without
  its event (a cluster whose scheduler carried out its plans); without it they hold the
  instance's own allocations, which on the generated instances are far from optimal, so
  that every failure re-divides most jobs;
- the CLI: whole `unicron-plan solve` processes on the instance with one of
  the same failures as its event (start-up included, as a scheduler that
  shells out pays it).

Prints and writes JSON (``--json``) with p50/p99/max per mode and the ratios
p99 / CLI median. Bounded: at most 2,000 events and 50 CLI runs.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from servers import Server  # noqa: E402


def percentile(xs: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs), q))


def time_service(base: dict, events: list[dict], *args: str, wait_ready: bool) -> list[float]:
    with tempfile.TemporaryDirectory() as d, Server(Path(d) / "s", *args) as srv, \
            httpx.Client(base_url=srv.url, timeout=60) as c:
        assert c.put("/v1/cluster", json=base).status_code == 200
        if wait_ready:
            deadline, start = time.monotonic() + 900, time.monotonic()
            while True:
                health = c.get("/healthz").json()
                done = health["precomputed"]
                if health["contingency"] == "ready" and done["total"] and done["done"] >= done["total"]:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"background work not done after 900 s: {health}")
                time.sleep(0.5)
            print(f"  background work done in {time.monotonic() - start:.0f} s", file=sys.stderr)
        for ev in events[:3]:  # first requests pay imports and caches
            c.post("/v1/events", params={"dry_run": "true"}, json=ev)
        out, sources = [], set()
        for ev in events:
            start = time.perf_counter()
            r = c.post("/v1/events", params={"dry_run": "true"}, json=ev)
            out.append(time.perf_counter() - start)
            if r.status_code != 200:
                raise RuntimeError(r.text)
            sources.add(r.json()["solver"]["name"])
        print(f"  solver names seen: {sorted(sources)}", file=sys.stderr)
        return out


def time_cli(inst: dict, events: list[dict], runs: int) -> list[float]:
    out = []
    with tempfile.TemporaryDirectory() as d:
        for k in range(runs):
            path = Path(d) / f"i{k}.json"
            path.write_text(json.dumps(dict(inst, event=events[k % len(events)])))
            start = time.perf_counter()
            subprocess.run([sys.executable, "-m", "unicron_plan.cli", "solve", str(path), "--out", os.devnull],
                           check=True, capture_output=True)
            out.append(time.perf_counter() - start)
    return out


def steady_state(inst: dict) -> dict:
    """``inst`` with its jobs' current allocations replaced by the optimal plan of ``inst`` (no event)."""
    from unicron_plan import api

    plan = api.solve(inst)
    planned = {j.id: j for j in plan.jobs}
    jobs = [dict(j, current={"gpus": planned[j["id"]].gpus, "nodes": list(planned[j["id"]].nodes)})
            for j in inst["jobs"]]
    return dict(inst, jobs=jobs)


def summary(xs: list[float]) -> dict:
    return {"n": len(xs), "p50_ms": 1e3 * percentile(xs, 50), "p99_ms": 1e3 * percentile(xs, 99),
            "max_ms": 1e3 * max(xs)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--instance", default="instances/jagged-16384-128jobs.json")
    ap.add_argument("--events", type=int, default=300)
    ap.add_argument("--cli-runs", type=int, default=7)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None)
    ap.add_argument("--steady", action="store_true",
                    help="first carry out the optimal plan of the instance without its event (its jobs' current "
                         "allocations become that plan's), as a cluster whose scheduler applied its plans is")
    ap.add_argument("--modes", default="warm,cold", help="comma-separated: warm, cold")
    a = ap.parse_args()
    n_events, cli_runs = min(a.events, 2000), min(a.cli_runs, 50)
    inst = json.loads(Path(a.instance).read_text())
    inst.pop("event", None)
    if a.steady:
        inst = steady_state(inst)
    rng = np.random.default_rng(a.seed)
    nodes = [n["id"] for n in inst["cluster"]["nodes"] if not n.get("failed_gpus")]
    events = [{"kind": "failure", "failed_nodes": [nodes[int(k)]]} for k in rng.integers(0, len(nodes), n_events)]
    modes = {m.strip() for m in a.modes.split(",") if m.strip()}
    timed = {}
    if "warm" in modes:
        print("warm ...", file=sys.stderr)
        timed["warm"] = time_service(inst, events, wait_ready=True)
    if "cold" in modes:
        print("cold ...", file=sys.stderr)
        timed["cold"] = time_service(inst, events, "--no-contingency", wait_ready=False)
    print("cli ...", file=sys.stderr)
    cli = time_cli(inst, events, cli_runs)
    cli_median = statistics.median(cli)
    result = {
        "instance": a.instance, "steady": a.steady, "events": n_events, "cli_runs": cli_runs,
        "machine": f"{platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()} (shared)",
        "cli_process": {"median_ms": 1e3 * cli_median, "min_ms": 1e3 * min(cli), "max_ms": 1e3 * max(cli)},
    }
    for mode, xs in timed.items():
        result[mode] = {**summary(xs), "p99_over_cli": percentile(xs, 99) / cli_median}
    text = json.dumps(result, indent=2)
    print(text)
    if a.json:
        Path(a.json).write_text(text + "\n")


if __name__ == "__main__":
    main()
