"""Time to warm, cold latency during the warm-up, CPU and memory of `unicron-plan serve` at 16,384 and
131,072 GPUs.

    PYTHONPATH=.:tests python benchmarks/service_warm.py [--quick] [--sizes 16384,131072,1048576] [--rounds N]
        [--uploads K] [--interval S] [--bound S] [--off-seconds S] [--curves KIND] [--queued] [--warm-only] [--warm-requests N] [--pair-requests N] [--plain-requests N] [--warm-workers N] [--json OUT]

``--curves KIND``: a generated cluster of that curve kind at every size (running jobs on shuffled nodes)
instead of the library instance at 16,384 (``--queued``: with every job at 0 GPUs, as the
``queued-*`` kinds have them); ``--warm-only``: no run without warm contingency; ``--warm-requests N``: once the last upload is
warm, N dry-run failures of one random node each (stored answers: their latency, and how many the
server answered from one by its ``unicron_contingency_hits`` counter); ``--pair-requests N``: then N
dry-run failures of two random nodes each (answered from a failure one with them up to renaming where
one was solved, else solved), counted the same way; ``--plain-requests N``: between the two, N more
single-node ones through a plain socket that reads each reply into a buffer made once (the reply's
cost to a lean client; httpx reads 64 KiB at a time through its parser). At
1,048,576 GPUs the server gets ``--max-body-mib 1024 --parse-seconds 300`` (about 150 MB of JSON).

Per size and round, two real `serve` processes on free loopback ports, one after the other:

- *warm*: the cluster is uploaded (``PUT /v1/cluster``, the 16,384-GPU library instance
  ``instances/jagged-16384-128jobs.json`` without its event, or ``generate_instance(1, gpus=131072,
  jobs=1024, failed_nodes=0)``); from the start of the upload, *time to warm* is when ``/healthz``
  says ``ready`` and every single-node failure has its stored answer (``precomputed`` done = total).
  With ``--uploads K`` the same cluster is uploaded K times, each upload as soon as the last one is
  warm (each is a new applied cluster: the warm-up starts over), so that more requests fall within a
  warm-up;
- *off*: the same uploads with ``--no-contingency``, for as long as the warm run took (at most
  ``--off-seconds``).

Meanwhile one client sends cold requests, one every ``--interval`` seconds: dry-run failures of two
nodes (seeded; never precomputed, so each is solved), and their latencies are recorded (the first 3
after the first upload dropped: imports and caches). Rounds alternate which goes first (warm, off; off,
warm; ...), so that a change of the machine's load falls on both. Every second the memory of the server and of every process
under it (the fork server and the warm worker) is read from /proc: the sum of their RSS (which
counts pages a forked worker shares with its parent twice) and the sum of their PSS (each shared
page divided among the processes that map it: the memory they hold together); the peaks are
reported. *Warm-up CPU*: the CPU seconds of the processes under the server (the warm workers, counted
by the fork server once they end, and the fork server), from before the upload until warm: the work
of the warm-up, whatever the load. Each warm-up is bounded (``--bound``; default 120 s at 16,384 and
720 s at 131,072 GPUs), each request loop too.

``--quick``: 16,384 GPUs, 3 rounds of 3 uploads, a request every 0.1 s (about 2 minutes on a quiet
machine). ``--sizes 131072``: one round of one upload, a request every 1 s, off for at most 180 s
(at most about 16 minutes).

Prints and writes JSON (``--json``) with, per size and mode, every time to warm and its warm-up CPU,
request count, p50/p99/max of the cold requests, peak RSS and PSS, and the load average at start and
end; and per size a summary: p50 and p99 over all requests of all rounds with warm contingency and
without, their ratios, every time to warm and the peak memory.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from servers import Server  # noqa: E402

BOUND = {16384: 120.0, 131072: 720.0, 1048576: 1200.0}
OFF_SECONDS = {16384: 120.0, 131072: 180.0, 1048576: 180.0}
INTERVAL = {16384: 0.25, 131072: 1.0, 1048576: 2.0}
TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def instance(gpus: int, curves: str | None = None, queued: bool = False) -> dict:
    """The cluster uploaded: the 16,384-GPU library instance, or (any other size, or ``curves`` given)
    ``generate_instance(1, gpus, jobs=gpus // 128, failed_nodes=0, curves)`` (running jobs on
    shuffled nodes)."""
    if gpus == 16384 and curves is None:
        inst = json.loads((ROOT / "instances" / "jagged-16384-128jobs.json").read_text())
    else:
        from unicron_plan.tools.generate import generate_instance

        inst = generate_instance(1, gpus=gpus, jobs=gpus // 128, failed_nodes=0, curves=curves or "synthetic")
    inst.pop("event", None)
    if queued:
        for j in inst["jobs"]:
            j["current"] = {"gpus": 0, "nodes": []}
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


def _tree(pid: int) -> list[int]:
    kids, todo, seen = _children(), [pid], []
    while todo:
        p = todo.pop()
        seen.append(p)
        todo += kids.get(p, [])
    return seen


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
    seen = _tree(pid)
    return {"processes": len(seen), "rss_mib": sum(_kib(p, "status", "VmRSS") for p in seen) / 1024,
            "pss_mib": sum(_kib(p, "smaps_rollup", "Pss") for p in seen) / 1024}


def under_cpu(pid: int) -> float:
    """CPU seconds of the processes under ``pid`` (not ``pid`` itself), with those of their ended and
    reaped children: the fork server and the warm workers."""
    total = 0
    for p in _tree(pid)[1:]:
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
        except (OSError, IndexError, ValueError):
            continue
    return total / TICK


def _stored_hits(c: httpx.Client) -> float:
    """The server's count of events answered from a stored answer (``unicron_contingency_hits``)."""
    for line in c.get("/metrics").text.splitlines():
        if line.startswith("unicron_contingency_hits_total "):
            return float(line.split()[1])
    return 0.0


def warm_answers(c: httpx.Client, nodes: list[str], count: int, interval: float, rng, size: int = 1,
                 plain: "PlainClient | None" = None) -> dict:
    """``count`` dry-run failures of ``size`` random nodes each, once the server is warm: latencies of
    the answers (and how many were answered from a stored one, by the server's own counter, read
    through ``c``). Sent through ``c``, or through ``plain`` where given."""
    hits0, lat = _stored_hits(c), []
    for _ in range(count):
        failed = [nodes[int(i)] for i in rng.choice(len(nodes), size, replace=False)]
        event = {"kind": "failure", "failed_nodes": failed}
        t = time.perf_counter()
        if plain is not None:
            plain.post("/v1/events?dry_run=true", event)
        else:
            r = c.post("/v1/events", params={"dry_run": "true"}, json=event)
            if r.status_code != 200:
                raise RuntimeError(r.text)
        lat.append(time.perf_counter() - t)
        time.sleep(interval)
    x = np.asarray(lat) * 1e3
    return {"requests": len(lat), "stored": _stored_hits(c) - hits0, "latencies_ms": [round(v, 3) for v in x.tolist()],
            "p50_ms": float(np.percentile(x, 50)), "p99_ms": float(np.percentile(x, 99)), "max_ms": float(x.max())}


class PlainClient:
    """One kept-alive HTTP/1.1 connection that reads each reply into a buffer made once, up to 1 MiB per read,
    and parses only the status line and Content-Length: what a warm reply costs a lean client, where
    httpx reads 64 KiB at a time through its parser and joins the body at the end (at 1,048,576 GPUs a
    reply is about 7.8 MB)."""

    def __init__(self, url: str, most: int = 64 << 20):
        import socket

        host, port = url.rsplit("//", 1)[1].rsplit(":", 1)
        self.host = f"{host}:{port}".encode()
        self.sock = socket.create_connection((host, int(port)), timeout=600)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray(most)
        self.view = memoryview(self.buf)

    def post(self, path: str, body: dict) -> int:
        """POST ``body`` as JSON; the reply's length. RuntimeError for any status but 200."""
        data = json.dumps(body).encode()
        self.sock.sendall(b"POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
                          b"Content-Length: %d\r\n\r\n%s" % (path.encode(), self.host, len(data), data))
        got, need = 0, None
        while need is None or got < need:
            if got >= len(self.buf):
                raise RuntimeError("reply larger than the buffer")
            k = self.sock.recv_into(self.view[got:], 1 << 20)
            if not k:
                raise RuntimeError("connection closed")
            got += k
            if need is None:
                end = self.buf.find(b"\r\n\r\n", 0, got)
                if end >= 0:
                    head = bytes(self.buf[:end]).lower()
                    if not head.startswith(b"http/1.1 200"):
                        raise RuntimeError(head.split(b"\r\n")[0].decode())
                    at = head.index(b"\r\ncontent-length:") + len(b"\r\ncontent-length:")
                    need = end + 4 + int(head[at:].split(b"\r\n")[0])
        if got != need:
            raise RuntimeError("more bytes than the reply")
        return got

    def close(self) -> None:
        self.sock.close()


def run(inst: dict, warm: bool, seconds: float, interval: float, seed: int, uploads: int,
        warm_requests: int = 0, warm_workers: int | None = None, pair_requests: int = 0,
        plain_requests: int = 0) -> dict:
    """One server: ``uploads`` uploads, cold requests every ``interval`` s until each is warm (or for
    ``seconds`` in all without warm contingency); then, warm, ``warm_requests`` single-node failures
    answered from the stored answers (:func:`warm_answers`)."""
    rng = np.random.default_rng(seed)
    nodes = [n["id"] for n in inst["cluster"]["nodes"] if not n.get("failed_gpus")]
    args = () if warm else ("--no-contingency", )
    if warm and warm_workers is not None:
        args += ("--warm-workers", str(warm_workers))
    if len(inst["cluster"]["nodes"]) > 16384:  # the 1,048,576-GPU cluster is about 150 MB of JSON
        args += ("--max-body-mib", "1024", "--read-timeout", "120", "--parse-seconds", "300")
    with tempfile.TemporaryDirectory() as d, Server(Path(d) / "s", "--no-access-log", *args) as srv, \
            httpx.Client(base_url=srv.url, timeout=600) as c:
        peak = memory(srv.proc.pid)
        start = time.monotonic()
        lat, warms, health, last_mem, k = [], [], {}, 0.0, 0
        load = [os.getloadavg()[0]]
        for u in range(uploads):
            cpu0 = under_cpu(srv.proc.pid) if warm else 0.0
            began = time.monotonic()
            r = c.put("/v1/cluster", json=inst)
            if r.status_code != 200:
                raise RuntimeError(r.text)
            warm_at = index_at = None
            next_health = time.monotonic()
            stop = began + seconds if warm else start + seconds * (u + 1) / uploads
            while time.monotonic() < stop:
                t0 = time.monotonic()
                pair = [nodes[int(i)] for i in rng.choice(len(nodes), 2, replace=False)]
                t = time.perf_counter()
                r = c.post("/v1/events", params={"dry_run": "true"},
                           json={"kind": "failure", "failed_nodes": pair})
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
                    if index_at is None and health["contingency"] == "ready":
                        index_at = now - began
                    if health["contingency"] != "building" and done["done"] >= done["total"]:
                        warm_at = now - began
                        break
                    next_health = now + 0.25
                time.sleep(max(0.0, interval - (time.monotonic() - t0)))
            if warm:
                time.sleep(0.3)  # the worker ends and is counted by the fork server
                warms.append({"time_to_warm_s": warm_at, "index_ready_s": index_at,
                              "warm_up_cpu_s": under_cpu(srv.proc.pid) - cpu0,
                              "precomputed": health.get("precomputed")})
            load.append(os.getloadavg()[0])
        answers = None
        if warm and warm_requests and warms and warms[-1]["time_to_warm_s"] is not None:
            answers = warm_answers(c, nodes, min(warm_requests, 2000), 0.05, rng)
            load.append(os.getloadavg()[0])
        plain = None
        if warm and plain_requests and warms and warms[-1]["time_to_warm_s"] is not None:
            client = PlainClient(srv.url)
            try:
                plain = warm_answers(c, nodes, min(plain_requests, 2000), 0.05, rng, plain=client)
            finally:
                client.close()
            load.append(os.getloadavg()[0])
        pairs = None
        if warm and pair_requests and warms and warms[-1]["time_to_warm_s"] is not None:
            pairs = warm_answers(c, nodes, min(pair_requests, 2000), 0.05, rng, size=2)
            load.append(os.getloadavg()[0])
        m = memory(srv.proc.pid)
        peak = {key: max(peak[key], m[key]) for key in m}
        x = np.asarray(lat) * 1e3
        return {"mode": "warm" if warm else "off", "uploads": warms, "ran_s": time.monotonic() - start,
                "requests": len(lat), "latencies_ms": [round(v, 3) for v in x.tolist()],
                "p50_ms": float(np.percentile(x, 50)) if len(x) else None,
                "p99_ms": float(np.percentile(x, 99)) if len(x) else None,
                "max_ms": float(x.max()) if len(x) else None, "load_1min": load,
                "peak_rss_mib": peak["rss_mib"], "peak_pss_mib": peak["pss_mib"],
                "processes_at_peak": peak["processes"], "warm_answers": answers, "warm_answers_plain": plain,
                "warm_pairs": pairs}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="16,384 GPUs, 3 rounds of 3 uploads, every 0.1 s")
    ap.add_argument("--sizes", default="16384,131072")
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--uploads", type=int, default=None)
    ap.add_argument("--interval", type=float, default=None, help="seconds between cold requests")
    ap.add_argument("--bound", type=float, default=None, help="longest warm-up waited for (seconds)")
    ap.add_argument("--off-seconds", type=float, default=None, help="longest run without warm contingency")
    ap.add_argument("--curves", default=None, help="a generated cluster of this curve kind (generate --curves)")
    ap.add_argument("--queued", action="store_true", help="every job at 0 GPUs")
    ap.add_argument("--warm-only", action="store_true", help="no run without warm contingency")
    ap.add_argument("--warm-requests", type=int, default=0,
                    help="once warm, this many single-node dry-run failures (at most 2,000): stored answers' latency")
    ap.add_argument("--pair-requests", type=int, default=0,
                    help="once warm, this many two-node dry-run failures (at most 2,000): answered from a "
                         "failure one with them up to renaming, or solved")
    ap.add_argument("--plain-requests", type=int, default=0,
                    help="after the single-node ones, this many more (at most 2,000) through one plain socket "
                         "read into a buffer made once: the reply's cost to a lean client, not httpx's")
    ap.add_argument("--warm-workers", type=int, default=None,
                    help="serve --warm-workers (default: the server's, the CPUs it may run on)")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    sizes = [16384] if a.quick else [int(s) for s in a.sizes.split(",")]
    out = {"curves": (a.curves or "library (16,384) / synthetic") + (", every job queued" if a.queued else ""), "machine": f"{platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()} (shared)",
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "load_start": os.getloadavg(),
           "runs": []}
    for gpus in sizes:
        if gpus not in BOUND:
            raise SystemExit(f"--sizes: {gpus} is not one of {', '.join(map(str, BOUND))}")
        quick = a.quick and gpus == 16384
        rounds = min(max(a.rounds or (3 if quick else 1), 1), 5)
        uploads = min(max(a.uploads or (3 if quick else 1), 1), 10)
        interval = a.interval or (0.1 if quick else INTERVAL[gpus])
        bound = min(a.bound or BOUND[gpus], 1800.0)
        inst = instance(gpus, a.curves, a.queued)
        ran = None  # how long the last warm run took: the next off run lasts as long
        for r in range(rounds):
            order = (True, False) if r % 2 == 0 or ran is None else (False, True)
            for warm in order if not a.warm_only else (True, ):
                name = "warm" if warm else "off"
                print(f"{gpus} GPUs, round {r + 1}: {name} ...", file=sys.stderr)
                if warm:
                    res = run(inst, True, bound, interval, seed=r, uploads=uploads, warm_requests=a.warm_requests,
                              warm_workers=a.warm_workers, pair_requests=a.pair_requests,
                              plain_requests=a.plain_requests)
                    ran = res["ran_s"]
                else:
                    res = run(inst, False, min(ran, a.off_seconds or OFF_SECONDS[gpus]), interval, seed=r,
                              uploads=uploads)
                short = {k: v for k, v in res.items() if k != "latencies_ms"}
                for key in ("warm_answers", "warm_answers_plain", "warm_pairs"):
                    if res.get(key):
                        short[key] = {k: v for k, v in res[key].items() if k != "latencies_ms"}
                print(f"  {json.dumps(short)}", file=sys.stderr)
                out["runs"].append({"gpus": gpus, "round": r + 1, "interval_s": interval, **res})
    out["load_end"] = os.getloadavg()
    out["summary"] = {}
    for gpus in sizes:
        rs = [r for r in out["runs"] if r["gpus"] == gpus]
        pick = {m: [r for r in rs if r["mode"] == m] for m in ("warm", "off")}
        lat = {m: np.asarray([v for r in pick[m] for v in r["latencies_ms"]]) for m in pick}
        q = {f"{m}_{name}_ms": float(np.percentile(lat[m], p)) if len(lat[m]) else None
             for m in lat for name, p in (("p50", 50), ("p99", 99))}
        ups = [u for r in pick["warm"] for u in r["uploads"]]
        out["summary"][str(gpus)] = {
            **q, "requests": {m: len(lat[m]) for m in lat},
            "p50_warm_over_off": q["warm_p50_ms"] / q["off_p50_ms"] if q["off_p50_ms"] else None,
            "p99_ms_per_round": {m: [None if r["p99_ms"] is None else round(r["p99_ms"], 1) for r in pick[m]]
                                 for m in pick},
            "p99_warm_over_off": q["warm_p99_ms"] / q["off_p99_ms"] if q["off_p99_ms"] else None,
            "time_to_warm_s": [u["time_to_warm_s"] for u in ups],
            "warm_up_cpu_s": [round(u["warm_up_cpu_s"], 2) for u in ups],
            "warm_answers": [{k: v for k, v in r["warm_answers"].items() if k != "latencies_ms"}
                             for r in pick["warm"] if r.get("warm_answers")],
            "warm_answers_plain": [{k: v for k, v in r["warm_answers_plain"].items() if k != "latencies_ms"}
                                   for r in pick["warm"] if r.get("warm_answers_plain")],
            "warm_pairs": [{k: v for k, v in r["warm_pairs"].items() if k != "latencies_ms"}
                           for r in pick["warm"] if r.get("warm_pairs")],
            "peak_rss_mib": max(r["peak_rss_mib"] for r in pick["warm"]),
            "peak_pss_mib": max(r["peak_pss_mib"] for r in pick["warm"]),
            "load_1min": [min(v for r in rs for v in r["load_1min"]), max(v for r in rs for v in r["load_1min"])]}
    print(json.dumps(out["summary"], indent=2))
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
