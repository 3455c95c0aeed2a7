"""In-band detection end to end on the real Slurm testbed (docs/detection.md).

A data-parallel job of MPI ranks (tests/inband_train.py: an Allreduce every iteration, each rank
under `unicron-plan watch` and reporting through `Watch`) runs on two nodes, planned by a real
coordinator (`unicron-plan serve`) and kept by a real agent (`unicron-plan agent slurm`). Faults
are injected one after the other: an exception with a CUDA message, a rank killed, a rank
stopped (SIGSTOP, a hang), an ECC message on one node, and a node that dies (its slurmd and its
ranks killed). Each must be detected, classified with the documented severity, acted on (a
restart in place for SEV2, the plan for SEV1), and the job must train on from its last
checkpoint on the nodes of the plan.

Not part of the default run (marker inband_e2e); `.ci/run` runs it on the testbed:
``pytest -m inband_e2e tests/test_inband_e2e.py``. Needs mpi4py (extra ``inband-e2e``) and Debian's
openmpi (``mpirun``). Each fault's detection time is printed (the RQ1 table of docs/detection.md
comes from benchmarks/inband_rq1.py, which runs the same scenario)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from servers import Server
from slurmbed import TESTBED
from slurmbed import sh as _sh
from slurmbed import slurm_env as _env

pytestmark = [pytest.mark.inband_e2e, pytest.mark.slurm]

ROOT = Path(__file__).resolve().parents[1]
# the job trains on 16 GPUs (two nodes) at most: its plans move it, never resize it (a requeued Slurm 22.05
# job updated to another node count stays pending in this testbed)
THROUGHPUT = "8:100,16:195"
TOKEN = "inband-e2e-token"
ITERATION = 0.2


@pytest.fixture(scope="module")
def testbed():
    missing = [p for p in ("mpirun", "sbatch") if shutil.which(p) is None]
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        missing.append("mpi4py (pip install '.[inband-e2e]')")
    up = not missing and subprocess.run(["scontrol", "ping"], capture_output=True, env=_env(),
                                        timeout=20).returncode == 0
    if missing or not up:
        msg = f"needs a Slurm testbed (scripts/slurm-testbed up) and {', '.join(missing) or 'nothing else'}"
        if os.environ.get("CI") == "true":
            pytest.fail(msg)
        pytest.skip(msg)
    os.environ["SLURM_CONF"] = _env()["SLURM_CONF"]
    return _env()


class Scenario:
    """The coordinator, the agent and one training job, and what each of them shows."""

    def __init__(self, work: Path, url: str):
        self.work, self.url = work, url
        self.headers = {"Authorization": f"Bearer {TOKEN}"}
        self.token_file = work / "token"
        self.token_file.write_text(TOKEN + "\n")
        self.job = 0
        self.agent = None
        self.since = 0

    # -- the job and the agent
    def submit(self, nodes: int = 2) -> int:
        py = sys.executable
        script = self.work / "job.sh"
        script.write_text(f"""#!/bin/bash
export E2E_DIR={self.work} E2E_ITERATION_SECONDS={ITERATION}
export UNICRON_COORDINATOR={self.url} UNICRON_TOKEN_FILE={self.token_file}
# MPI's daemons are started by srun with no GPUs (the ranks use none here; a step that asks for the
# job's GPUs after a requeue onto other nodes hits Slurm 22.05's "node offset invalid")
mpirun --allow-run-as-root --oversubscribe --map-by ppr:2:node --mca btl self,tcp \\
  --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo --mca plm_slurm_args "--gres=none" \\
  {py} -m unicron_plan.cli watch -- {py} {ROOT / 'tests' / 'inband_train.py'}
status=$?
date +%s.%N >> {self.work}/mpirun-exit-$SLURM_JOB_ID   # when the launcher saw the job's ranks fail
[ $status -eq 0 ] || sleep 600   # keep the allocation: the agent restarts the job in place
""")
        out = _sh("sbatch", "--parsable", "--requeue", "-N", str(nodes),
                  "--gres=gpu:h100:8", "--comment", f"unicron-plan: weight=1 throughput={THROUGHPUT}",
                  "-o", str(self.work / "job-%j.out"), "-D", str(self.work), str(script))
        self.job = int(out.strip().split(";")[0])
        return self.job

    def start_node_agents(self) -> None:
        """One `unicron-plan watch-node --heartbeat` per node (node health), as a node's daemon would run."""
        self.stop_node_agents()
        self.node_agents = {}
        for node in _sh("sinfo", "-h", "-N", "-o", "%N").split():
            self.node_agents[node] = subprocess.Popen(
                [sys.executable, "-m", "unicron_plan.cli", "watch-node", "--heartbeat", "0.5", "--node", node,
                 "--coordinator", self.url, "--token-file", str(self.token_file)],
                stdout=subprocess.DEVNULL, stderr=open(self.work / f"node-{node}.log", "a"), cwd=ROOT)

    def start_agent(self) -> None:
        log = open(self.work / "agent.log", "a")
        self.agent = subprocess.Popen(
            [sys.executable, "-m", "unicron_plan.cli", "agent", "slurm", "--coordinator", self.url,
             "--token-file", str(self.token_file), "--interval", "1", "--state-dir", str(self.work / "agent"),
             "--verify-seconds", "90"], stdout=log, stderr=log, env=_env(), cwd=ROOT)

    def stop_node_agents(self) -> None:
        """Stop the node agents cleanly (SIGTERM: each says `closed`, so its node is not taken for lost)."""
        for proc in getattr(self, "node_agents", {}).values():
            if proc.poll() is None:
                proc.terminate()
        for proc in getattr(self, "node_agents", {}).values():
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(20)

    def stop(self) -> None:
        self.stop_node_agents()
        if self.agent is not None and self.agent.poll() is None:
            self.agent.terminate()
            try:
                self.agent.wait(20)
            except subprocess.TimeoutExpired:
                self.agent.kill()
        if self.job:
            _sh("scancel", str(self.job), check=False)

    # -- what the job does
    def progress(self) -> list[dict]:
        path = self.work / f"progress-{self.job}.log"
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []

    def ranks(self) -> dict[int, dict]:
        out = {}
        for p in self.work.glob(f"pid-{self.job}-*"):
            out[int(p.name.rsplit("-", 1)[1])] = json.loads(p.read_text())
        return out

    def wait_training(self, after: float, steps: int = 10, timeout: float = 240) -> list[dict]:
        """Progress lines written after ``after`` (wall clock), at least ``steps`` of them."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            lines = [p for p in self.progress() if p["t"] > after]
            if len(lines) >= steps:
                return lines
            time.sleep(0.5)
        raise AssertionError(f"the job does not train (after {after}): {self.progress()[-3:]}\n"
                             f"{_sh('squeue', check=False)}\n{self.agent_log()}")

    def agent_log(self) -> str:
        p = self.work / "agent.log"
        return p.read_text()[-3000:] if p.exists() else ""

    # -- what the coordinator saw
    def history(self) -> list[dict]:
        r = httpx.get(self.url + "/v1/history", params={"since": self.since}, headers=self.headers, timeout=30)
        return r.json()["entries"]

    def wait_entry(self, pred, timeout: float = 120) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for e in self.history():
                if pred(e):
                    return e
            time.sleep(0.2)
        raise AssertionError(f"no such history entry: {self.history()[-6:]}\n{self.agent_log()}")

    def wait_in_sync(self, timeout: float = 180) -> None:
        """Until the coordinator has the job, nothing is pending, and its ranks run on the coordinator's nodes."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            inst = httpx.get(self.url + "/v1/state", headers=self.headers, timeout=30).json()["instance"]
            job = next((j for j in (inst or {}).get("jobs", []) if j["id"] == str(self.job)), None)
            ranks = self.ranks()
            if job and not inst.get("event") and job["current"]["gpus"] and ranks \
                    and {r["node"] for r in ranks.values()} == set(job["current"]["nodes"]) \
                    and len(ranks) == 2 * len(job["current"]["nodes"]):
                return
            time.sleep(0.5)
        raise AssertionError(f"not in sync: {self.agent_log()}")

    def revision(self) -> int:
        entries = httpx.get(self.url + "/v1/history", headers=self.headers, timeout=30).json()["entries"]
        return entries[-1]["revision"] if entries else 0


def _seconds(iso: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def _launcher_exits(sc: Scenario) -> list[float]:
    path = sc.work / f"mpirun-exit-{sc.job}"
    return [float(x) for x in path.read_text().split()] if path.exists() else []


def _fault(sc: Scenario, inject, kind: str, severity: str, action: str) -> dict:
    """Inject, then wait for the incident and its action; the job must train on from its checkpoint.
    Also notes when the MPI launcher saw the ranks fail, if it did before the restart."""
    sc.since = sc.revision()
    before = sc.ranks()
    exits_before = len(_launcher_exits(sc))
    baseline: dict = {}
    t0 = time.time()
    detail = inject(before)

    entry = sc.wait_entry(lambda e: e["type"] == "signal" and e["body"]["kind"] == kind)
    sig = entry["body"]
    assert (sig["severity"], sig["action"]) == (severity, action), sig
    assert str(sig["job"]) == str(sc.job) or (sig["job"] is None and str(sc.job) in sig["jobs"]), sig
    detected = _seconds(sig["detected_at"]) - t0
    if action == "restart":
        done = sc.wait_entry(lambda e: e["type"] == "action" and e["body"]["job"] == str(sc.job), timeout=180)
        assert done["body"]["outcome"] == "done", done
        assert any(c[:2] == ["scontrol", "requeuehold"] for c in done["body"]["commands"])
    else:
        sc.wait_entry(lambda e: e["type"] == "plan" and e["revision"] > entry["revision"])
        # the plan carried out: the incident's own, or (when Slurm did not reach it within the agent's
        # pass) the agent's re-plan of the same failure from what Slurm showed; either drains the node
        applied = sc.wait_entry(lambda e: e["type"] == "apply" and e["revision"] > entry["revision"], timeout=240)
        sig["plan_id"] = applied["body"]["plan_id"]
        plan = httpx.get(f"{sc.url}/v1/plans/{sig['plan_id']}", headers=sc.headers, timeout=30).json()
        assert sig["node"] in (plan.get("drained_nodes") or []), plan
    sc.wait_training(after=time.time(), steps=5)
    lines = [line for line in sc.progress() if line["t"] > t0]
    after = sc.ranks()
    resumed = min(r["start"] for r in after.values())
    assert all(r["pid"] != before.get(k, {}).get("pid") for k, r in after.items())  # new processes
    restart = max(k for k, line in enumerate(lines) if line["step"] == resumed + 1)  # from the last checkpoint
    assert resumed > 0 and resumed % 5 == 0
    assert [line["step"] for line in lines[restart:]] == list(range(resumed + 1, resumed + 1 + len(lines) - restart))
    exits = _launcher_exits(sc)[exits_before:]
    if exits:
        baseline["launcher_seconds"] = exits[0] - t0
    result = {"kind": kind, "detected_seconds": detected, "nodes": sorted({r["node"] for r in after.values()}),
              "signal": sig, "observed_seconds": time.time() - t0, **baseline}
    print(f"{kind}: {severity} {action}, detected after {detected:.2f} s, baseline {baseline}, resumed at step "
          f"{resumed} on {result['nodes']} ({detail})", flush=True)
    if os.environ.get("E2E_RESULTS"):
        with open(os.environ["E2E_RESULTS"], "a") as fh:
            fh.write(json.dumps({k: v for k, v in result.items() if k != "signal"}) + "\n")
    return result


def _write(sc: Scenario, rank: int, message: str):
    def inject(ranks):
        (sc.work / f"inject-{sc.job}-{rank}").write_text(message)
        return f"rank {rank} raises {message!r}"
    return inject


def _signal(sig: int, rank: int):
    def inject(ranks):
        os.kill(ranks[rank]["pid"], sig)
        return f"{signal.Signals(sig).name} to rank {rank} (pid {ranks[rank]['pid']})"
    return inject


def _node_dies(sc: Scenario):
    """A node other than the job's first (where its batch script runs) dies: its slurmd, its node agent,
    and the job's processes on it (the ranks, their `watch` and MPI's daemon) are killed at once."""
    def inject(ranks):
        first = sorted({r["node"] for r in ranks.values()})[0]
        node = next(r["node"] for _, r in sorted(ranks.items()) if r["node"] != first)
        ours = [r["pid"] for r in ranks.values() if r["node"] == node]
        wrappers = [_parent(pid) for pid in ours]  # each rank's `watch` (killed first: a dead node reports nothing)
        pids = wrappers + sorted({_parent(pid) for pid in wrappers}) + ours  # then MPI's daemon, then the ranks
        slurmd = int((TESTBED / "run" / f"slurmd-{node}.pid").read_text())
        sc.node_agents[node].kill()
        for pid in [slurmd, *pids]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        sc.dead_node = node
        return f"node {node}: slurmd (pid {slurmd}), its node agent and the job's processes {pids} killed"
    return inject


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _restore_testbed() -> None:
    """Start the slurmd the test killed again (the testbed's `up` is idempotent) and put back in service
    the nodes the plans drained."""
    env = _env()
    configured = TESTBED / "etc" / "configured"  # "nodes=8/h100 extra=4/a100 rack_size=4": the same layout again
    if configured.exists():
        got = dict(item.split("=", 1) for item in configured.read_text().split())
        env.update(zip(("NODES", "GPU_TYPE"), got["nodes"].split("/")))
        env.update(zip(("EXTRA_NODES", "EXTRA_GPU_TYPE"), got["extra"].split("/")))
        env["RACK_SIZE"] = got["rack_size"]
    subprocess.run([str(ROOT / "scripts" / "slurm-testbed"), "up"], capture_output=True, env=env, timeout=300)
    for line in _sh("sinfo", "-h", "-N", "-o", "%N %T %E", check=False).splitlines():
        node, state, reason = (line.split(None, 2) + ["", ""])[:3]
        if "unicron-plan" in reason and ("drain" in state or "down" in state):
            _sh("scontrol", "update", f"NodeName={node}", "State=RESUME", check=False)
    # Slurm 22.05 can leave a requeued job's GPUs counted on an idle node; its controller recounts at start
    leaked = [n for n in _sh("sinfo", "-h", "-N", "-t", "idle", "-o", "%N", check=False).split()
              if re.search(r"AllocTRES=\S*gres/gpu", _sh("scontrol", "show", "node", n, check=False))]
    pidfile = TESTBED / "run" / "slurmctld.pid"
    if leaked and pidfile.exists():
        os.kill(int(pidfile.read_text()), signal.SIGTERM)
        time.sleep(2)
        subprocess.run([str(ROOT / "scripts" / "slurm-testbed"), "up"], capture_output=True, env=env, timeout=300)


def _round(sc: Scenario) -> None:
    """Every fault once, the testbed restored after (for the RQ1 samples of benchmarks/inband_rq1.py)."""
    _fault(sc, _write(sc, 1, "CUDA error: unspecified launch failure"), "cuda_error", "SEV2", "restart")
    _fault(sc, _signal(signal.SIGKILL, 2), "exited_abnormally", "SEV2", "restart")
    _fault(sc, _signal(signal.SIGSTOP, 3), "task_hang", "SEV2", "restart")
    _fault(sc, _write(sc, 2, "CUDA error: uncorrectable ECC error encountered"), "ecc_error", "SEV1", "reconfigure")
    sc.wait_in_sync()
    _fault(sc, _node_dies(sc), "lost_connection", "SEV1", "reconfigure")
    _restore_testbed()
    sc.start_node_agents()
    sc.wait_in_sync()


def test_faults_are_detected_classified_acted_on_and_training_goes_on(testbed, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    os.chmod(tmp_path, 0o755)
    with Server(tmp_path / "state", "--no-access-log", token=TOKEN) as srv:
        sc = Scenario(work, srv.url)
        try:
            sc.submit()
            sc.start_agent()
            sc.start_node_agents()
            sc.wait_entry(lambda e: e["type"] == "cluster")
            sc.wait_in_sync()
            sc.wait_training(after=time.time(), steps=12)
            for _ in range(int(os.environ.get("E2E_ROUNDS", "1")) - 1):  # more rounds: RQ1 samples
                _round(sc)
            start = sc.revision()
            results = [
                _fault(sc, _write(sc, 1, "CUDA error: unspecified launch failure"), "cuda_error", "SEV2", "restart"),
                _fault(sc, _signal(signal.SIGKILL, 2), "exited_abnormally", "SEV2", "restart"),
                _fault(sc, _signal(signal.SIGSTOP, 3), "task_hang", "SEV2", "restart"),
            ]
            ecc_rank, ecc_node = next((k, r["node"]) for k, r in sorted(sc.ranks().items()) if k >= 2)
            ecc = _fault(sc, _write(sc, ecc_rank, "CUDA error: uncorrectable ECC error encountered"),
                         "ecc_error", "SEV1", "reconfigure")
            plan = httpx.get(f"{sc.url}/v1/plans/{ecc['signal']['plan_id']}", headers=sc.headers, timeout=30).json()
            planned = next(set(j["nodes"]) for j in plan["jobs"] if j["id"] == str(sc.job))
            assert ecc["signal"]["node"] == ecc_node and ecc_node not in planned
            assert set(ecc["nodes"]) == planned  # trains on the plan's nodes
            results.append(ecc)
            # the ranks that stopped together were one incident (the others' reports: duplicates)
            signals = [e["body"] for e in httpx.get(sc.url + "/v1/history", params={"since": start}, headers=sc.headers,
                                                    timeout=30).json()["entries"] if e["type"] == "signal"]
            assert [s["kind"] for s in signals] == ["cuda_error", "exited_abnormally", "task_hang", "ecc_error"]
            assert signals[2]["ranks"] and set(signals[2]["ranks"]) <= set(range(len(sc.ranks())))
            sc.wait_in_sync()
            dead = _fault(sc, _node_dies(sc), "lost_connection", "SEV1", "reconfigure")
            assert dead["signal"]["node"] not in dead["nodes"]
        finally:
            sc.stop()
            _restore_testbed()
