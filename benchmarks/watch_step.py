"""Cost of `Watch.step()` in a training loop, with the coordinator up, down, or no watch at all.

    python benchmarks/watch_step.py --steps 2000000 --coordinator http://127.0.0.1:PORT   # up
    python benchmarks/watch_step.py --steps 2000000 --coordinator http://127.0.0.1:1      # down (refused)
    python benchmarks/watch_step.py --steps 2000000                                       # no watch

Time the whole process (docs/detection.md gives the method and the numbers); the per-step
overhead is the difference to the run without a watch, divided by the steps. Bounded: at most
``--steps`` iterations (10 million) and one send per heartbeat interval.
"""

from __future__ import annotations

import argparse
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=2_000_000)
    ap.add_argument("--coordinator", default=None, help="URL; none: the loop without a watch")
    ap.add_argument("--token-file", default=None)
    args = ap.parse_args()
    n = min(max(args.steps, 1), 10_000_000)
    start = time.perf_counter()
    if args.coordinator is None:
        for _ in range(n):
            pass
        lost = sent = 0
    else:
        from unicron_plan.watch import Watch

        w = Watch(args.coordinator, job="bench", rank=0, node="n0", token_file=args.token_file)
        for _ in range(n):
            w.step()
        loop = time.perf_counter() - start
        w.close()
        lost, sent = w.lost, w.sent
        start = time.perf_counter() - loop  # the loop alone below
    seconds = time.perf_counter() - start
    print(f"steps={n} loop_seconds={seconds:.4f} ns_per_step={seconds / n * 1e9:.1f} sent={sent} lost={lost}")


if __name__ == "__main__":
    main()
