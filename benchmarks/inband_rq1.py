"""Unicron's RQ1 on the Slurm testbed: time from a fault to its detection, in band and without.

    UNICRON_TESTBED_DIR=/var/lib/unicron-testbed python benchmarks/inband_rq1.py --rounds 5 \\
        --out benchmarks/results-inband-rq1.json

In band: the end-to-end scenario of tests/test_inband_e2e.py, ``--rounds`` times (a real
coordinator and agent, MPI ranks under `unicron-plan watch`, node heartbeats every 0.5 s); a
fault's detection time is its incident's ``detected_at`` minus the moment it was injected.

Without in-band detection: the same job with reports going nowhere and nothing acting, the same
faults; detection is when the MPI launcher saw the ranks fail (mpirun's exit) within ``--window``
seconds (MPI has no collective timeout: a stopped rank, or a rank that raised and then waits in
MPI_Finalize at exit, is never noticed), and for a dead node when Slurm marked it down (the
testbed's SlurmdTimeout). After each fault the job is
cancelled and submitted again. Bounded: ``--rounds`` (at most 10) of five faults each, every wait
bounded in time. Prints the medians and writes every sample to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import test_inband_e2e as e2e  # noqa: E402

KINDS = ("cuda_error", "exited_abnormally", "task_hang", "ecc_error", "lost_connection")


def in_band(rounds: int, results: Path) -> list[dict]:
    env = {**os.environ, "E2E_ROUNDS": str(rounds), "E2E_RESULTS": str(results)}
    subprocess.run([sys.executable, "-m", "pytest", "-m", "inband_e2e", "-x", "-q", "-p", "no:warnings",
                    str(ROOT / "tests" / "test_inband_e2e.py")], env=env, cwd=ROOT, timeout=600 * rounds + 600)
    return [json.loads(line) for line in results.read_text().splitlines()] if results.exists() else []


def _wait(pred, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.1)
    return False


def without(rounds: int, hang_window: float, work: Path) -> list[dict]:
    sc = e2e.Scenario(work, "http://127.0.0.1:1")  # nobody listens: in-band reports go nowhere
    out = []

    def fresh():
        if sc.job:
            e2e._sh("scancel", str(sc.job), check=False)
        sc.submit()
        sc.wait_training(after=time.time(), steps=8)

    def launcher(inject, kind, window=hang_window):
        fresh()
        before, t0 = len(e2e._launcher_exits(sc)), time.time()
        inject(sc.ranks())
        seen = _wait(lambda: len(e2e._launcher_exits(sc)) > before, window)
        sample = {"kind": kind, "baseline": "launcher", "window_seconds": window,
                  "seconds": e2e._launcher_exits(sc)[before] - t0 if seen else None}
        print(json.dumps(sample), flush=True)
        out.append(sample)

    try:
        for _ in range(rounds):
            launcher(e2e._write(sc, 1, "CUDA error: unspecified launch failure"), "cuda_error")
            launcher(e2e._signal(signal.SIGKILL, 2), "exited_abnormally")
            launcher(e2e._write(sc, 2, "CUDA error: uncorrectable ECC error encountered"), "ecc_error")
            launcher(e2e._signal(signal.SIGSTOP, 3), "task_hang")
            # a dead node: Slurm's own detection (SlurmdTimeout)
            fresh()
            sc.node_agents = {n: subprocess.Popen(["sleep", "600"]) for n in
                              e2e._sh("sinfo", "-h", "-N", "-o", "%N").split()}  # stand-ins: no node heartbeats
            t0 = time.time()
            e2e._node_dies(sc)(sc.ranks())
            down = _wait(lambda: "down" in e2e._sh("sinfo", "-h", "-N", "-n", sc.dead_node, "-o", "%T",
                                                  check=False), 400)
            sample = {"kind": "lost_connection", "baseline": "slurmd_timeout", "window_seconds": 400,
                      "seconds": time.time() - t0 if down else None}
            print(json.dumps(sample), flush=True)
            out.append(sample)
            for proc in sc.node_agents.values():
                proc.kill()
                proc.wait()
            e2e._sh("scancel", str(sc.job), check=False)
            sc.job = 0
            e2e._restore_testbed()
            e2e._sh("scontrol", "update", f"NodeName={sc.dead_node}", "State=RESUME", check=False)
    finally:
        if sc.job:
            e2e._sh("scancel", str(sc.job), check=False)
    return out


def _median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--window", type=float, default=30.0)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--skip-in-band", action="store_true")
    ap.add_argument("--skip-baseline", action="store_true")
    args = ap.parse_args()
    rounds = min(max(args.rounds, 1), 10)
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o755)
        inb = [] if args.skip_in_band else in_band(rounds, Path(tmp) / "in-band.jsonl")
        work = Path(tmp) / "baseline"
        work.mkdir()
        base = [] if args.skip_baseline else without(rounds, args.window, work)
    conf = Path(os.environ.get("SLURM_CONF", e2e.TESTBED / "etc" / "slurm.conf"))
    timeout = next((line.split("=", 1)[1].strip() for line in conf.read_text().splitlines()
                    if line.startswith("SlurmdTimeout=")), "300 (Slurm's default)") if conf.exists() else "?"
    table = {k: {"in_band": [r["detected_seconds"] for r in inb if r["kind"] == k],
                 "without": [r["seconds"] for r in base if r["kind"] == k]} for k in KINDS}
    for k, v in table.items():
        print(f"{k:18s} in band median {_median(v['in_band'])} of {len(v['in_band'])}; "
              f"without median {_median(v['without'])} of {len(v['without'])} "
              f"(undetected in the window: {sum(x is None for x in v['without'])})")
    if args.out:
        args.out.write_text(json.dumps({"settings": {"rounds": rounds, "window_seconds": args.window,
                                                     "slurmd_timeout": timeout,
                                                     "iteration_seconds": e2e.ITERATION},
                                        "in_band": inb, "without": base}, indent=1) + "\n")


if __name__ == "__main__":
    main()
