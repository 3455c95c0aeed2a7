"""Time to warm, cold latency during the warm-up, and memory of `unicron-plan serve` at 16,384 and 131,072 GPUs.

    PYTHONPATH=.:tests python benchmarks/service_warm.py [--quick] [--sizes 16384,131072] [--rounds N]
        [--interval S] [--json OUT]

For each size and round, two real `serve` processes on free loopback ports, one after the other:

- *warm*: the cluster is uploaded (``PUT /v1/cluster``, the 16,384-GPU library instance
  ``instances/jagged-16384-128jobs.json`` without its event, or ``generate_instance(1, gpus=131072,
  jobs=1024, failed_nodes=0)``); from the start of the upload, *time to warm* is when ``/healthz``
  says ``ready`` and every single-node failure has its stored answer (``precomputed`` done = total);
- *off*: the same with ``--no-contingency``, for as long as the warm run took (at most its bound).

Meanwhile one client sends cold requests, one every ``--interval`` seconds (default 0.25): dry-run
failures of two nodes (seeded; never precomputed, so each is solved), and their latencies are
recorded (the first 3 after the upload dropped: imports and caches). Every second the memory of the
server and of every process under it (the fork server and the warm worker) is read from /proc: the
sum of their RSS (which counts pages a forked worker shares with its parent twice) and the sum of
their PSS (each shared page divided among the processes that map it: the memory they hold together);
the peaks are reported. Bounded: each warm run stops at 120 s (16,384) or 900 s (131,072), each
request loop at that time too. ``--quick``: 16,384 GPUs, two rounds (about 2 minutes on a quiet
machine, 3 on a loaded one).

Prints and writes JSON (``--json``) with, per size and mode, the time to warm, request count,
p50/p99/max of the cold requests, peak RSS and PSS, and the load average at start and end; and per
size a summary: the medians over rounds of p50 and p99 with warm contingency and without, their
ratios, every time to warm and the peak memory.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from servers import Server  # noqa: E402

BOUND = {16384: 120.0, 131072: 900.0}


def instance(gpus: int) -> dict:
    if gpus == 16384:
        inst = json.loads((ROOT / "instances" / "jagged-16384-128jobs.json").read_text())
    else:
        from unicron_plan.tools.generate import generate_instance

        inst = generate_instance(1, gpus=gpus, jobs=gpus // 128, failed_nodes=0)
    inst.pop("event", None)
    return inst


def _children() -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            out.setdefault(ppid, []).append(int(d))
    return out


def _kib(pid: int, path: str, field: str) -> int:
    try:
        with open(f"/proc/{pid}/{path}") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def memory(pid: int) -> dict:
    """RSS and PSS (MiB) summed over ``pid`` and every process under it, and how many processes."""
    kids, todo, seen = _children(), [pid], []
    while todo:
        p = todo.pop()
        seen.append(p)
        todo += kids.get(p, [])
    return {"processes": len(seen), "rss_mib": sum(_kib(p, "status", "VmRSS") for p in seen) / 1024,
            "pss_mib": sum(_kib(p, "smaps_rollup", "Pss") for p in seen) / 1024}


def run(inst: dict, warm: bool, seconds: float, interval: float, seed: int) -> dict:
    """One server: upload, cold requests every ``interval`` s until warm (or for ``seconds``)."""
    rng = np.random.default_rng(seed)
    nodes = [n["id"] for n in inst["cluster"]["nodes"] if not n.get("failed_gpus")]
    args = () if warm else ("--no-contingency", )
    with tempfile.TemporaryDirectory() as d, Server(Path(d) / "s", "--no-access-log", *args) as srv, \
            httpx.Client(base_url=srv.url, timeout=120) as c:
        peak = memory(srv.proc.pid)
        start = time.monotonic()
        r = c.put("/v1/cluster", json=inst)
        if r.status_code != 200:
            raise RuntimeError(r.text)
        upload = time.monotonic() - start
        lat, warm_at, health, last_mem, k = [], None, {}, 0.0, 0
        next_health = time.monotonic()
        while time.monotonic() - start < seconds:
            t0 = time.monotonic()
            pair = [nodes[int(i)] for i in rng.choice(len(nodes), 2, replace=False)]
            t = time.perf_counter()
            r = c.post("/v1/events", params={"dry_run": "true"}, json={"kind": "failure", "failed_nodes": pair})
            if r.status_code != 200:
                raise RuntimeError(r.text)
            if k >= 3:
                lat.append(time.perf_counter() - t)
            k += 1
            now = time.monotonic()
            if now - last_mem >= 1.0:
                m = memory(srv.proc.pid)
                peak = {key: max(peak[key], m[key]) for key in m}
                last_mem = now
            if warm and now >= next_health:
                health = c.get("/healthz").json()
                done = health["precomputed"]
                if health["contingency"] != "building" and done["done"] >= done["total"]:
                    warm_at = time.monotonic() - start
                    break
                next_health = now + 0.5
            time.sleep(max(0.0, interval - (time.monotonic() - t0)))
        m = memory(srv.proc.pid)
        peak = {key: max(peak[key], m[key]) for key in m}
        x = np.asarray(lat) * 1e3
        return {"mode": "warm" if warm else "off", "upload_s": upload, "time_to_warm_s": warm_at,
                "ran_s": time.monotonic() - start, "health": health, "requests": len(lat),
                "p50_ms": float(np.percentile(x, 50)) if len(x) else None,
                "p99_ms": float(np.percentile(x, 99)) if len(x) else None,
                "max_ms": float(x.max()) if len(x) else None,
                "peak_rss_mib": peak["rss_mib"], "peak_pss_mib": peak["pss_mib"],
                "processes_at_peak": peak["processes"]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="16,384 GPUs, two rounds")
    ap.add_argument("--sizes", default="16384,131072")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--interval", type=float, default=0.25)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    sizes = [16384] if a.quick else [int(s) for s in a.sizes.split(",")]
    rounds = 2 if a.quick else min(max(a.rounds, 1), 5)
    out = {"machine": f"{platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()} (shared)",
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "load_start": os.getloadavg(),
           "interval_s": a.interval, "runs": []}
    for gpus in sizes:
        if gpus not in BOUND:
            raise SystemExit(f"--sizes: {gpus} is not 16384 or 131072")
        inst = instance(gpus)
        for r in range(rounds):
            print(f"{gpus} GPUs, round {r + 1}: warm ...", file=sys.stderr)
            w = run(inst, True, BOUND[gpus], a.interval, seed=r)
            print(f"  {json.dumps(w)}", file=sys.stderr)
            print(f"{gpus} GPUs, round {r + 1}: off ...", file=sys.stderr)
            o = run(inst, False, min(w["ran_s"], BOUND[gpus]), a.interval, seed=r)
            print(f"  {json.dumps(o)}", file=sys.stderr)
            out["runs"] += [{"gpus": gpus, "round": r + 1, **w}, {"gpus": gpus, "round": r + 1, **o}]
    out["load_end"] = os.getloadavg()
    out["summary"] = {}
    for gpus in sizes:
        rs = [r for r in out["runs"] if r["gpus"] == gpus]
        pick = {m: [r for r in rs if r["mode"] == m] for m in ("warm", "off")}
        med = {f"{m}_{q}_ms": statistics.median(r[f"{q}_ms"] for r in pick[m]) for m in pick for q in ("p50", "p99")}
        out["summary"][str(gpus)] = {
            **med, "p50_warm_over_off": med["warm_p50_ms"] / med["off_p50_ms"],
            "p99_warm_over_off": med["warm_p99_ms"] / med["off_p99_ms"],
            "time_to_warm_s": [r["time_to_warm_s"] for r in pick["warm"]],
            "peak_rss_mib": max(r["peak_rss_mib"] for r in pick["warm"]),
            "peak_pss_mib": max(r["peak_pss_mib"] for r in pick["warm"])}
    text = json.dumps(out, indent=2)
    print(text)
    if a.json:
        Path(a.json).write_text(text + "\n")


if __name__ == "__main__":
    main()
