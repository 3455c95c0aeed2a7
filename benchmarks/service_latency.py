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
  shells out pays it), run one at a time between the service's requests,
  spread evenly over each mode's stream, so that both sides are timed under
  the same conditions (this shared machine's speed moves by up to 1.5x within
  minutes; timing them one after the other compared two different machines).

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


class CliRuns:
    """Whole `unicron-plan solve` processes on the instance with one of the events, run between the
    service's requests so that both are timed under the same machine conditions (this shared
    machine's speed moves by 1.5x within minutes)."""

    def __init__(self, inst: dict, events: list[dict], directory: Path):
        self.inst, self.events, self.dir, self.times = inst, events, directory, []

    def run(self) -> None:
        k = len(self.times)
        path = self.dir / f"i{k}.json"
        path.write_text(json.dumps(dict(self.inst, event=self.events[k % len(self.events)])))
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "unicron_plan.cli", "solve", str(path), "--out", os.devnull],
                       check=True, capture_output=True)
        self.times.append(time.perf_counter() - start)


def time_service(base: dict, events: list[dict], *args: str, wait_ready: bool, cli: CliRuns | None = None,
                 cli_runs: int = 0) -> list[float]:
    """Latency of each event as a dry run; ``cli_runs`` of ``cli`` spread evenly between them."""
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
        between = {round((i + 0.5) * len(events) / cli_runs) for i in range(cli_runs)} if cli_runs else set()
        out, sources = [], set()
        for k, ev in enumerate(events):
            if k in between:
                cli.run()
            start = time.perf_counter()
            r = c.post("/v1/events", params={"dry_run": "true"}, json=ev)
            out.append(time.perf_counter() - start)
            if r.status_code != 200:
                raise RuntimeError(r.text)
            sources.add(r.json()["solver"]["name"])
        print(f"  solver names seen: {sorted(sources)}", file=sys.stderr)
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
    modes = [m for m in ("warm", "cold") if m in {x.strip() for x in a.modes.split(",")}]
    timed = {}
    with tempfile.TemporaryDirectory() as d:
        cli = CliRuns(inst, events, Path(d))
        for i, mode in enumerate(modes):  # the CLI runs shared out between the modes' request streams
            runs = cli_runs // len(modes) + (i < cli_runs % len(modes))
            print(f"{mode} (with {runs} CLI runs in between) ...", file=sys.stderr)
            if mode == "warm":
                timed["warm"] = time_service(inst, events, wait_ready=True, cli=cli, cli_runs=runs)
            else:
                timed["cold"] = time_service(inst, events, "--no-contingency", wait_ready=False, cli=cli,
                                             cli_runs=runs)
        if not modes:
            for _ in range(cli_runs):
                cli.run()
    cli_times = cli.times
    cli_median = statistics.median(cli_times)
    result = {
        "instance": a.instance, "steady": a.steady, "events": n_events, "cli_runs": cli_runs,
        "machine": f"{platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()} (shared)",
        "cli_process": {"median_ms": 1e3 * cli_median, "min_ms": 1e3 * min(cli_times),
                        "max_ms": 1e3 * max(cli_times)},
    }
    for mode, xs in timed.items():
        result[mode] = {**summary(xs), "p99_over_cli": percentile(xs, 99) / cli_median}
    text = json.dumps(result, indent=2)
    print(text)
    if a.json:
        Path(a.json).write_text(text + "\n")


if __name__ == "__main__":
    main()
