"""Concurrent load on `unicron-plan serve` over loopback: dry runs, then a mixed load whose history is counted.

    PYTHONPATH=.:tests python benchmarks/service_load.py [--clients 50] [--seconds 60] [--instance FILE]

Phase 1: ``--clients`` threads, each with its own keep-alive client, send
single-node failure dry runs for ``--seconds``. Phase 2 (same length): a
few clients (``--writers``, 2) record failures and repairs of their own nodes
(``--pause`` seconds apart), one
applies the latest plan (the plan of state revision R is entry R + 1; a 409,
when a writer moved the state on in between, is expected and counted apart;
so is a 404 when the last change was not an event; the revision comes from
/healthz), the rest read state,
history and health.
Afterwards the history must hold exactly one entry per acknowledged change.
Bounded: at most 200 clients and 600 s per phase; loopback only.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from servers import Server  # noqa: E402


def run(instance: str, clients: int, seconds: float, seed: int = 0, writers: int = 2, pause: float = 1.0) -> dict:
    clients, seconds = min(clients, 200), min(seconds, 600.0)
    n_writers = max(1, min(writers, clients - 2))
    inst = json.loads(Path(instance).read_text())
    inst.pop("event", None)
    nodes = [n["id"] for n in inst["cluster"]["nodes"] if not n.get("failed_gpus")]
    status: Counter = Counter()
    errors: list[str] = []
    lat: list[float] = []
    acked: Counter = Counter()
    lock = threading.Lock()

    def note(code: int | str, dt: float | None = None) -> None:
        with lock:
            status[code] += 1
            if dt is not None:
                lat.append(dt)

    with tempfile.TemporaryDirectory() as d, Server(Path(d) / "s") as srv:
        with httpx.Client(base_url=srv.url, timeout=120) as c:
            assert c.put("/v1/cluster", json=inst).status_code == 200
            acked["cluster"] += 1
            while c.get("/healthz").json()["contingency"] == "building":
                time.sleep(0.05)

        def dry(k: int, stop: float) -> None:
            rng = np.random.default_rng(seed + k)
            with httpx.Client(base_url=srv.url, timeout=120) as c:
                while time.monotonic() < stop:
                    ev = {"kind": "failure", "failed_nodes": [nodes[int(rng.integers(len(nodes)))]]}
                    t = time.perf_counter()
                    try:
                        r = c.post("/v1/events", params={"dry_run": "true"}, json=ev)
                        note(r.status_code, time.perf_counter() - t)
                    except httpx.HTTPError as exc:
                        note("transport")
                        errors.append(repr(exc))

        def writer(k: int, stop: float) -> None:
            mine = nodes[k::n_writers]
            with httpx.Client(base_url=srv.url, timeout=120) as c:
                i = 0
                while time.monotonic() < stop:
                    node = mine[i % len(mine)]
                    i += 1
                    time.sleep(pause)  # a failure rate, not a flood: leaves the applier a window
                    try:
                        r = c.post("/v1/events", json={"kind": "failure", "failed_nodes": [node]})
                        note(r.status_code)
                        if r.status_code != 200:
                            errors.append(r.text)
                            continue
                        with lock:
                            acked["event"] += 1
                            acked["plan"] += 1
                        r = c.post("/v1/events", json={"kind": "repair", "repaired_nodes": [node]})
                        note(r.status_code)
                        if r.status_code != 200:
                            errors.append(r.text)
                        if r.status_code == 200:
                            with lock:
                                acked["event"] += 1
                                acked["plan"] += 1
                    except httpx.HTTPError as exc:
                        note("transport")
                        errors.append(repr(exc))

        def applier(k: int, stop: float) -> None:
            """Applies the latest plan, as a scheduler does: the plan of state revision R is entry R + 1."""
            with httpx.Client(base_url=srv.url, timeout=120) as c:
                while time.monotonic() < stop:
                    try:
                        rev = c.get("/healthz").json()["revision"]
                        a = c.post(f"/v1/plans/p{rev + 1}/apply")
                        note(f"apply-{a.status_code}")
                        if a.status_code == 404:
                            time.sleep(0.01)
                        if a.status_code == 200:
                            with lock:
                                acked["apply"] += 1
                    except httpx.HTTPError as exc:
                        note("transport")
                        errors.append(repr(exc))

        def reader(k: int, stop: float) -> None:
            with httpx.Client(base_url=srv.url, timeout=120) as c:
                while time.monotonic() < stop:
                    try:
                        for path in ("/v1/state", "/v1/history?since=0&limit=50", "/healthz"):
                            note(c.get(path).status_code)
                    except httpx.HTTPError as exc:
                        note("transport")
                        errors.append(repr(exc))

        def phase(targets) -> float:
            stop = time.monotonic() + seconds
            threads = [threading.Thread(target=fn, args=(k, stop)) for k, fn in enumerate(targets)]
            start = time.perf_counter()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            return time.perf_counter() - start

        t1 = phase([dry] * clients)
        dry_done = len(lat)
        t2 = phase([writer] * n_writers + [applier] + [reader] * (clients - n_writers - 1))
        with httpx.Client(base_url=srv.url, timeout=120) as c:
            entries = c.get("/v1/history", params={"since": 0}).json()["entries"]
            metrics = c.get("/metrics").text
    found = Counter(e["type"] for e in entries)
    five = sum(v for k, v in status.items() if isinstance(k, int) and k >= 500)
    expected = (200, "apply-200", "apply-409", "apply-404")
    unexpected = sum(v for k, v in status.items() if k not in expected)
    return {
        "instance": instance, "clients": clients, "seconds_per_phase": seconds,
        "dry_runs": dry_done, "dry_runs_per_second": dry_done / t1,
        "dry_run_p50_ms": 1e3 * float(np.percentile(lat, 50)) if lat else None,
        "dry_run_p99_ms": 1e3 * float(np.percentile(lat, 99)) if lat else None,
        "mixed_seconds": t2, "writers": n_writers, "writer_pause_seconds": pause,
        "status": {str(k): v for k, v in sorted(status.items(), key=str)},
        "responses_5xx": five, "unexpected_responses": unexpected, "transport_errors": len(errors),
        "first_errors": errors[:3], "acknowledged": dict(acked), "history": dict(found), "history_matches": dict(found) == dict(acked),
        "contingency_hits": next((line.split()[-1] for line in metrics.splitlines()
                                  if line.startswith("unicron_contingency_hits_total")), None),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--instance", default="instances/jagged-2048-32jobs.json")
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--writers", type=int, default=2)
    ap.add_argument("--pause", type=float, default=1.0, help="Seconds a writer waits between events.")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    result = run(a.instance, a.clients, a.seconds, writers=a.writers, pause=min(a.pause, 60.0))
    text = json.dumps(result, indent=2)
    print(text)
    if a.json:
        Path(a.json).write_text(text + "\n")


if __name__ == "__main__":
    main()
