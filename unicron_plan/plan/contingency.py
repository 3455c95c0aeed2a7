"""The contingency index: the optimal plan of every single failure (node, or rack), stored ahead of time.

:func:`build_contingency` asks the contingency solver (:mod:`unicron_plan.solvers.contingency`) for every
failure's optimum and stores the answers; :func:`lookup` finds the plan of an instance's event and
:func:`unicron_plan.api.solve` re-checks it (:func:`unicron_plan.solvers.contingency.proven_optimal`),
places and validates it before use. A failure that names a node already down as a whole is not a
failure `solve` accepts: no key names one.

Output (``DIR/contingency.json``, canonical JSON, docs/format.md): the base instance's name and
fingerprint, ``failures`` mapping each failure key (``node:ID`` or ``rack:ID``) to its failed nodes,
objective and plan id, ``infeasible`` mapping the keys that admit no plan to their failed nodes and
reason, and ``plans`` mapping plan ids to the optimal counts per job (identical count vectors are
stored once; on mixed fleets ``types`` lists the jobs that change GPU type). Placement is deterministic
and fast, so it is redone when a plan is used.

For the whole answers of the service, :func:`node_classes` groups the nodes whose failures are one up
to swapping the two nodes, and :func:`relabel_plan` turns one node's plan into another's of its class.
"""

from __future__ import annotations

import hashlib
import time
from collections import defaultdict
from pathlib import Path

from unicron_plan.errors import InvalidInstanceError
from unicron_plan.schema import Instance
from unicron_plan.solvers.contingency import node_classes  # noqa: F401  (part of the index's interface)

INDEX_FILE = "contingency.json"


def fingerprint(instance: Instance) -> str:
    """sha256 of the instance without its name, event and reference: what a plan depends on.

    The instance is encoded by pydantic's compiled serializer (fields in the schema's order, tables
    in their own order): for tables of half a million counts, sorting every key in Python's encoder
    took seconds."""
    text = instance.model_dump_json(exclude={"name", "event", "reference"}, exclude_none=True)
    return hashlib.sha256(text.encode()).hexdigest()


def failure_key(failed_nodes: list[str], instance: Instance, by_id: dict | None = None) -> str | None:
    """The contingency key of a set of failed nodes: ``node:ID``, ``rack:ID``, or None.

    ``by_id``: the instance's nodes by id, when the caller keeps them; then nodes of several racks
    (or none) are told apart without a walk over the cluster."""
    nodes = sorted(set(failed_nodes))
    if len(nodes) == 1:
        return f"node:{nodes[0]}"
    if by_id is not None:
        found = [by_id.get(n) for n in nodes]
        if any(n is None or n.rack is None for n in found) or len({n.rack for n in found}) != 1:
            return None
    racks = defaultdict(list)
    for n in instance.cluster.nodes:
        if n.rack is not None:
            racks[n.rack].append(n.id)
    for rack, members in racks.items():
        if sorted(members) == nodes:
            return f"rack:{rack}"
    return None


def candidate_failures(instance: Instance, racks: bool = False) -> list[tuple[str, list[str]]]:
    """(key, failed nodes) for every single node, and every rack when ``racks``; not a failure that names
    a node already down as a whole (an event `solve` refuses: nothing new can fail there)."""
    down = {n.id for n in instance.cluster.nodes if len(n.failed_gpus) == n.gpus}
    out = [(f"node:{n.id}", [n.id]) for n in instance.cluster.nodes if n.id not in down]
    if racks:
        members = defaultdict(list)
        for n in instance.cluster.nodes:
            if n.rack is not None:
                members[n.rack].append(n.id)
        out += [(f"rack:{r}", ids) for r, ids in members.items() if down.isdisjoint(ids)]
    return out


def relabel_plan(plan: dict, a: str, b: str, order: dict[str, int]) -> dict:
    """The plan (JSON form) of the failure of ``a`` made the plan of ``b``'s failure, ``a`` and ``b``
    being of one :func:`node_classes` class: the two nodes swapped wherever a node is named, lists
    kept in cluster order (``order``: node id -> position). Changes ``plan`` in place and returns it."""
    from unicron_plan.plan.reasons import relabel_hit

    swap = {a: b, b: a}
    for job in plan["jobs"]:
        if a in job["nodes"] or b in job["nodes"]:
            job["nodes"] = sorted((swap.get(n, n) for n in job["nodes"]), key=order.__getitem__)
            job["placement"] = sorted(({**p, "node": swap.get(p["node"], p["node"])} for p in job["placement"]),
                                      key=lambda p: order[p["node"]])
        if job.get("reason") == "hit" and "why" in job:
            job["why"] = relabel_hit(job["why"], a, b)
    if plan.get("drained_nodes"):
        plan["drained_nodes"] = sorted((swap.get(n, n) for n in plan["drained_nodes"]), key=order.__getitem__)
    options = plan.get("solver", {}).get("options") or {}
    if options.get("contingency_key") == f"node:{a}":
        options["contingency_key"] = f"node:{b}"
    return plan


def build_contingency(instance: Instance, racks: bool = False, progress: bool = False) -> dict:
    """Optimal counts for every single-node (and, with ``racks``, rack) failure of ``instance``.

    The instance's own event, if any, is ignored: contingencies are planned
    from the state before any failure. Every stored plan is the optimum of its
    failure under the instance's full rules; a failure that admits no plan is
    listed under ``infeasible`` with the reason. Returns the JSON-ready index.
    """
    from unicron_plan.core.problem import build_problem, prepare
    from unicron_plan.plan.assemble import to_plan
    from unicron_plan.solvers import contingency as solver

    start = time.perf_counter()
    base = instance.model_copy(update={"event": None})
    prepared = prepare(base)
    problem = build_problem(base, prepared)
    candidates = candidate_failures(base, racks)
    bar = _progress(progress, len(candidates))
    try:  # a plan's value is its placed plan's: a node-level move pays its transition
        results, stats = solver.solve(problem, candidates, prepared, advance=bar.advance,
                                      evaluate=lambda p, raw: to_plan(p, raw, "contingency", 0.0).objective)
    finally:
        bar.close()
    failures, infeasible, plans, plan_ids = {}, {}, {}, {}
    ids = [j.id for j in problem.jobs]
    seen: dict[int, tuple] = {}  # id of a counts dict (one per group) -> its vector
    for fkey, (failed, value, counts, types) in results.items():
        if value is None:
            infeasible[fkey] = {"failed_nodes": sorted(failed), "reason": counts}
            continue
        vector = seen.get(id(counts))
        if vector is None or types:
            vector = seen[id(counts)] = (tuple(map(counts.__getitem__, ids)), tuple(sorted((types or {}).items())))
        if vector not in plan_ids:
            plan_ids[vector] = f"p{len(plan_ids):05d}"
            plans[plan_ids[vector]] = {"counts": {j: counts[j] for j in ids}, **({"types": types} if types else {})}
        failures[fkey] = {"failed_nodes": sorted(failed), "objective": value, "plan": plan_ids[vector]}
    if prepared.type_tables:
        stats["mixed_types"] = True
    stats.update(failures=len(failures), infeasible=len(infeasible), plans=len(plans),
                 wall_seconds=time.perf_counter() - start)
    return _with_changes(base, {
        "schema_version": "1", "kind": "contingency", "instance": base.name,
        "fingerprint": fingerprint(base), "racks": racks,
        "failures": failures, "infeasible": infeasible, "plans": plans, "stats": stats,
    })


def _with_changes(base: Instance, index: dict) -> dict:
    """``index`` with each failure's ``changes`` (hit, chosen, unchanged jobs: :mod:`unicron_plan.plan.reasons`)."""
    from unicron_plan.plan.reasons import failure_changes

    for entry in index["failures"].values():
        stored = index["plans"][entry["plan"]]
        entry["changes"] = failure_changes(base, entry["failed_nodes"], stored["counts"], stored.get("types"))
    return index


class _progress:
    """A rich progress bar on stderr when asked for (rich is imported only then)."""

    def __init__(self, enabled: bool, total: int):
        self.p = None
        if enabled:
            from rich.progress import Progress

            self.p = Progress(transient=True)
            self.p.start()
            self.task = self.p.add_task("contingency groups", total=total)

    def advance(self) -> None:
        if self.p:
            self.p.advance(self.task)

    def close(self) -> None:
        if self.p:
            self.p.stop()


def write_contingency(index: dict, out_dir: str | Path) -> Path:
    """Write the index atomically as canonical JSON to ``out_dir/contingency.json``."""
    from unicron_plan.io import dumps, write_atomic

    path = Path(out_dir) / INDEX_FILE
    write_atomic(path, dumps(index))
    return path


def read_contingency(source: str | Path) -> dict:
    """Read a contingency index from a directory (or the index file itself)."""
    from unicron_plan.io import read_json

    p = Path(source)
    path = p / INDEX_FILE if p.is_dir() else p
    data = read_json(path)
    if not isinstance(data, dict) or data.get("kind") != "contingency":
        raise InvalidInstanceError(str(p), "not a contingency index (kind != 'contingency')")
    try:
        return check_index(data, "index")
    except InvalidInstanceError as exc:  # named as "FILE: plans.p00001.counts.job", not "DIR.plans..."
        field = exc.field[len("index."):] if exc.field.startswith("index.") else exc.field
        raise InvalidInstanceError(f"{path}: {field}", exc.message) from None


_CHECKED: list = []  # [the last index dict that passed, its shape]: kept alive, so its id stays its own


def _shape(data: dict) -> tuple:
    return tuple((k, id(v), len(v) if isinstance(v, dict) else None) for k, v in data.items())


def check_index(data, source: str = "contingency") -> dict:
    """``data`` checked against the index schema (schema.contingency); bad input names the field.

    The dict checked last is not checked again while its top level is unchanged (a caller that plans
    many events with one index, as the service does); what a stored plan must satisfy is checked
    on every use anyway (``api.solve``)."""
    from unicron_plan.io import parse_model
    from unicron_plan.schema.contingency import ContingencyIndex

    if isinstance(data, dict) and _CHECKED and _CHECKED[0] is data and _CHECKED[1] == _shape(data):
        return data
    parse_model(ContingencyIndex, data, prefix=source)
    if isinstance(data, dict):
        _CHECKED[:] = [data, _shape(data)]
    return data


def lookup(instance: Instance, index: dict,
           instance_fingerprint: str | None = None) -> tuple[str, dict[str, int] | None, float | None] | None:
    """(key, counts, objective) of the precomputed plan for the instance's event, (key, None, None)
    when the index lists that failure as infeasible, or None.

    Matches only a failure event of whole nodes on the same cluster and jobs
    (same fingerprint; ``instance_fingerprint`` is the instance's when the caller
    already computed it).
    """
    ev = instance.event
    if ev is None or ev.kind != "failure" or ev.failed_gpus or not ev.failed_nodes:
        return None
    key = failure_key(ev.failed_nodes, instance)
    if key is None:
        return None
    entry = index.get("failures", {}).get(key)
    if entry is None and key not in index.get("infeasible", {}):
        return None
    if index.get("fingerprint") != (instance_fingerprint or fingerprint(instance)):
        return None
    if entry is None:
        return key, None, None
    plan = index.get("plans", {}).get(entry.get("plan"))  # (re-checked: the dict may have changed since)
    counts = plan.get("counts") if isinstance(plan, dict) else None
    if not isinstance(counts, dict) or not all(type(c) is int and c >= 0 for c in counts.values()) \
            or type(entry.get("objective")) not in (int, float):
        return None
    return key, dict(counts), float(entry["objective"])


