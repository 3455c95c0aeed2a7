"""Slurm: nodes and jobs in (``sinfo --json``/``squeue --json`` of Slurm 22.05, openapi
v0.0.37-v0.0.38, or ``scontrol show nodes --json``/``squeue --json`` of 23.02 and later,
data_parser v0.0.39-v0.0.42; the version is read from the document), ``scontrol``
commands out.

Slurm gives a job the same GPUs on every node it runs on, and training jobs
take whole nodes, so each planned job gets ``tp`` = the GPUs of its nodes and
the plan moves whole nodes. A job is planned when its comment starts with
``unicron-plan:`` and the planner may move it (:meth:`SlurmJob.not_planned`); other jobs keep
their GPUs. docs/integrations.md lists every field and rule.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from pydantic import Field, field_validator, model_validator

from unicron_plan.errors import InvalidInstanceError
from unicron_plan.text import escape
from unicron_plan.integrations.common import (Cost, GpuMap, JobState, Lenient, NodeState, build_instance,
                                              check_plan_shape, items_of, job_types, normalize_product, object_error, parse_object,
                                              parse_plan_fields)

#: Slurm's own verdicts that a node is out of service (base states and flags of 22.05, and the
#: flag forms of 23.02 and later). Nothing else makes a node failed: not the GPUs that work the
#: planner does not manage holds (they are simply not free), not COMPLETING. NOT_RESPONDING alone
#: (and UNKNOWN) is not a verdict: Slurm flags a node that missed a ping, and every node after
#: slurmctld restarts until its slurmd registers again; a node that stays silent is set DOWN by
#: Slurm after SlurmdTimeout, and that is the verdict the agent acts on.
FAILED_FLAGS = frozenset({"DOWN", "DRAIN", "DRAINED", "DRAINING", "FAIL", "FAILING", "POWER_DRAIN",
                          "INVALID_REG", "FUTURE"})
#: A node out of use for a while by plan of the operator or Slurm, not a failure: powered off (or
#: being powered off) by power saving, rebooting or due to reboot, in a maintenance reservation.
#: Its GPUs are withheld from the plan (as those of work the planner does not manage), never
#: drained: it comes back by itself. RESERVED (a node in an active reservation) is withheld too,
#: unless a planned job runs on it or is in its reservation (see :func:`_withheld`).
WITHHELD_FLAGS = frozenset({"POWER_DOWN", "POWERED_DOWN", "POWERING_DOWN", "REBOOT", "REBOOT_REQUESTED",
                            "REBOOT_ISSUED", "MAINT", "MAINTENANCE"})
HOLDING = frozenset({"RUNNING", "SUSPENDED", "COMPLETING", "CONFIGURING", "STOPPED", "RESIZING"})
PLANNED = frozenset({"RUNNING", "SUSPENDED", "CONFIGURING", "PENDING"})
HELD_REASONS = frozenset({"JOBHELDUSER", "JOBHELDADMIN"})
#: The ``state_reason`` of a pending job that waits only for nodes or its turn, so the planner may
#: place it: not evaluated yet (None), Resources, Priority, and its required nodes being unavailable
#: or down (ReqNodeNotAvail, NodeDown: a placed job whose nodes were taken or failed). A pending
#: job waiting for anything else (Dependency, BeginTime, a hold, a reservation, partition, QOS or
#: association limits, licenses...) is not planned: placing it would free nodes it cannot use, or
#: override what its owner asked for.
STARTABLE_REASONS = frozenset({"NONE", "RESOURCES", "PRIORITY", "REQNODENOTAVAIL", "NODEDOWN"})
#: Reasons of a requeued job (``restart_cnt`` > 0) waiting only for Slurm's requeue delay or for a
#: placement: Slurm sets a requeued job's begin time about two minutes ahead (after a node failure, or
#: the planner's own requeue), cleans up its previous run, and shows BadConstraints when the nodes a
#: move asked for are no longer to be had (the planner places it again).
REQUEUED_REASONS = frozenset({"BEGINTIME", "CLEANING", "BADCONSTRAINTS"})
#: The reason Slurm shows (``state_description``) for a job requeued with ``scontrol requeuehold``,
#: as the planner suspends a running job: a hold that is the planner's own.
REQUEUE_HELD = "requeued in held state"
COMMENT_PREFIX = "unicron-plan:"
#: Longest job comment read as planning fields (a longer one is refused, naming the job).
MAX_COMMENT_CHARS = 65536
MAX_HOSTS = 100_000
MAX_HOSTLIST_CHARS = 1_000_000
#: Seconds between the last release and the StartTime=now of the placed jobs (see Step).
START_PAUSE = 2
#: A node name Slurm accepts in a hostlist and that no shell reads as anything but a word:
#: letters, digits, ``.``, ``_`` and ``-``, not starting with ``-`` or ``.``.
NODE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,252}")
#: The data_parser / openapi versions whose documents this reader was checked against.
KNOWN_VERSIONS = ("v0.0.37", "v0.0.38", "v0.0.39", "v0.0.40", "v0.0.41", "v0.0.42")
#: The names of the reservations the agent makes around a move (``unicron-p17``): a node in one is
#: not another team's.
RESERVATION_PREFIX = "unicron-"


class UnboundGpus(InvalidInstanceError):
    """A planned job holds nodes without all their GPUs. ``asked``: it asks for whole nodes
    (``--gres=gpu:TYPE:N``, N a node's GPUs), so Slurm did not bind what it asked for (reported
    after a slurmd crash: the job Slurm restarts runs with ``JOB_GRES=(null)``) and a restart binds
    them again; otherwise the submission itself is wrong."""

    def __init__(self, job_id: int, asked: bool, obj: str, path: str, message: str):
        self.job_id, self.asked = job_id, asked
        super().__init__(f"{obj} {path}", message)


def _asks_whole(job: "SlurmJob", node_gpus: int) -> bool:
    m = _TRES_GPU_COUNT.fullmatch(job.tres_per_node.strip())
    return bool(m and node_gpus and int(m.group(2)) == node_gpus)


def doc_version(doc: Any) -> Optional[str]:
    """The document's format version (``v0.0.38``, ``v0.0.40``...) from ``meta.plugin``:
    ``type: openapi/v0.0.38`` (Slurm 22.05) or ``data_parser: v0.0.40`` (23.02 and later);
    None when the document does not say."""
    meta = doc.get("meta") if isinstance(doc, dict) else None
    for name in ("plugin", "plugins"):   # "plugins" from 23.11
        plugin = meta.get(name) if isinstance(meta, dict) else None
        if not isinstance(plugin, dict):
            continue
        for key in ("data_parser", "type"):
            m = re.fullmatch(r"(?:openapi/|data_parser/)?(v\d+\.\d+\.\d+)", str(plugin.get(key) or "")[:40])
            if m:
                return m.group(1)
    return None


def refuse_errors(doc: Any, source: str) -> None:
    """InvalidInstanceError naming ``source`` when a document Slurm printed carries a non-empty ``errors``
    array: a failed read (Slurm 22.05 exits 0 with ``"jobs": []`` when slurmctld does not answer), which
    must never read as an empty cluster."""
    errors = doc.get("errors") if isinstance(doc, dict) else None
    if errors:
        first = errors[0] if isinstance(errors, list) else errors
        if isinstance(first, dict):
            first = first.get("description") or first.get("error") or first
        n = len(errors) if isinstance(errors, list) else 1
        raise InvalidInstanceError(f"{source} errors", f"Slurm reported {n} error(s): {str(first)[:200]}")


def check_document(doc: Any, source: str) -> None:
    """A document Slurm printed is one this reader knows and reports no error: Slurm 22.05 exits 0
    with an ``errors`` array (and ``"jobs": []``) when slurmctld does not answer, which must not
    read as an empty cluster. Raises InvalidInstanceError naming ``source``."""
    if not isinstance(doc, dict):
        raise InvalidInstanceError(source, "not a JSON object")
    refuse_errors(doc, source)
    version = doc_version(doc)
    if version is None:
        raise InvalidInstanceError(f"{source} meta", "no format version (meta.plugin.type or "
                                                     "meta.plugin(s).data_parser)")
    if version not in KNOWN_VERSIONS:
        raise InvalidInstanceError(f"{source} meta", f"format version {version} is not one this reader "
                                                     f"knows ({', '.join(KNOWN_VERSIONS)})")


def _as_list(value: Any) -> Any:
    """Slurm 22.05 (openapi v0.0.38) prints some lists as one comma-separated string."""
    if isinstance(value, str):
        return [v for v in value.split(",") if v]
    return value


def _number(value: Any) -> Any:
    """data_parser v0.0.40+ prints numbers as ``{"set": true, "number": N}``."""
    if isinstance(value, dict) and "number" in value:
        return value["number"] if value.get("set", True) and not value.get("infinite") else None
    return value


def check_node_name(name: str, obj: str, path: str) -> str:
    if not NODE_NAME.fullmatch(name):
        raise object_error(obj, path, f"{name[:80]!r} is not a Slurm node name (letters, digits, '.', '_', "
                                      "'-'; not starting with '-' or '.'; at most 253 characters)")
    return name


class SlurmNode(Lenient):
    name: str = Field(min_length=1)
    state: list[str]                                        # v0.0.39+: every flag; v0.0.38: the base state
    state_flags: list[str] = Field(default_factory=list)    # v0.0.38: DRAIN, NOT_RESPONDING...
    gres: str = ""
    features: list[str] = Field(default_factory=list)
    reason: str = ""
    partitions: list[str] = Field(default_factory=list)
    reservation: str = ""                                   # scontrol show nodes: the active reservation

    @field_validator("state", "state_flags", "features", "partitions", mode="before")
    @classmethod
    def _lists(cls, value: Any) -> Any:
        return _as_list(value)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not NODE_NAME.fullmatch(value):
            raise ValueError(f"{value[:80]!r} is not a Slurm node name (letters, digits, '.', '_', '-'; "
                             "not starting with '-' or '.')")
        return value

    @property
    def flags(self) -> set[str]:
        """Base state and flags, upper case, whichever field the version puts them in."""
        return {s.upper() for s in (*self.state, *self.state_flags)}


class SlurmJob(Lenient):
    job_id: int = Field(ge=0, le=2**32)
    name: str = ""
    user_name: str = ""
    job_state: list[str]
    state_reason: str = ""
    state_description: str = ""
    restart_cnt: Optional[int] = None
    partition: str = ""                # one or more, comma-separated
    resv_name: str = ""
    array_job_id: Optional[int] = None
    array_task_string: str = ""
    het_job_id: Optional[int] = None
    nodes: str = ""
    comment: str = ""
    tres_alloc_str: str = ""
    gres_detail: list[str] = Field(default_factory=list)
    tres_per_node: str = ""
    hold: Optional[bool] = None   # data_parser v0.0.40+; older: state_reason JobHeld*
    priority: Optional[int] = None
    tasks: Optional[int] = Field(default=None, ge=0, le=2**32)           # -n (or what Slurm derived)
    tasks_per_node: Optional[int] = Field(default=None, ge=0, le=2**32)  # --ntasks-per-node; 0: not given
    cpus_per_task: Optional[int] = Field(default=None, ge=0, le=2**32)
    node_count: Optional[int] = Field(default=None, ge=0, le=2**32)  # a requeued job: its last run's
    required_nodes: str = ""                                          # ReqNodeList (a placed job's)

    @model_validator(mode="before")
    @classmethod
    def _numbers(cls, data: Any) -> Any:
        if isinstance(data, dict):
            data = dict(data)
            for key in ("job_id", "priority", "tasks", "tasks_per_node", "node_count", "cpus_per_task",
                        "restart_cnt", "array_job_id", "het_job_id"):
                if key in data:
                    data[key] = _number(data[key])
        return data

    @field_validator("job_state", mode="before")
    @classmethod
    def _lists(cls, value: Any) -> Any:
        return _as_list(value)

    @field_validator("state_description", "partition", "resv_name", "array_task_string", mode="before")
    @classmethod
    def _text(cls, value: Any) -> Any:
        return "" if value is None else value

    @property
    def flags(self) -> set[str]:
        return {s.upper() for s in self.job_state}

    def tasks_for(self, nodes: int) -> Optional[int]:
        """NumTasks of the job's shape on ``nodes`` nodes: its tasks per node (``--ntasks-per-node``,
        or ``-n`` over its node count) times ``nodes``; None when the shape gives no per-node count.
        Slurm 22.05 keeps a job's node count when its task count asks for more nodes (it accepts
        ``NumNodes`` and ignores it), so a move changes both."""
        per = self.tasks_per_node or 0
        # A placed job's shape is its task count over its ReqNodeList (Slurm shows a requeued job's
        # node count of its last run, not the one it was given since); else over its node count.
        req = len(expand(self.required_nodes, f"Job {self.job_id}", "required_nodes")) if self.required_nodes else 0
        for count in (req, self.node_count):
            if not per and self.tasks and count and self.tasks % count == 0:
                per = self.tasks // count
        return per * nodes if per else None

    def cpus_for(self, tasks: Optional[int]) -> Optional[int]:
        """NumCPUs of ``tasks`` tasks. Slurm 22.05 keeps a requeued job's CPU count of its last run,
        and a job given fewer nodes than that run had is then never runnable (BadConstraints), so a
        move sets it with the task count."""
        return tasks * (self.cpus_per_task or 1) if tasks else None

    @property
    def held(self) -> bool:
        """Held on every version: ``hold`` (v0.0.40+) or a JobHeldUser/JobHeldAdmin reason."""
        if self.hold is not None:
            return self.hold
        return "PENDING" in self.flags and self.state_reason.upper() in HELD_REASONS

    def not_planned(self, own_holds: frozenset[str] | set[str] = frozenset()) -> Optional[str]:
        """Why a job with planning fields is not planned (None: it is): a job array or a
        heterogeneous job (a bare job id in ``scontrol`` acts on every task or component), or a
        pending job that waits for something other than nodes or its turn (see
        STARTABLE_REASONS). A held job is planned only when the hold is the planner's own: a job
        requeued held (``scontrol requeuehold``, as the export suspends a job) or one named in
        ``own_holds``."""
        if self.array_job_id or self.array_task_string:
            return f"a task of job array {self.array_job_id or self.job_id}"
        if self.het_job_id:
            return f"a component of heterogeneous job {self.het_job_id}"
        if "PENDING" not in self.flags:
            return None
        reason = self.state_reason.strip() or "None"
        if self.held:
            if REQUEUE_HELD in self.state_description or str(self.job_id) in own_holds:
                return None
            return f"pending, held ({reason})"
        key = reason.upper()
        if key in STARTABLE_REASONS or (key in REQUEUED_REASONS and (self.restart_cnt or 0) > 0):
            return None
        return f"pending, waiting for {reason}"


_GRES_ITEM = re.compile(r"([^,(]+)(\([^)]*\))?")
_GPU = re.compile(r"gpu(?::([^:]+))?:(\d+)")
_TRES_GPU = re.compile(r"gres[/:]gpu:([^:,]+):(\d+)")  # tres_per_node of a typed request
_TRES_GPU_COUNT = re.compile(r"gres[/:]gpu(?::([^:,]+))?:(\d+)")


def gpu_gres(text: str, obj: str, path: str) -> tuple[Optional[str], int]:
    """``gpu:h100:8(S:0-1),tmpsize:7T`` -> ("h100", 8); no GPU -> (None, 0)."""
    gtype, count = None, 0
    for m in _GRES_ITEM.finditer(text or ""):
        item = m.group(1).strip().strip(",")
        if not item.startswith("gpu"):
            continue
        g = _GPU.fullmatch(item)
        if not g:
            raise object_error(obj, path, f"{item!r} is not gpu:TYPE:COUNT")
        if g.group(1) is None:
            raise object_error(obj, path, f"{item!r} names no GPU type (expected gpu:TYPE:COUNT, "
                                          "e.g. gpu:h100:8)")
        if gtype is not None and gtype != g.group(1):
            raise object_error(obj, path, f"GPU types {gtype!r} and {g.group(1)!r} on one node are not supported")
        gtype, count = g.group(1), count + int(g.group(2))
    return gtype, count


def _split_top(text: str, obj: str, path: str) -> list[str]:
    """Split a hostlist at the commas outside brackets (one pass)."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
            if depth > 1:
                raise object_error(obj, path, f"{text[:80]!r} is not a hostlist: nested brackets")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise object_error(obj, path, f"{text[:80]!r} is not a hostlist: unbalanced brackets")
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth:
        raise object_error(obj, path, f"{text[:80]!r} is not a hostlist: unbalanced brackets")
    parts.append(text[start:])
    return [p for p in parts if p]


_RANGE = re.compile(r"(\d+)(?:-(\d+))?")


def _ranges(body: str, text: str, obj: str, path: str) -> list[tuple[int, int, int]]:
    """``001-004,7`` -> [(1, 4, 3), (7, 7, 1)] (low, high, zero-padded width)."""
    out = []
    for item in body.split(","):
        m = _RANGE.fullmatch(item)
        if not m:
            raise object_error(obj, path, f"{text[:80]!r} is not a hostlist: bad range {item[:20]!r}")
        lo_s, hi_s = m.group(1), m.group(2) or m.group(1)
        if len(lo_s) > 18 or len(hi_s) > 18:
            raise object_error(obj, path, f"{text[:80]!r} is not a hostlist: number too long")
        lo, hi = int(lo_s), int(hi_s)
        if hi < lo:
            raise object_error(obj, path, f"{text[:80]!r} is not a hostlist: range {item[:20]!r} runs backwards")
        out.append((lo, hi, len(lo_s) if lo_s.startswith("0") or len(lo_s) == len(hi_s) else 0))
    return out


def expand(text: str, obj: str, path: str) -> list[str]:
    """A Slurm hostlist (``gpu[001-004,007]``, ``a[1-2]b[3-4]``) as names, in bounded, linear work:
    the number of names is computed (and capped at MAX_HOSTS) before any is built."""
    if not text:
        return []
    if len(text) > MAX_HOSTLIST_CHARS:
        raise object_error(obj, path, f"hostlist of {len(text)} characters; at most {MAX_HOSTLIST_CHARS}")
    names: list[str] = []
    for part in _split_top(text, obj, path):
        pieces = re.split(r"\[([^\]]*)\]", part)   # literal, ranges, literal, ranges, ..., literal
        groups = [_ranges(body, text, obj, path) for body in pieces[1::2]]
        size = 1
        for g in groups:
            size *= sum(hi - lo + 1 for lo, hi, _ in g)
            if len(names) + size > MAX_HOSTS:
                raise object_error(obj, path, f"more than {MAX_HOSTS} hosts")
        partial = [pieces[0]]
        for g, literal in zip(groups, pieces[2::2]):
            values = [str(v).zfill(w) for lo, hi, w in g for v in range(lo, hi + 1)]
            partial = [p + v + literal for p in partial for v in values]
        names.extend(partial)
    if len(names) > MAX_HOSTS:
        raise object_error(obj, path, f"{len(names)} hosts; at most {MAX_HOSTS}")
    return names


def compress(names: list[str]) -> str:
    """Names as the compressed hostlist Slurm prints (``n[1-3,8]``)."""
    import hostlist

    return hostlist.collect_hostlist(list(names))


def job_gpus(job: SlurmJob, obj: str, nodes: int) -> int:
    """GPUs allocated to the job: ``gres/gpu=N`` of ``tres_alloc_str`` (needs
    AccountingStorageTRES=gres/gpu), else the sum of ``gres_detail`` (one entry per node),
    else ``tres_per_node`` times the node count (the same on every version)."""
    for part in job.tres_alloc_str.split(","):
        key, _, value = part.partition("=")
        if key.strip() == "gres/gpu":
            if not value.strip().isdigit():
                raise object_error(obj, "tres_alloc_str", f"gres/gpu={value!r} is not a whole number")
            return int(value)
    if job.gres_detail:
        return sum(gpu_gres(d, obj, f"gres_detail[{k}]")[1] for k, d in enumerate(job.gres_detail))
    per = _TRES_GPU_COUNT.fullmatch(job.tres_per_node.strip())
    if per and nodes:
        return int(per.group(2)) * nodes
    return 0


#: One word of a comment as a POSIX shell splits it (quotes and backslashes), matched in one
#: pass: the alternatives start with distinct characters, so no input makes the match backtrack.
_WORD = re.compile(r"""(?:[^\s'"\\]+|'[^']*'|"(?:[^"\\]|\\.)*"|\\.)+""", re.S)
_PART = re.compile(r"""[^\s'"\\]+|'([^']*)'|"((?:[^"\\]|\\.)*)"|\\(.)""", re.S)
_DQ_ESCAPE = re.compile(r'\\([\\"])')


def split_words(text: str, obj: str) -> list[str]:
    """``text`` split into words as ``shlex.split`` does (quotes, backslash escapes), in time
    linear in its length (``shlex`` takes quadratic time on long comments)."""
    words, pos = [], 0
    for m in _WORD.finditer(text):
        if text[pos:m.start()].strip():
            raise object_error(obj, "comment", "cannot split: no closing quotation")
        word = []
        for p in _PART.finditer(m.group(0)):
            if p.group(1) is not None:
                word.append(p.group(1))
            elif p.group(2) is not None:
                word.append(_DQ_ESCAPE.sub(r"\1", p.group(2)))
            elif p.group(3) is not None:
                word.append(p.group(3))
            else:
                word.append(p.group(0))
        words.append("".join(word))
        pos = m.end()
    if text[pos:].strip():
        raise object_error(obj, "comment", "cannot split: no closing quotation")
    return words


def plan_comment(comment: str, obj: str) -> Optional[dict[str, str]]:
    """``unicron-plan: weight=2 model=gpt3-13b ...`` -> the fields; another comment -> None."""
    text = comment.strip()
    if not text.startswith(COMMENT_PREFIX):
        return None
    if len(text) > MAX_COMMENT_CHARS:
        raise object_error(obj, "comment", f"{len(text)} characters; planning fields take at most {MAX_COMMENT_CHARS}")
    out: dict[str, str] = {}
    for tok in split_words(text[len(COMMENT_PREFIX):], obj):
        key, sep, value = tok.partition("=")
        if not sep or not key:
            raise object_error(obj, "comment", f"{tok!r} is not KEY=VALUE")
        if key in out:
            raise object_error(obj, f"comment ({key})", "given twice")
        out[key] = value
    return out


def parse_nodes(doc: Any) -> list[tuple[SlurmNode, str]]:
    refuse_errors(doc, "nodes")
    out = []
    for i, raw in enumerate(items_of(doc, "nodes", key="nodes")):
        nm = raw.get("name", f"nodes[{i}]") if isinstance(raw, dict) else f"nodes[{i}]"
        obj = f"Node {str(nm)[:80]}"
        out.append((parse_object(SlurmNode, raw, obj), obj))
    return out


def parse_jobs(doc: Any) -> list[tuple[SlurmJob, str]]:
    refuse_errors(doc, "jobs")
    out = []
    for i, raw in enumerate(items_of(doc, "jobs", key="jobs")):
        jid = _number(raw.get("job_id", f"jobs[{i}]")) if isinstance(raw, dict) else f"jobs[{i}]"
        obj = f"Job {str(jid)[:80]}"
        out.append((parse_object(SlurmJob, raw, obj), obj))
    return out


def job_nodes(job: SlurmJob, obj: str) -> list[str]:
    """The nodes a job holds now (none unless it runs, is suspended or completing)."""
    if not job.flags & HOLDING:
        return []
    return [check_node_name(n, obj, "nodes") for n in expand(job.nodes, obj, "nodes")]


def import_slurm(nodes_doc: Any, jobs_doc: Any, *, cost: Cost, gpu_map: GpuMap,
                 rack_feature: Optional[str] = None, name: str = "slurm",
                 on_bad_job: Optional[Callable[[str, InvalidInstanceError], None]] = None,
                 warnings: Optional[list[str]] = None,
                 own_holds: frozenset[str] | set[str] = frozenset()) -> dict:
    """Build the v1 instance from the nodes (``scontrol show nodes --json`` or, before
    Slurm 23.02, ``sinfo --json``) and the jobs (``squeue --json``).

    A planned job whose planning fields are invalid (its comment, or GPU types the comment and
    its request give that do not fit) is an error naming the job; given ``on_bad_job``, it is
    reported there instead (``on_bad_job(obj, error)``) and kept out of the instance as work the
    planner does not manage (its GPUs stay its own), so one wrong submission does not stop the
    planning of the others.

    A job with planning fields that the planner must not move (:meth:`SlurmJob.not_planned`: a job
    array or heterogeneous job, a pending job waiting for something other than nodes, a hold that
    is not the planner's own; ``own_holds``: ids of held jobs the caller held itself) is left out
    as work the planner does not manage, with a line in ``warnings``. Nodes out of use for a while
    (WITHHELD_FLAGS) or in another reservation, or in none of the planned jobs' partitions, are
    withheld (see :func:`_withheld`)."""
    states: dict[str, NodeState] = {}
    slurm_nodes: dict[str, SlurmNode] = {}
    for node, obj in parse_nodes(nodes_doc):
        product, gpus = gpu_gres(node.gres, obj, "gres")
        if gpus == 0:
            continue
        if node.name in states:
            raise object_error(obj, "name", "listed twice")
        rack = None
        if rack_feature:
            rack = next((f for f in node.features if f.startswith(rack_feature)), None)
        states[node.name] = NodeState(id=node.name, gpu_type=gpu_map.resolve(product, obj, "gres"), gpus=gpus,
                                      rack=rack, failed=bool(FAILED_FLAGS & node.flags))
        slurm_nodes[node.name] = node
    node_size: dict[str, set[int]] = {}
    node_types = {n: st.gpu_type for n, st in states.items()}
    for st in states.values():
        node_size.setdefault(st.gpu_type, set()).add(st.gpus)

    jobs: list[JobState] = []
    planned_jobs: list[SlurmJob] = []
    seen: set[str] = set()
    for job, obj in parse_jobs(jobs_doc):
        flags = job.flags
        try:
            fields = plan_comment(job.comment, obj)
        except InvalidInstanceError as exc:
            if on_bad_job is None:
                raise
            on_bad_job(obj, exc)
            fields = None
        if fields is not None and "COMPLETING" in flags and not flags & PLANNED:
            continue   # a planned job that ended: gone (job_exit); its nodes are free in seconds
        if fields is not None and flags & PLANNED:
            why = job.not_planned(own_holds)
            if why is not None:   # work the planner does not manage: its GPUs stay its own
                if warnings is not None:
                    warnings.append(f"{obj}: left out, {why}")
                fields = None
        holds = bool(flags & HOLDING)
        names = job_nodes(job, obj)
        total = job_gpus(job, obj, len(names)) if holds else 0
        for n in names:
            if n not in states and total:
                raise object_error(obj, "nodes", f"{n!r} is not a GPU node of the nodes file")
        names = [n for n in names if n in states]
        js = None
        if fields is not None and flags & PLANNED:
            jid = str(job.job_id)
            if jid in seen:
                raise object_error(obj, "job_id", "listed twice")
            seen.add(jid)
            try:
                js = _planned_job(job, obj, fields, holds, total, names, states, node_types, node_size, gpu_map)
            except UnboundGpus:
                raise
            except InvalidInstanceError as exc:
                if on_bad_job is None:
                    raise
                on_bad_job(obj, exc)
        if js is None:
            if holds and total:  # work the planner does not manage keeps its GPUs
                per = _per_node(job, names, total, obj)
                for n, g in zip(names, per):
                    states[n].reserved_gpus += g
            continue
        jobs.append(js)
        planned_jobs.append(job)
    for n, why in _withheld(slurm_nodes, states, jobs, planned_jobs).items():
        states[n].reserved_gpus = states[n].gpus
        if warnings is not None:
            warnings.append(f"Node {n}: withheld from the plan, {why}")
    return build_instance(name, list(states.values()), jobs, cost, gpu_map)


def _withheld(nodes: dict[str, SlurmNode], states: dict[str, NodeState], jobs: list[JobState],
              planned: list[SlurmJob]) -> dict[str, str]:
    """The nodes whose GPUs are not offered to the plan (none failed, none a planned job holds),
    each with why: a node out of use for a while (WITHHELD_FLAGS: powered down by power saving,
    due to reboot, in maintenance); one in an active reservation (RESERVED, or a node
    ``reservation``) that no planned job is in; and, when every planned job and the node name
    their partitions, one in none of the planned jobs' partitions. Slurm would not start a
    planned job there, and draining it would keep it out after it comes back."""
    used = {n for js in jobs for n in js.nodes}
    resv = {j.resv_name for j in planned if j.resv_name}
    parts: Optional[set[str]] = set()
    for j in planned:
        if not j.partition:
            parts = None
            break
        parts.update(p for p in j.partition.split(",") if p)
    out: dict[str, str] = {}
    for name, node in nodes.items():
        if states[name].failed or name in used:
            continue
        flags = node.flags
        if flags & WITHHELD_FLAGS:
            out[name] = f"out of use for a while ({', '.join(sorted(flags & WITHHELD_FLAGS))}), not failed"
        elif ("RESERVED" in flags or node.reservation) and not (node.reservation and node.reservation in resv):
            out[name] = f"in reservation {node.reservation!r} of other work" if node.reservation else \
                "in an active reservation of other work (RESERVED)"
        elif parts and node.partitions and not parts & set(node.partitions):
            out[name] = f"in no partition of a planned job (it is in {','.join(node.partitions)})"
    return out


def _planned_job(job: SlurmJob, obj: str, fields: dict[str, str], holds: bool, total: int, names: list[str],
                 states: dict[str, NodeState], node_types: dict[str, str], node_size: dict[str, set[int]],
                 gpu_map: GpuMap) -> JobState:
    """A planned job's state from its planning fields; raises InvalidInstanceError naming it."""
    jid = str(job.job_id)
    where = (lambda key: f"comment ({key})")
    pf = parse_plan_fields(fields, obj, where)
    js = JobState(id=jid, obj=obj, fields=pf, where=where, gpus=total, nodes=list(names))
    if holds and total:
        per = _per_node(job, names, total, obj)
        for n, g in zip(names, per):
            if g != states[n].gpus:
                raise UnboundGpus(job.job_id, _asks_whole(job, states[n].gpus), obj, "tres_alloc_str",
                                  f"{g} of node {n}'s {states[n].gpus} GPUs: planned Slurm jobs use whole nodes")
    elif holds:
        size = states[names[0]].gpus if names else 0
        raise UnboundGpus(job.job_id, _asks_whole(job, size), obj, "gres_detail",
                          "no GPU found (tres_alloc_str, gres_detail, tres_per_node): a planned job holds GPUs")
    _allowed_types(js, job, obj, gpu_map)
    types = job_types(js, node_types, set(node_size), gpu_map)
    sizes = set().union(*(node_size.get(t, set()) for t in types))
    if len(sizes) > 1:
        raise object_error(obj, "nodes", f"the {'/'.join(types)} nodes have {sorted(sizes)} GPUs; whole-node "
                                         "planning needs one node size for the GPU types of a job")
    if sizes:
        js.granularity = next(iter(sizes))
    return js


def _allowed_types(js: JobState, job: SlurmJob, obj: str, gpu_map: GpuMap) -> None:
    """The GPU types a planned job may run on: its comment's ``gpu-types=h100,a100``, else the type
    of a typed gres request (``--gres=gpu:h100:8``), else any (the type it runs on now, kept).

    Slurm 22.05 does not change the GPU type of a pending job's request: after ``scontrol update
    JobId=ID TresPerNode=gres:gpu:a100:8`` (or ``Gres=gpu:a100:8``) of a job submitted with
    ``gpu:h100:8`` the job is never runnable (BadConstraints, checked on the testbed), and an
    untyped request cannot be updated to a typed one. So a job that may change type requests
    untyped GPUs (``--gres=gpu:8``); the export moves it with its node list, and a matching-OR
    constraint on node features (``--constraint='[h100|a100]'``) keeps Slurm itself from mixing
    types when it schedules the job."""
    asked = _TRES_GPU.fullmatch(job.tres_per_node.strip())
    typed = gpu_map.resolve(asked.group(1), obj, "tres_per_node") if asked else None
    if js.fields.gpu_types is not None:
        js.allowed = [gpu_map.resolve(t, obj, js.where("gpu-types")) for t in js.fields.gpu_types]
        js.allowed_where = js.where("gpu-types")
        if len(set(js.allowed)) != len(js.allowed):
            raise object_error(obj, js.allowed_where, "two names of one GPU type")
        if typed is not None and js.allowed != [typed]:
            raise object_error(obj, "tres_per_node", (
                f"{job.tres_per_node!r} asks for {asked.group(1)} GPUs, but the comment allows "
                f"{', '.join(js.allowed)}: Slurm does not change a pending job's GPU type, so submit it "
                f"with untyped GPUs (--gres=gpu:{asked.group(2)}) and a matching-OR constraint "
                f"(--constraint='[{'|'.join(js.fields.gpu_types)}]')"))
    elif typed is not None:
        js.allowed, js.allowed_where = [typed], "tres_per_node"


def _per_node(job: SlurmJob, names: list[str], total: int, obj: str) -> list[int]:
    """GPUs of the job on each of its nodes: ``gres_detail`` when it has one entry per node,
    else an even split."""
    if len(job.gres_detail) == len(names) and names:
        per = [gpu_gres(d, obj, f"gres_detail[{k}]")[1] for k, d in enumerate(job.gres_detail)]
        if sum(per) == total:
            return per
    if not names or total % len(names):
        raise object_error(obj, "tres_alloc_str", f"{total} GPUs do not split evenly over {len(names)} nodes")
    return [total // len(names)] * len(names)


# --- export ------------------------------------------------------------------------------------

@dataclass
class Step:
    """One change of the export, applied only when the cluster is not there yet (so that
    applying the export again, or after a failure, is harmless):

    - ``drain``: drain ``node`` with ``reason`` (the node's own reason kept in front);
    - ``hold``: hold pending ``job`` that the plan keeps idle (so that Slurm does not start it
      on nodes the plan gives to another job);
    - ``shrink``: ``scontrol update JobId NodeList`` of a running job onto a subset of its nodes;
    - ``suspend``: requeue held a running ``job`` (hold it if pending);
    - ``requeue``: requeue held a running ``job`` that moves or grows to ``nodes``;
    - ``place``: once the job is no longer completing, ``NumNodes=N-N ReqNodeList=nodes`` and
      release;
    - ``start``: after a pause of START_PAUSE seconds, ``StartTime=now`` of a placed job that is
      still pending (a requeued job is not eligible for two minutes otherwise; started within
      the second its previous run's credential was revoked, slurmd refuses it and Slurm ends
      the job, hence the pause).
    """

    kind: str
    job: Optional[int] = None
    nodes: list[str] = field(default_factory=list)
    node: str = ""
    reason: str = ""
    ours: str = ""   # drain without a nodes file: the node's reason is read when the step runs, this added
    tasks: Optional[int] = None   # place: NumTasks of the job's shape on its new nodes (see SlurmJob.tasks_for)
    cpus: Optional[int] = None    # place: NumCPUs of those tasks (see SlurmJob.cpus_for)
    reservation: str = ""         # place: the reservation protecting the new nodes (the agent's)

    def commands(self) -> list[list[str]]:
        """The ``scontrol`` argument vectors of the step when it applies."""
        j = str(self.job)
        hl = compress(self.nodes) if self.nodes else ""
        if self.kind == "drain":
            return [["scontrol", "update", f"NodeName={self.node}", "State=DRAIN", f"Reason={self.reason}"]]
        if self.kind == "hold":
            return [["scontrol", "hold", j]]
        if self.kind == "shrink":
            return [["scontrol", "update", f"JobId={j}", f"NodeList={hl}"]]
        if self.kind in ("suspend", "requeue"):
            return [["scontrol", "requeuehold", j]]
        if self.kind == "place":
            n = len(self.nodes)
            extra = [f"NumTasks={self.tasks}"] if self.tasks else []
            extra += [f"NumCPUs={self.cpus}"] if self.cpus else []
            extra += [f"Reservation={self.reservation}"] if self.reservation else []
            return [["scontrol", "update", f"JobId={j}", f"NumNodes={n}-{n}", *extra, f"ReqNodeList={hl}"],
                    ["scontrol", "release", j]]
        if self.kind == "start":
            return [["scontrol", "update", f"JobId={j}", "StartTime=now"]]
        raise ValueError(self.kind)


def append_reason(current: str, reason: str) -> str:
    """The operator's reason kept (control characters escaped: none reaches a command), ours
    added (once)."""
    current = escape(current).strip()
    if not current or current == reason or current.endswith("; " + reason):
        return reason if not current else current
    return f"{current}; {reason}"


def _check_type(job: SlurmJob, obj: str, pj, planned: list[str], nodes: dict[str, SlurmNode],
                gpu_map: GpuMap) -> None:
    """A job moves to another GPU type by its node list alone, so its request must not name
    another type (Slurm does not change it, see :func:`_allowed_types`), and with the nodes file
    every planned node's gres is of the plan's type."""
    if pj.gpu_type is None:
        return
    asked = _TRES_GPU.fullmatch(job.tres_per_node.strip())
    if asked and gpu_map.table.get(normalize_product(asked.group(1)), pj.gpu_type) != pj.gpu_type:
        raise object_error(obj, "tres_per_node", f"{job.tres_per_node!r}: the plan moves the job to "
                                                 f"{pj.gpu_type}, and Slurm does not change the GPU type of a "
                                                 "job's request (submit it with untyped GPUs, --gres=gpu:N)")
    for name in planned:
        node = nodes.get(name)
        if node is not None:
            product = gpu_gres(node.gres, f"Node {name}", "gres")[0]
            if product is not None and gpu_map.table.get(normalize_product(product)) != pj.gpu_type:
                raise object_error(obj, "plan", f"node {name} has {product} GPUs; the plan runs the job on "
                                                f"{pj.gpu_type}")


#: Job states after which Slurm never runs the job again (base states of every version).
ENDED = frozenset({"BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY",
                   "PREEMPTED", "REVOKED", "TIMEOUT"})
#: The end of every refusal of a plan the cluster no longer matches.
STALE = "the cluster changed since the plan: import and plan again"


class StalePlan(InvalidInstanceError):
    """The plan no longer matches the cluster documents the export is given: nothing is done."""

    def __init__(self, field: str, what: str):
        super().__init__(field, f"{what}; {STALE}")


def _check_current(plan, jobs: dict[str, tuple[SlurmJob, str]], nodes: dict[str, SlurmNode], nodes_doc: Any,
                   by_agent: bool) -> None:
    """Refuse (:class:`StalePlan`) a plan the cluster documents no longer match: a change of a job
    that has ended or left squeue, a placement on a node that is now failed (FAILED_FLAGS), outside
    the job's partitions, in a reservation the job does not use, or held by a job the plan does not
    manage, and (unless ``by_agent``) a drain of a node Slurm shows in service again. ``by_agent``: a
    node whose reservation is unnamed (Slurm 22.05's flag RESERVED) is not refused (the agent's own).

    Jobs the plan keeps, or keeps idle, are not changed and not checked. Partitions and reservations are
    read as the documents give them (a node's ``reservation`` name is printed from Slurm 23.02 on), empty
    when they do not."""
    managed = {pj.id for pj in plan.jobs}
    holders: dict[str, str] = {}
    for jid, (job, obj) in jobs.items():
        if jid in managed:
            continue
        names = job_nodes(job, obj)
        if names and job_gpus(job, obj, len(names)):
            for n in names:
                holders.setdefault(n, jid)
    for k, pj in enumerate(plan.jobs):
        if pj.id not in jobs:
            raise StalePlan(f"plan jobs[{k}].id", f"job {pj.id!r} is not in the jobs file")
        if pj.action in ("keep", "idle") or pj.gpus == 0:   # (a suspension of a job that has left: nothing to do)
            continue
        job, obj = jobs[pj.id]
        ended = sorted(job.flags & ENDED)
        if ended:
            raise StalePlan(f"plan jobs[{k}].action", f"the plan changes job {pj.id} ({pj.action}), which has "
                                                      f"ended ({'+'.join(ended)})")
        if not job.flags & PLANNED:   # only COMPLETING (it has left), or parked (SPECIAL_EXIT, STOPPED...)
            raise StalePlan(f"plan jobs[{k}].action", f"the plan changes job {pj.id} ({pj.action}), which is "
                                                      f"no longer running or pending ({'+'.join(sorted(job.flags))})")
        parts, resv = set(_as_list(job.partition)), job.resv_name
        current = set(job_nodes(job, obj))
        for i, p in enumerate(pj.placement):
            f = f"plan jobs[{k}].placement[{i}].node"
            node = nodes.get(p.node)
            if node is None:
                if nodes_doc is not None:
                    raise StalePlan(f, f"node {p.node!r} is not in the nodes file")
            elif node.flags & FAILED_FLAGS:
                raise StalePlan(f, f"node {p.node} is now {'+'.join(sorted(node.flags & FAILED_FLAGS))}")
            node_parts, node_resv = ({q for q in node.partitions if q}, node.reservation) if node is not None \
                else (set(), "")
            if parts and node_parts and not parts & node_parts:
                raise StalePlan(f, f"node {p.node} is in partition {','.join(sorted(node_parts))}, not in job "
                                   f"{pj.id}'s {','.join(sorted(parts))}")
            # a node in a reservation: the job's own (or one whose name Slurm 22.05 does not print, when
            # the job uses one), or the agent's around a move, is no other team's
            reserved = node_resv or (node is not None and "RESERVED" in node.flags and not by_agent)
            theirs = not (resv and (not node_resv or node_resv in _as_list(resv))) \
                and not node_resv.startswith(RESERVATION_PREFIX)
            if reserved and theirs and p.node not in current:
                raise StalePlan(f, f"node {p.node} is in reservation {node_resv or '(RESERVED)'}, which job "
                                   f"{pj.id} does not use")
            if p.node in holders:
                raise StalePlan(f, f"node {p.node} is held by job {holders[p.node]}, which the plan does not "
                                   "manage")
    if nodes_doc is not None and not by_agent:
        for k, name in enumerate(plan.drained_nodes or []):
            node = nodes.get(name)
            if node is not None and not node.flags & FAILED_FLAGS:
                raise StalePlan(f"plan drained_nodes[{k}]", f"node {name} is in service again "
                                                            f"({'+'.join(sorted(node.flags)) or 'no state'})")


def export_slurm(plan, jobs_doc: Any, nodes_doc: Any = None, reason: str = "unicron-plan: failed",
                 gpu_map: Optional[GpuMap] = None, by_agent: bool = False) -> list[Step]:
    """The steps that carry out the plan, in order: drain the plan's drained nodes (their
    reasons kept), hold the pending jobs the plan keeps idle, free GPUs (shrink, suspend,
    requeue the jobs that move, to another GPU type too, or grow), then place the moved,
    grown and resumed jobs.

    A plan the documents no longer match is refused first (:class:`StalePlan`, see
    :func:`_check_current`). ``by_agent``: called by the agent, whose plans' drains of nodes Slurm
    shows in service are carried out (its coordinator takes a node out on an in-band verdict Slurm
    does not see) instead of refused, and whose own reservations around a move Slurm 22.05 shows as
    the flag RESERVED without a name (such a node is not taken for another team's)."""
    gpu_map = gpu_map or GpuMap()
    jobs = {str(j.job_id): (j, obj) for j, obj in parse_jobs(jobs_doc)}
    nodes: dict[str, SlurmNode] = {}
    if nodes_doc is not None:
        nodes = {n.name: n for n, _ in parse_nodes(nodes_doc)}
    check_plan_shape(plan)
    for k, name in enumerate(plan.drained_nodes or []):
        check_node_name(name, "plan", f"drained_nodes[{k}]")
    for k, pj in enumerate(plan.jobs):
        for i, p in enumerate(pj.placement):
            check_node_name(p.node, "plan", f"jobs[{k}].placement[{i}].node")
    _check_current(plan, jobs, nodes, nodes_doc, by_agent)
    drains: list[Step] = []
    for k, name in enumerate(plan.drained_nodes or []):
        node = nodes.get(name)
        if node is None and nodes_doc is not None:
            raise StalePlan(f"plan drained_nodes[{k}]", f"node {name!r} is not in the nodes file")
        if node is not None and node.flags & {"DRAIN", "DRAINED", "DRAINING"}:
            continue
        if node is None:   # no nodes file: the node's reason is read when the step runs
            drains.append(Step("drain", node=name, reason=reason, ours=reason))
        else:
            drains.append(Step("drain", node=name, reason=append_reason(node.reason, reason)))
    holds, frees, takes = [], [], []
    for k, pj in enumerate(plan.jobs):
        job, obj = jobs[pj.id]
        flags = job.flags
        planned = [p.node for p in pj.placement]   # (names checked above)
        if pj.action == "keep":
            continue
        if pj.gpus == 0:
            if flags & HOLDING:
                frees.append(Step("suspend", job=job.job_id))
            elif "PENDING" in flags and not job.held:
                holds.append(Step("hold", job=job.job_id))
            continue
        _check_type(job, obj, pj, planned, nodes, gpu_map)
        per = {p.gpus for p in pj.placement}
        if len(per) > 1:
            raise object_error(obj, "plan", f"per-node GPUs {sorted(per)} differ; Slurm gives a job the same "
                                            "GPUs on every node (import gives planned jobs whole nodes)")
        current = set(job_nodes(job, obj))
        if current and set(planned) == current:
            continue
        if current and set(planned) < current:
            tasks = job.tasks_for(len(planned))
            frees.append(Step("shrink", job=job.job_id, nodes=planned, tasks=tasks, cpus=job.cpus_for(tasks)))
            continue
        if current:
            frees.append(Step("requeue", job=job.job_id, nodes=planned))
        tasks = job.tasks_for(len(planned))
        takes.append(Step("place", job=job.job_id, nodes=planned, tasks=tasks, cpus=job.cpus_for(tasks)))
    starts = [Step("start", job=st.job, nodes=st.nodes) for st in takes]
    return drains + holds + frees + takes + starts


_SCRIPT_HEAD = """\
#!/bin/sh
# Generated by unicron-plan export slurm. Each step runs only when the cluster is not
# there yet, so running the script again is harmless. A failed command stops the script
# after releasing every job it held or requeue-held (they then run where Slurm puts them);
# the next export finishes the plan.
set -u
moved=''
fail() {
  echo "unicron-plan export: failed: $*" >&2
  for j in $moved; do scontrol release "$j" || true; done
  exit 1
}
job_state() { squeue -h -j "$1" -o '%T %N' 2>/dev/null || true; }
node_state() { sinfo -h -N -n "$1" -o '%T' 2>/dev/null || true; }
node_reason() { sinfo -h -N -n "$1" -o '%E' 2>/dev/null || true; }
held() { case "$(squeue -h -j "$1" -o '%r' 2>/dev/null)" in JobHeld*|*'held state'*) return 0 ;; esac; return 1; }
settled() {  # wait until a requeued job is no longer completing (at most 120 s)
  i=0
  while [ "$i" -lt 240 ]; do
    case "$(job_state "$1")" in COMPLETING*|*' COMPLETING'*) sleep 0.5; i=$((i + 1)) ;; *) return 0 ;; esac
  done
  fail "job $1 still completing after 120 s"
}
"""


def _run(argv: list[str], indent: str = "") -> str:
    cmd = shlex.join(argv)
    return f"{indent}{cmd} || fail {shlex.quote(cmd)}\n"


def render_script(steps: list[Step]) -> str:
    """The steps as a POSIX shell script: every name and hostlist quoted, every command's
    result checked, every step guarded by the cluster's present state."""
    out = [_SCRIPT_HEAD]
    paused = False
    for st in steps:
        q = shlex.quote
        if st.kind == "drain":
            out.append(f"case \"$(node_state {q(st.node)})\" in *drain*) ;; *)\n")
            if st.ours:
                out.append(f"  r=\"$(node_reason {q(st.node)})\"\n  case \"$r\" in ''|none) r={q(st.ours)} ;; "
                           f"*) r=\"$r; \"{q(st.ours)} ;; esac\n")
                cmd = shlex.join(["scontrol", "update", f"NodeName={st.node}", "State=DRAIN"])
                out.append(f"  {cmd} \"Reason=$r\" || fail {q(cmd)}\n  ;;\nesac\n")
            else:
                out.append(_run(st.commands()[0], "  ") + "  ;;\nesac\n")
            continue
        j = str(st.job)
        target = q(f"RUNNING {compress(st.nodes)}") if st.nodes else "''"
        if st.kind == "hold":
            out.append(f"case \"$(job_state {j})\" in PENDING*)\n  held {j} || {{ moved=\"$moved {j}\"; "
                       + _run(st.commands()[0]).rstrip("\n") + "; }\n  ;;\nesac\n")
        elif st.kind == "shrink":
            out.append(f"if [ \"$(job_state {j})\" != {target} ]; then\n" + _run(st.commands()[0], "  ") + "fi\n")
        elif st.kind == "suspend":
            out.append(f"case \"$(job_state {j})\" in\n  RUNNING*|SUSPENDED*) moved=\"$moved {j}\"; "
                       + _run(st.commands()[0]).rstrip("\n") + " ;;\n"
                       + f"  PENDING*) held {j} || {{ moved=\"$moved {j}\"; "
                       + f"{shlex.join(['scontrol', 'hold', j])} || fail 'scontrol hold {j}'; }} ;;\n"
                       + "esac\n")
        elif st.kind == "requeue":
            out.append(f"s=\"$(job_state {j})\"\nif [ \"$s\" != {target} ]; then\n  case \"$s\" in RUNNING*|SUSPENDED*)\n"
                       + f"    moved=\"$moved {j}\"\n" + _run(st.commands()[0], "    ") + "    ;;\n  esac\nfi\n")
        elif st.kind == "place":
            update, release = st.commands()
            out.append(f"if [ \"$(job_state {j})\" != {target} ]; then\n  settled {j}\n" + _run(update, "  ")
                       + _run(release, "  ") + "fi\n")
        elif st.kind == "start":
            if not paused:
                out.append(f"sleep {START_PAUSE}\n")
                paused = True
            # a job Slurm starts itself between the read and the update is not a failure
            cmd = shlex.join(st.commands()[0])
            out.append(f"case \"$(job_state {j})\" in PENDING*)\n  {cmd} || case \"$(job_state {j})\" in "
                       f"PENDING*) fail {q(cmd)} ;; esac\n  ;;\nesac\n")
    return "".join(out)
