"""A small data-parallel training loop for the in-band end-to-end test (tests/test_inband_e2e.py).

Every iteration each rank computes a gradient, the ranks sum them with MPI's Allreduce (real data
between the processes), and every rank applies the sum; rank 0 writes a checkpoint every
CHECKPOINT steps and a job restarted (by a requeue) resumes from it. Each rank reports through
:class:`unicron_plan.watch.Watch` (from the environment). Faults are injected from outside: a
file ``inject-<job>-<rank>`` in E2E_DIR holding an error message makes that rank raise it.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np
from mpi4py import MPI

from unicron_plan.watch import Watch

CHECKPOINT = 5


def main() -> None:
    work = Path(os.environ["E2E_DIR"])
    job = os.environ["SLURM_JOB_ID"]
    iteration = float(os.environ.get("E2E_ITERATION_SECONDS", "0.2"))
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    node = os.environ.get("SLURMD_NODENAME", "")
    ckpt = work / f"ckpt-{job}.json"
    state = json.loads(ckpt.read_text()) if ckpt.exists() else {"step": 0, "w": [0.0] * 8}
    step, w = state["step"], np.array(state["w"])
    (work / f"pid-{job}-{rank}").write_text(json.dumps({"pid": os.getpid(), "node": node, "start": step}))
    with Watch.from_env(rank=rank, heartbeat_interval=0.2) as watch:
        while step < 1_000_000:
            time.sleep(iteration)                      # the "compute" of one iteration
            grad = np.full(8, float(rank + 1))
            total = np.empty(8)
            comm.Allreduce(grad, total)                 # the ranks exchange data every iteration
            w -= 0.001 * total / size
            step += 1
            inject = work / f"inject-{job}-{rank}"
            if inject.exists():
                message = inject.read_text()
                inject.unlink()
                raise RuntimeError(message)
            watch.step()
            if rank == 0:
                with open(work / f"progress-{job}.log", "a") as fh:
                    fh.write(json.dumps({"step": step, "t": time.time(), "size": size, "node": node}) + "\n")
                if step % CHECKPOINT == 0:
                    tmp = ckpt.with_suffix(".tmp")
                    tmp.write_text(json.dumps({"step": step, "w": w.tolist()}))
                    tmp.replace(ckpt)


if __name__ == "__main__":
    main()
