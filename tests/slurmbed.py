"""The real Slurm testbed (scripts/slurm-testbed) as the Slurm tests use it: commands, the
jobs a test submitted (the only ones it ever cancels), the cluster as Slurm and as the
coordinator see it."""

from __future__ import annotations

import atexit
import getpass
import json
import os
import shlex
import subprocess
import time
from pathlib import Path

import pytest

TESTBED = Path(os.environ.get("UNICRON_TESTBED_DIR", "/var/lib/unicron-testbed"))
THROUGHPUT = "8:100,16:195,24:285,32:370,40:450,48:525,56:595,64:660"
#: The name of every job the tests submit.
JOB_NAME = "unicron-plan-test"
#: Ids of the jobs this test process submitted: the only jobs it ever cancels.
SUBMITTED: set[int] = set()


def slurm_env() -> dict:
    env = dict(os.environ)
    conf = TESTBED / "etc" / "slurm.conf"
    if "SLURM_CONF" not in env and conf.exists():
        env["SLURM_CONF"] = str(conf)
    return env


def sh(*argv: str, check: bool = True, timeout: float = 60) -> str:
    r = subprocess.run(list(argv), capture_output=True, text=True, env=slurm_env(), timeout=timeout)
    if check and r.returncode:
        raise AssertionError(f"{shlex.join(argv)}: {r.stderr}")
    return r.stdout


def testbed_up() -> bool:
    """The testbed's own Slurm answers (never a Slurm the host has otherwise: its jobs are not ours)."""
    if "SLURM_CONF" not in os.environ and not (TESTBED / "etc" / "slurm.conf").exists():
        return False
    try:
        return subprocess.run(["scontrol", "ping"], capture_output=True, text=True, env=slurm_env(),
                              timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def require_testbed() -> dict:
    """The environment of the testbed's clients; skip (fail under CI=true) when none answers."""
    if not testbed_up():
        msg = "no Slurm testbed answers (start one with: scripts/slurm-testbed up)"
        if os.environ.get("CI") == "true":
            pytest.fail(msg)
        pytest.skip(msg)
    env = slurm_env()
    os.environ["SLURM_CONF"] = env["SLURM_CONF"]
    return env


def node_states() -> dict[str, str]:
    out = sh("sinfo", "-h", "-N", "-o", "%N %T")
    return dict(line.split() for line in out.splitlines())


def sbatch(*args: str) -> int:
    """Submit a job (``sbatch --parsable ARGS``) named JOB_NAME, so that only it is ever cancelled."""
    out = sh("sbatch", "--parsable", "-J", JOB_NAME, "-o", "/dev/null", *args)
    job = int(out.strip().split(";")[0])
    SUBMITTED.add(job)
    return job


def ours() -> set[int]:
    """The jobs this test process submitted that Slurm still knows."""
    listed = {int(j) for j in sh("squeue", "-h", "-n", JOB_NAME, "-u", getpass.getuser(), "-o", "%i").split()}
    return listed & SUBMITTED


def cancel_ours() -> None:
    """Cancel the jobs this test process submitted, and no other."""
    if SUBMITTED:
        sh("scancel", *map(str, sorted(SUBMITTED)), check=False)


atexit.register(cancel_ours)  # none of this process's jobs outlives it (the next suite starts from a clean cluster)


def submit(nodes: int, weight: int, planned: bool = True, gpus: int = 8, *extra: str) -> int:
    comment = f"unicron-plan: weight={weight} throughput={THROUGHPUT}" if planned else "evaluation"
    return sbatch("-N", str(nodes), f"--gres=gpu:h100:{gpus}", "--comment", comment, *extra, "--wrap", "sleep 3600")


def reset(timeout: float = 120) -> None:
    """None of the tests' jobs left, no reservation of the agent's, every node back in service."""
    cancel_ours()
    for line in sh("scontrol", "-o", "show", "reservation", check=False).splitlines():
        name = line.split()[0].removeprefix("ReservationName=") if line.startswith("ReservationName=") else ""
        if name.startswith("unicron-"):
            sh("scontrol", "delete", f"ReservationName={name}", check=False)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        states = node_states()
        for node, st in states.items():
            if "drain" in st or "down" in st:
                sh("scontrol", "update", f"NodeName={node}", "State=RESUME", check=False)
        if not ours() and all(s == "idle" for s in states.values()):
            return
        time.sleep(0.5)
    raise AssertionError(f"testbed did not settle: {node_states()} {sh('squeue')}")


def wait_until(check, seconds: float, what, interval: float = 0.5):
    """``check()`` every ``interval`` s until it returns something truthy (returned), for at most
    ``seconds``: a hang guard, whose failure names what never came (``what``: a text, or a callable
    giving one, called then)."""
    deadline = time.monotonic() + seconds
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() >= deadline:
            raise AssertionError(what() if callable(what) else what)
        time.sleep(interval)


def job_states() -> dict[str, str]:
    return dict(line.split() for line in sh("squeue", "-h", "-o", "%i %T").splitlines())


def wait_running(jobs: list[int], timeout: float = 60) -> None:
    wait_until(lambda: all(job_states().get(str(j)) == "RUNNING" for j in jobs), timeout, lambda: sh("squeue"), 0.3)


def agent(url: str, state_dir: Path, **cfg):
    from unicron_plan.client import PlannerClient
    from unicron_plan.integrations.agent import AgentConfig, SlurmAgent

    client = PlannerClient(url)
    return SlurmAgent(client, AgentConfig(state_dir=state_dir, **{"verify_seconds": 60, **cfg}),
                      log=lambda rec: print(json.dumps(rec)[:600], flush=True))


def slurm_view(on_bad_job=None, own_holds=frozenset()) -> tuple[dict[str, tuple[int, set]], set]:
    """Planned jobs -> (GPUs, nodes) and the nodes with no GPU for them (failed, or held whole by
    other work: the coordinator writes both as every GPU out), as Slurm shows them now
    (``on_bad_job``: as the agent reads, a planned job with invalid fields left out; ``own_holds``:
    as the agent reads, the jobs the coordinator keeps idle are held by the planner)."""
    from unicron_plan.integrations.agent import SlurmCli
    from unicron_plan.integrations.common import Cost, GpuMap
    from unicron_plan.integrations.slurm import import_slurm

    inst = import_slurm(*SlurmCli().read(), cost=Cost(expected_run_seconds=36000), gpu_map=GpuMap(),
                        on_bad_job=on_bad_job, own_holds=own_holds)
    whole = {n["id"] for n in inst["cluster"]["nodes"] if len(n["failed_gpus"]) == n["gpus"]}
    return ({j["id"]: (j["current"]["gpus"], set(j["current"]["nodes"])) for j in inst["jobs"]},
            set((inst.get("event") or {}).get("failed_nodes", [])) | whole)


def coordinator_view(url: str, token: str | None = None) -> tuple[dict[str, tuple[int, set]], set]:
    """The same from the coordinator's /v1/state (failed: nodes with every GPU out)."""
    import httpx

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    inst = httpx.get(url + "/v1/state", timeout=30, headers=headers).json()["instance"]
    failed = {n["id"] for n in inst["cluster"]["nodes"] if len(n["failed_gpus"]) == n["gpus"]}
    return {j["id"]: (j["current"]["gpus"], set(j["current"]["nodes"])) for j in inst["jobs"]}, failed


def views_agree(url: str, token: str | None = None) -> bool:
    """The coordinator's view equals Slurm's, read as the agent reads it (the jobs the coordinator
    keeps idle are held by the planner)."""
    coord = coordinator_view(url, token)
    return coord == slurm_view(own_holds={j for j, (gpus, _) in coord[0].items() if not gpus})


def plan_of(url: str, plan_id: str, token: str | None = None) -> dict:
    import httpx

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.get(f"{url}/v1/plans/{plan_id}", timeout=30, headers=headers).json()


def node_of(job: int) -> str:
    from unicron_plan.integrations.slurm import expand

    out = sh("squeue", "-h", "-j", str(job), "-o", "%T %N").strip()
    state, _, nodes = out.partition(" ")
    assert state == "RUNNING" and nodes, f"job {job} should still run (testbed: {sh('squeue')} {node_states()})"
    return expand(nodes, "", "")[0]
