"""``unicron-plan import k8s|slurm`` and ``unicron-plan export k8s|slurm``."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Callable, Optional

import typer

import_app = typer.Typer(no_args_is_help=True, help="Build a v1 instance from a scheduler's own JSON.")
export_app = typer.Typer(no_args_is_help=True, help="Turn a v1 plan into a scheduler's own changes.")

_RUN = typer.Option(None, "--expected-run-seconds", help="D_run of the instance (or give --node-mtbf-hours).")
_MTBF = typer.Option(None, "--node-mtbf-hours", help="D_run from node MTBF (docs/format.md, cost.node_mtbf_hours).")
_TRANS = typer.Option(600.0, "--default-transition-seconds", help="D_trans of jobs that give none.")
_GPU_TYPE = typer.Option(None, "--gpu-type", help="PRODUCT=TYPE: map a GPU product (label or gres type) to a "
                                                  "GPU type of the library (repeatable; wins over the built-in table).")
_GPU_MAP = typer.Option(None, "--gpu-map", help='JSON file {"PRODUCT": "TYPE", ...}, same as --gpu-type.')
_OUT = typer.Option(None, "--out", "-o", help="Write here instead of stdout.")


def _common(expected_run_seconds, node_mtbf_hours, default_transition_seconds, gpu_type, gpu_map):
    from unicron_plan.integrations.common import Cost, load_gpu_map

    cost = Cost(expected_run_seconds=expected_run_seconds, node_mtbf_hours=node_mtbf_hours,
                default_transition_seconds=default_transition_seconds)
    cost.to_json()  # the option error comes before any file is read
    return cost, load_gpu_map(gpu_type or [], str(gpu_map) if gpu_map else None)


@import_app.command("k8s")
def import_k8s(nodes: Path = typer.Option(..., "--nodes", help="kubectl get nodes -o json"),
               pods: Path = typer.Option(..., "--pods", help="kubectl get pods -A -o json"),
               jobs: list[Path] = typer.Option(..., "--jobs", help="kubectl get pytorchjobs -A -o json (or a List "
                                                                   "mixing PyTorchJob, Volcano Job and DLRover "
                                                                   "ElasticJob); repeatable, one file per kind"),
               out: Optional[Path] = _OUT,
               expected_run_seconds: Optional[float] = _RUN, node_mtbf_hours: Optional[float] = _MTBF,
               default_transition_seconds: float = _TRANS,
               gpu_type: Optional[list[str]] = _GPU_TYPE, gpu_map: Optional[Path] = _GPU_MAP,
               rack_label: str = typer.Option("topology.kubernetes.io/zone", "--rack-label",
                                              help="Node label whose value is the rack."),
               cordon_reason: Optional[list[str]] = typer.Option(
                   None, "--cordon-reason", help="KEY[=VALUE]: a cordoned node carrying this label, annotation or "
                                                 "taint counts as failed (repeatable)."),
               name: str = typer.Option("kubernetes", "--name", help="Instance name.")):
    """Build a v1 instance from Kubernetes nodes, pods and training jobs."""
    from unicron_plan.integrations.k8s import import_k8s as run
    from unicron_plan.io import dumps, emit, read_json
    from unicron_plan.text import one_line

    cost, gmap = _common(expected_run_seconds, node_mtbf_hours, default_transition_seconds, gpu_type, gpu_map)
    warnings: list[str] = []
    doc = run(read_json(nodes), read_json(pods), [(read_json(j), str(j)) for j in jobs], cost=cost, gpu_map=gmap,
              rack_label=rack_label, cordon_reasons=cordon_reason or [], name=name, warnings=warnings)
    for line in warnings:
        typer.echo("warning: " + one_line(line), err=True)
    emit(dumps(doc), out)


@import_app.command("slurm")
def import_slurm(nodes: Path = typer.Option(..., "--nodes", help="scontrol show nodes --json (Slurm 23.02+) or sinfo --json (22.05)"),
                 jobs: Path = typer.Option(..., "--jobs", help="squeue --json"),
                 out: Optional[Path] = _OUT,
                 expected_run_seconds: Optional[float] = _RUN, node_mtbf_hours: Optional[float] = _MTBF,
                 default_transition_seconds: float = _TRANS,
                 gpu_type: Optional[list[str]] = _GPU_TYPE, gpu_map: Optional[Path] = _GPU_MAP,
                 rack_feature: Optional[str] = typer.Option(
                     None, "--rack-feature", help="Prefix of the node feature that names the rack (e.g. rack)."),
                 name: str = typer.Option("slurm", "--name", help="Instance name.")):
    """Build a v1 instance from Slurm nodes and jobs."""
    from unicron_plan.extras import require

    require("hostlist", "import slurm")
    from unicron_plan.integrations.slurm import import_slurm as run
    from unicron_plan.io import dumps, emit, read_json
    from unicron_plan.text import one_line

    cost, gmap = _common(expected_run_seconds, node_mtbf_hours, default_transition_seconds, gpu_type, gpu_map)
    warnings: list[str] = []
    doc = run(read_json(nodes), read_json(jobs), cost=cost, gpu_map=gmap, rack_feature=rack_feature, name=name,
              warnings=warnings)
    for line in warnings:
        typer.echo("warning: " + one_line(line), err=True)
    emit(dumps(doc), out)


class K8sFormat(str, Enum):
    json = "json"
    yaml = "yaml"
    kubectl = "kubectl"


@export_app.command("k8s")
def export_k8s(plan: Path = typer.Argument(..., help="Plan JSON (unicron-plan solve)."),
               jobs: list[Path] = typer.Option(..., "--jobs", help="The jobs file(s) given to import (repeatable)."),
               pods: Optional[Path] = typer.Option(None, "--pods", help="The pods file given to import: pods "
                                                                        "where the plan does not keep them are "
                                                                        "deleted (recommended)."),
               fmt: K8sFormat = typer.Option(K8sFormat.json, "--format", help="json or yaml (the change list) "
                                                                              "or kubectl (a shell script)."),
               nodes: Optional[Path] = typer.Option(None, "--nodes", help="The nodes file given to import: each "
                                                                          "plan node's GPU product is checked against "
                                                                          "the job's templates, and a Volcano job's "
                                                                          "placement label is removed from every node "
                                                                          "outside the plan."),
               gpu_type: Optional[list[str]] = _GPU_TYPE, gpu_map: Optional[Path] = _GPU_MAP,
               out: Optional[Path] = _OUT):
    """The changes (merge patches, new objects, pod deletions) that carry out PLAN on Kubernetes."""
    from unicron_plan.api import load_plan
    from unicron_plan.integrations.common import load_gpu_map
    from unicron_plan.integrations.k8s import export_k8s as run, render_kubectl
    from unicron_plan.io import dumps, emit, read_json

    gmap = load_gpu_map(gpu_type or [], str(gpu_map) if gpu_map else None)
    notes: list[str] = []
    changes = run(load_plan(plan), [(read_json(j), str(j)) for j in jobs], read_json(pods) if pods else None,
                  notes=notes, nodes_doc=read_json(nodes) if nodes else None, gpu_map=gmap)
    if fmt is K8sFormat.yaml:
        import yaml

        text = yaml.safe_dump(changes, sort_keys=False)
    elif fmt is K8sFormat.kubectl:
        text = render_kubectl(changes, notes)
    else:
        text = dumps(changes)
    for note in notes:
        typer.echo("note: " + " ".join(note.split()), err=True)
    emit(text, out)


@export_app.command("slurm")
def export_slurm(plan: Path = typer.Argument(..., help="Plan JSON (unicron-plan solve)."),
                 jobs: Path = typer.Option(..., "--jobs", help="The squeue --json file given to import."),
                 nodes: Optional[Path] = typer.Option(None, "--nodes", help="The nodes file given to import "
                                                                            "(drained nodes left alone; without it the "
                                                                            "script reads each reason when it runs)."),
                 reason: str = typer.Option("unicron-plan: failed", "--reason", help="Added to the reason of the nodes the plan drains."),
                 gpu_type: Optional[list[str]] = _GPU_TYPE, gpu_map: Optional[Path] = _GPU_MAP,
                 out: Optional[Path] = _OUT):
    """The scontrol commands that carry out PLAN on Slurm, as a shell script (each step guarded
    by the cluster's state, so that running it again is harmless)."""
    from unicron_plan.api import load_plan
    from unicron_plan.extras import require

    require("hostlist", "export slurm")
    from unicron_plan.integrations.common import load_gpu_map
    from unicron_plan.integrations.slurm import export_slurm as run, render_script
    from unicron_plan.io import emit, read_json

    gmap = load_gpu_map(gpu_type or [], str(gpu_map) if gpu_map else None)
    steps = run(load_plan(plan), read_json(jobs), read_json(nodes) if nodes else None, reason=reason, gpu_map=gmap)
    emit(render_script(steps), out)


agent_app = typer.Typer(no_args_is_help=True, help="Close the loop: keep a scheduler at the coordinator's plans.")


class AgentMode(str, Enum):
    apply = "apply"
    propose = "propose"


@agent_app.command("slurm")
def agent_slurm(coordinator: str = typer.Option(..., "--coordinator", help="URL of unicron-plan serve."),
                token_file: Optional[Path] = typer.Option(None, "--token-file", help="File holding the bearer token."),
                interval: float = typer.Option(30.0, "--interval", min=0.5, max=86400.0,
                                               help="Seconds between passes."),
                mode: AgentMode = typer.Option(AgentMode.apply, "--mode", help="apply: carry plans out; propose: "
                                               "write the plan and its script under --state-dir, change nothing."),
                once: bool = typer.Option(False, "--once", help="One pass, its result as JSON on stdout, then exit "
                                          "(0 done, 1 drift it could not fix, 2 an operational error)."),
                approve: Optional[str] = typer.Option(None, "--approve", metavar="PLAN_ID",
                                                      help="Approve the pending proposal PLAN_ID (of --mode propose): "
                                                           "the next pass carries it out."),
                state_dir: Path = typer.Option(Path("unicron-agent"), "--state-dir",
                                               help="Journal and proposals (created 0700)."),
                expected_run_seconds: Optional[float] = _RUN, node_mtbf_hours: Optional[float] = _MTBF,
                default_transition_seconds: float = _TRANS,
                gpu_type: Optional[list[str]] = _GPU_TYPE, gpu_map: Optional[Path] = _GPU_MAP,
                rack_feature: Optional[str] = typer.Option("rack", "--rack-feature",
                                                           help="Prefix of the node feature that names the rack."),
                reason: str = typer.Option("unicron-plan: failed", "--reason",
                                           help="Added to the reason of the nodes the plan drains."),
                verify_seconds: float = typer.Option(60.0, "--verify-seconds", min=1.0, max=3600.0,
                                                     help="How long to wait for Slurm to reach the plan.")):
    """Keep Slurm at the coordinator's plans: events in, scontrol out, apply confirmed."""
    import httpx

    from unicron_plan.client import PlannerClient, PlannerError, ReplyError
    from unicron_plan.errors import InvalidInstanceError
    from unicron_plan.integrations.agent import AgentConfig, AgentError
    from unicron_plan.integrations.restart import InBandAgent as SlurmAgent  # acts on in-band incidents too
    from unicron_plan.io import dumps

    if expected_run_seconds is None and node_mtbf_hours is None:
        expected_run_seconds = 36000.0
    cost, gmap = _common(expected_run_seconds, node_mtbf_hours, default_transition_seconds, gpu_type, gpu_map)
    if not coordinator.startswith(("http://", "https://")):
        raise InvalidInstanceError("--coordinator", f"{coordinator[:80]!r} is not an http:// or https:// URL")
    if not reason.isprintable():   # refused before anything is posted (it would name a drain's reason)
        raise InvalidInstanceError("--reason", "holds a control character")
    token = None
    if token_file:
        try:
            token = token_file.read_text().strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise InvalidInstanceError("--token-file", f"{token_file}: cannot read: "
                                                       f"{getattr(exc, 'strerror', None) or exc}") from None
        if not token or not token.isprintable():
            raise InvalidInstanceError("--token-file", f"{token_file}: empty, or not one printable line")
    cfg = AgentConfig(mode=mode.value, state_dir=state_dir, cost=cost, gpu_map=gmap, rack_feature=rack_feature,
                      reason=reason, verify_seconds=verify_seconds, pass_seconds=None if once else interval)
    try:
        with PlannerClient(coordinator, token=token, timeout=min(60.0, max(interval, 5.0))) as client:
            agent = SlurmAgent(client, cfg)
            if approve is not None:
                typer.echo(dumps(agent.approve(approve)))
            elif once:
                result = agent.run_once()
                typer.echo(dumps(result))
                if result.get("status") == "not-reached":
                    raise typer.Exit(1)
            else:
                agent.run_forever(interval)
    except AgentError as exc:
        raise InvalidInstanceError("", f"agent: {exc}") from None
    except PlannerError as exc:
        raise InvalidInstanceError("--coordinator", f"{coordinator[:80]} answered HTTP {exc.status}: "
                                                    f"{str(exc.message)[:200]}") from None
    except ReplyError as exc:
        raise InvalidInstanceError("--coordinator", f"{coordinator[:80]}: {exc}") from None
    except httpx.HTTPError as exc:
        raise InvalidInstanceError("--coordinator", f"{coordinator[:80]}: {type(exc).__name__}: "
                                                    f"{str(exc)[:200]}") from None


def register(app: typer.Typer, wrap: Callable) -> None:
    """Add ``import``, ``export`` and ``agent`` to ``app``, each command wrapped by ``wrap`` (exit codes)."""
    for sub in (import_app, export_app, agent_app):
        for cmd in sub.registered_commands:
            cmd.callback = wrap(cmd.callback)
    app.add_typer(import_app, name="import")
    app.add_typer(export_app, name="export")
    app.add_typer(agent_app, name="agent")
