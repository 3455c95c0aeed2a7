"""The in-band agent and a SEV1 incident's isolated node, without a Slurm (a real coordinator, Slurm's
documents from the 22.05 fixtures): the node the coordinator took out on its own stays out.

The agent's in-band pass reads the coordinator's history, then its Slurm pass reads Slurm and the
coordinator's state. An incident recorded between the two reads shows in the state as a pending
failure whose plan the in-band pass has not seen; Slurm still shows the node in service. Re-planned
from Slurm's view at that point, the node was back in service and the plan carried out was not the
incident's (on the testbed: the ECC or the lost node's plan never carried out, a stale plan applied)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from servers import Server

from unicron_plan.client import PlannerClient
from unicron_plan.integrations.agent import AgentConfig, SlurmCli, with_isolated
from unicron_plan.integrations.restart import InBandAgent, act_on_signals

REAL = Path(__file__).parent / "fixtures" / "slurm-22.05"


def _documents() -> tuple[dict, dict]:
    """The fixture's cluster with every node in service (n7 keeps the GPUs of the job it runs outside the plan)."""
    nodes = json.loads((REAL / "sinfo.json").read_text())
    for n in nodes["nodes"]:
        if n["name"] == "n7":
            n["state_flags"], n["reason"] = [], ""
    return nodes, json.loads((REAL / "squeue.json").read_text())


class Slurm(SlurmCli):
    """Slurm's documents as given; ``during_read`` runs inside the next read (what happens meanwhile).
    No command is expected: each one is recorded and refused."""

    def __init__(self):
        super().__init__()
        self.nodes, self.jobs = _documents()
        self.during_read = None
        self.calls: list[list[str]] = []

    def read(self):
        if self.during_read is not None:
            happen, self.during_read = self.during_read, None
            happen()
        return copy.deepcopy(self.nodes), copy.deepcopy(self.jobs)

    def run(self, argv, record=False):
        self.calls.append(list(argv))
        raise RuntimeError(f"no Slurm command expected in this pass: {argv}")


def _ecc(node: str, job: str) -> dict:
    return {"job": job, "rank": 2, "node": node, "kind": "ecc_error",
            "evidence": "RuntimeError: CUDA error: uncorrectable ECC error encountered"}


def _setup(tmp_path, srv, mode: str):
    client = PlannerClient(srv.url)
    slurm = Slurm()
    agent = InBandAgent(client, AgentConfig(mode=mode, state_dir=tmp_path / "agent", verify_seconds=1),
                        cli=slurm, log=lambda rec: None)
    assert agent.run_once()["status"] == "in-sync"   # the first pass uploads what Slurm shows
    assert [e.type for e in client.history()] == ["cluster"] and not slurm.calls
    return client, slurm, agent


@pytest.mark.parametrize("node,job", [("n2", "1"), ("n5", "2")])
def test_an_incident_recorded_between_the_agents_reads_is_not_replanned_from_slurm(tmp_path, node, job):
    """The incident comes while the pass reads Slurm (after its in-band part read the history): the
    pass leaves it to the next one, whose in-band part carries out the incident's own plan, which
    drains the node. Nothing is uploaded and no command runs meanwhile."""
    with Server(tmp_path / "state") as srv:
        client, slurm, agent = _setup(tmp_path, srv, "apply")
        opened = []
        slurm.during_read = lambda: opened.extend(client.post_signals([_ecc(node, job)])["incidents"])
        result = agent.run_once()
        assert len(opened) == 1 and opened[0]["node"] == node and opened[0]["plan_id"]
        assert result["status"] == "awaiting-plan", result
        assert not slurm.calls
        after = [e.type for e in client.history(since=opened[0]["revision"])]
        assert after == ["event", "plan"]   # no upload of Slurm's view, no other plan
        pending = client.state().instance.event
        assert pending.kind == "failure" and pending.failed_nodes == [node]
        # what the next pass's in-band part takes: the incident's plan, still applicable, draining the node
        plan_id = act_on_signals(client, slurm, tmp_path / "agent")
        assert plan_id == opened[0]["plan_id"]
        plan = client.get_plan(plan_id)
        assert plan.revision == client.health().revision and node in plan.drained_nodes
        assert all(node not in j.nodes for j in plan.jobs)


def test_a_replan_from_slurms_view_keeps_the_nodes_the_coordinator_isolated(tmp_path):
    """The incident's plan handled but not carried out by the in-band part (here: an agent that only
    proposes; with apply, a plan the state moved on from): the pass re-plans from what Slurm shows,
    and the node Slurm still shows in service fails again in that plan."""
    with Server(tmp_path / "state") as srv:
        client, slurm, agent = _setup(tmp_path, srv, "propose")
        incident = client.post_signals([_ecc("n5", "2")])["incidents"][0]
        result = agent.run_once()
        assert result["status"] == "proposed" and result["plan_id"] != incident["plan_id"], result
        assert [e.type for e in client.history(since=incident["revision"])] == ["event", "plan", "cluster",
                                                                                "event", "plan"]
        assert client.state().instance.event.failed_nodes == ["n5"]
        plan = client.get_plan(result["plan_id"])
        assert plan.drained_nodes == ["n5"] and all("n5" not in j.nodes for j in plan.jobs)
        assert not slurm.calls


def test_with_isolated_fails_the_isolated_nodes_as_the_importer_would():
    nodes = [{"id": f"n{k}", "gpus": 8, "failed_gpus": []} for k in range(1, 5)]
    nodes[3]["failed_gpus"] = list(range(8))   # held whole by work outside the plan: nothing to lose
    inst = {"cluster": {"nodes": nodes}}
    assert with_isolated(inst, set()) is None
    assert with_isolated(inst, {"n3", "n4", "x9"}) == {"kind": "failure", "failed_nodes": ["n3"], "failed_gpus": []}
    inst["event"] = {"kind": "failure", "failed_nodes": ["n2"],
                     "failed_gpus": [{"node": "n1", "gpu": 7}, {"node": "n3", "gpu": 7}]}
    assert with_isolated(inst, {"n3"}) == {"kind": "failure", "failed_nodes": ["n2", "n3"],
                                           "failed_gpus": [{"node": "n1", "gpu": 7}]}
    assert with_isolated(inst, {"n2"}) is inst["event"] and with_isolated(inst, set()) is inst["event"]


def test_a_fresh_agent_does_not_act_on_incidents_recorded_before_it(tmp_path):
    """Signal entries do not move the state's revision: an agent with an empty state directory starts
    after the newest history entry, not at the state's revision, so an incident handled (or not)
    before it existed is not carried out again (here: a SEV2 restart of a running job)."""
    with Server(tmp_path / "state") as srv:
        client, slurm, agent = _setup(tmp_path, srv, "apply")
        hang = {"job": "1", "rank": 0, "node": "n2", "kind": "cuda_error",
                "evidence": "RuntimeError: CUDA error: an illegal memory access was encountered"}
        incident = client.post_signals([hang])["incidents"][0]
        assert incident["action"] == "restart"
        health = client.health()
        assert health.history_revision == incident["revision"] > health.revision
        assert act_on_signals(client, slurm, tmp_path / "fresh-agent") is None
        assert not slurm.calls   # no requeue of job 1
        assert json.loads((tmp_path / "fresh-agent" / "signals.json").read_text())["since"] == incident["revision"]
