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

INDEX_FILE = "contingency.json"
#: Above this many (jobs x the fleet's capacity in whole-node units) an index takes more memory and
#: time than a planner's host should give it (12 GiB and growing unfinished at 8,192 jobs x 131,072
#: units of one type; 256 s and 4.2 GiB before the first answer on 4 types of 32,768 units each;
#: under 1 GiB at 1,024 x 16,384): the service builds none, and `unicron-plan contingency` refuses
#: unless told more.
INDEX_MAX_CELLS = 2**28


def index_cells(instance: Instance) -> int:
    """Jobs x the fleet's capacity in whole-node units, every GPU type's summed: the index's tables
    (each type's jobs x its capacity) and the failures it solves grow with both."""
    cap: dict[str, int] = {}
    gpus: dict[str, int] = {}
    for n in instance.cluster.nodes:
        cap[n.gpu_type] = cap.get(n.gpu_type, 0) + n.gpus
        gpus[n.gpu_type] = max(gpus.get(n.gpu_type, 1), n.gpus)
    return len(instance.jobs) * sum(c // gpus[t] for t, c in cap.items())


def __getattr__(name: str):
    """``node_classes`` (part of the index's interface), imported on first use: a `solve` that does
    not read the index does not load the contingency solver."""
    if name == "node_classes":
        from unicron_plan.solvers.contingency import node_classes

        return node_classes
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def fingerprint(instance: Instance) -> str:
    """sha256 of the instance without its name, event and reference: what a plan depends on.

    The instance is encoded by pydantic's compiled serializer (fields in the schema's order, tables
    in their own order): for tables of half a million counts, sorting every key in Python's encoder
    took seconds."""
    text = instance.model_dump_json(exclude={"name", "event", "reference"}, exclude_none=True)
    return hashlib.sha256(text.encode()).hexdigest()


_NO_TABLES = {"name": True, "event": True, "reference": True,
              "jobs": {"__all__": {"throughput": {"tflops", "compact"}}}}


def content_digest(instance: Instance) -> str:
    """sha256 of what :func:`fingerprint` hashes (the instance without its name, event and reference),
    encoded otherwise: the instance without its jobs' tables as JSON, then each job's table as its two
    arrays (:meth:`Throughput.table_arrays`, binary) and, for keys not ascending, their order (the
    entries' places, or the keys as text). Two instances
    have equal digests exactly when they have equal fingerprints; at 131,072 GPUs this takes under
    half the time, as no table value is formatted as text."""
    import numpy as np

    h = hashlib.sha256(instance.model_dump_json(exclude=_NO_TABLES, exclude_none=True).encode())
    for job in instance.jobs:
        t = job.throughput
        if not t.has_table:
            h.update(b"\nmodel;")
            continue
        counts, tflops = t.table_arrays()  # made once per instance: building the problem reuses them
        form = b"compact" if t.compact is not None else b"tflops"
        order = t.table_order() if t.compact is None else None
        if order is not None:  # keys not ascending: their order is part of the instance, the sort's places
            h.update(b"\ntflops-sorted %d;" % len(order) + order.tobytes())  # give it (canonical keys)
        elif t.compact is None and not t.arrays_in_order():
            h.update(b"\ntflops-keys %d:%s;" % (len(t.tflops), ",".join(t.tflops).encode()))
            tflops = np.fromiter(t.tflops.values(), dtype=float, count=len(t.tflops))
            counts = np.zeros(0, dtype=np.int64)
        h.update(b"\n%s %d %d;" % (form, len(counts), len(tflops)) + counts.tobytes() + tflops.tobytes())
    return h.hexdigest()


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

    rename_plan(plan, {a: b, b: a}, order)
    for job in plan["jobs"]:
        if job.get("reason") == "hit" and "why" in job:
            job["why"] = relabel_hit(job["why"], a, b)
    options = plan.get("solver", {}).get("options") or {}
    if options.get("contingency_key") == f"node:{a}":
        options["contingency_key"] = f"node:{b}"
    return plan


def rename_plan(plan: dict, rename: dict[str, str], order: dict[str, int]) -> dict:
    """The plan (JSON form) with every node named in its jobs' nodes and placements and in its drained
    nodes renamed by ``rename`` (a permutation of nodes that maps each to one of its
    :func:`node_classes` class; nodes it does not name keep their names), lists kept in cluster order
    (``order``: node id -> position). Sentences are not read: a hit job's names its nodes
    (:func:`relabel_plan` relabels it for one swap). Changes ``plan`` in place and returns it."""
    for job in plan["jobs"]:
        if any(n in rename for n in job["nodes"]):
            job["nodes"] = sorted((rename.get(n, n) for n in job["nodes"]), key=order.__getitem__)
            job["placement"] = sorted(({**p, "node": rename.get(p["node"], p["node"])} for p in job["placement"]),
                                      key=lambda p: order[p["node"]])
    if plan.get("drained_nodes"):
        plan["drained_nodes"] = sorted((rename.get(n, n) for n in plan["drained_nodes"]), key=order.__getitem__)
    return plan


def build_contingency(instance: Instance, racks: bool = False, progress: bool = False,
                      keys: set[str] | None = None) -> dict:
    """Optimal counts for every single-node (and, with ``racks``, rack) failure of ``instance``
    (``keys``: only the failures of these keys, a part of the index).

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
    if keys is not None:
        candidates = [c for c in candidates if c[0] in keys]
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
    multipliers = {} if problem.alternatives else _multipliers(problem)
    stats.update(failures=len(failures), infeasible=len(infeasible), plans=len(plans),
                 wall_seconds=time.perf_counter() - start)
    return _with_changes(base, {
        "schema_version": "1", "kind": "contingency", "instance": base.name,
        "fingerprint": fingerprint(base), "racks": racks, **({"multipliers": multipliers} if multipliers else {}),
        "failures": failures, "infeasible": infeasible, "plans": plans, "stats": stats,
    })


def _multipliers(problem) -> dict[str, float]:
    """Per GPU type, the LP multiplier of the capacity in the failure-free problem: the certificate a
    stored plan is checked with first (:func:`unicron_plan.solvers.contingency.certified_optimal`)."""
    from unicron_plan.solvers import dp

    out = {}
    for gpu_type, capacity in problem.capacity.items():
        jobs = problem.jobs_of_type(gpu_type)
        if jobs:
            out[gpu_type] = float(dp.lp_multiplier(dp.pareto_all(jobs), capacity))
    return out


def _with_changes(base: Instance, index: dict) -> dict:
    """``index`` with each failure's ``changes`` (hit, chosen, unchanged jobs: :mod:`unicron_plan.plan.reasons`),
    :func:`unicron_plan.plan.reasons.failure_changes` counted from the jobs on the failed nodes and, once
    per stored plan, the jobs it changes: work per failure grows with the jobs it hits, not all jobs."""
    from unicron_plan.plan.reasons import REASONS

    on_node: dict[str, set[int]] = {}
    for k, job in enumerate(base.jobs):
        for nid in job.current.nodes:
            on_node.setdefault(nid, set()).add(k)
    changed: dict[str, set[int]] = {}  # plan id -> positions of the jobs its counts or types change
    for pid, stored in index["plans"].items():
        counts, types = stored["counts"], stored.get("types")
        changed[pid] = {k for k, job in enumerate(base.jobs)
                        if counts[job.id] != job.current.gpus or (types and job.id in types)}
    m = len(base.jobs)
    for entry in index["failures"].values():
        hit = set().union(*(on_node.get(nid, ()) for nid in entry["failed_nodes"]))
        chosen = len(changed[entry["plan"]] - hit)
        entry["changes"] = dict(zip(REASONS, (len(hit), chosen, m - len(hit) - chosen)))
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


def write_contingency(index: dict, out_dir: str | Path, instance: Instance | None = None) -> Path:
    """Write the index atomically as canonical JSON to ``out_dir/contingency.json``, and beside it
    the same entries keyed for a lookup of one failure (``contingency.sqlite``, :func:`write_keyed`;
    with the :func:`content_digest` of ``instance``, the instance the index was built from)."""
    from unicron_plan.io import dumps, write_atomic

    path = Path(out_dir) / INDEX_FILE
    text = dumps(index)
    write_atomic(path, text)
    digest = content_digest(instance) if instance is not None else None
    write_keyed(index, text.encode("utf-8"), Path(out_dir) / KEYED_FILE, digest)
    return path


#: The keyed copy of the index beside ``contingency.json`` (docs/format.md): the entries by failure key
#: and the plans by id, each as the JSON text of its entry, with the sha256 of the contingency.json
#: bytes it was written from; it is used only while that file is unchanged.
KEYED_FILE = "contingency.sqlite"
_HEADER = ("schema_version", "kind", "instance", "fingerprint", "racks", "multipliers")


def write_keyed(index: dict, source: bytes, path: Path, digest: str | None = None) -> None:
    """Write ``index`` (whose contingency.json holds exactly ``source``) as the keyed copy at ``path``,
    through a temporary file and a rename; ``digest``: the :func:`content_digest` of the instance whose
    fingerprint the index holds."""
    import json
    import os
    import sqlite3
    import tempfile

    from unicron_plan.io import _umask

    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        con = sqlite3.connect(tmp)
        try:
            con.executescript("CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);"
                              "CREATE TABLE entries (key TEXT PRIMARY KEY, listed TEXT NOT NULL, entry TEXT NOT NULL);"
                              "CREATE TABLE plans (id TEXT PRIMARY KEY, plan TEXT NOT NULL);")
            header = {k: index[k] for k in _HEADER if k in index}
            con.executemany("INSERT INTO meta VALUES (?, ?)",
                            [("source_sha256", hashlib.sha256(source).hexdigest()), ("header", json.dumps(header)),
                             *([("content_digest", digest)] if digest else [])])
            for listed in ("failures", "infeasible"):
                con.executemany("INSERT INTO entries VALUES (?, ?, ?)",
                                [(k, listed, json.dumps(e)) for k, e in index.get(listed, {}).items()])
            con.executemany("INSERT INTO plans VALUES (?, ?)", [(k, json.dumps(v)) for k, v in index["plans"].items()])
            con.commit()
        finally:
            con.close()
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


#: CPU seconds a warm answer from an index on disk adds to a cold `solve`'s work besides the solver (the
#: index's modules and SQLite imported, the instance's identity check, the entry read, the stored plan's
#: check): fixed, per node, per table entry, per byte of contingency.json (hashed when the keyed copy is
#: read; parsed and checked when it is not); and the DP solve's CPU per table entry, the least measured
#: over the curve kinds. Measured in process at 16,384-1,048,576 GPUs (docs/performance.md, "A warm
#: answer against a cold one"), the warm terms the largest measured, the DP's the least: the index is read
#: only where the dearest warm answer costs less than the cheapest DP solve.
WARM_CPU_SECONDS = {"fixed": 5e-3, "node": 0.5e-6, "entry": 75e-9, "keyed_byte": 1e-9, "whole_byte": 100e-9}
DP_CPU_SECONDS_PER_ENTRY = 25e-9


def cold_is_cheaper(problem, solver: str | None, source: str | Path) -> str | None:
    """Why solving ``problem`` afresh is estimated cheaper than answering from the index at ``source``
    (a directory or its index file), or None when the index is worth reading; decided from sizes alone,
    before the index is read.

    A warm answer costs :data:`WARM_CPU_SECONDS` (the identity check alone hashes every table entry and
    node); the cold solve it replaces, when that is the DP (``solver`` ``dp``, or ``auto`` / None on an
    instance the DP solves exactly), about :data:`DP_CPU_SECONDS_PER_ENTRY` per table entry. Any other
    solve (an IP backend, a mixed fleet, constraints the DP cannot express, brute force) is taken to cost
    more than a check. An index that cannot be found is left to the reader (its error)."""
    if problem.alternatives or (solver not in (None, "dp", "auto")):
        return None
    if solver != "dp":  # auto: the DP when it is exact for the problem
        from unicron_plan.core.constraints import dp_limitations

        if dp_limitations(problem):
            return None
    p = Path(source)
    path = p / INDEX_FILE if p.is_dir() else p
    try:
        size = path.stat().st_size
    except OSError:
        return None
    keyed = (path.parent / KEYED_FILE).is_file()
    entries = sum(len(j.counts) for j in problem.jobs)
    w = WARM_CPU_SECONDS
    warm = w["fixed"] + w["node"] * len(problem.state.nodes) + w["entry"] * entries \
        + w["keyed_byte" if keyed else "whole_byte"] * size
    cold = DP_CPU_SECONDS_PER_ENTRY * entries
    if warm <= cold:
        return None
    return (f"a fresh DP solve is estimated cheaper than checking a stored plan ({entries:,} table entries: "
            f"about {cold * 1e3:,.1f} ms of CPU against {warm * 1e3:,.1f} ms to read the index and check; "
            f"the index was not read)")


def event_key(instance: Instance) -> str | None:
    """The failure key of the instance's event (a failure of whole nodes), or None."""
    ev = instance.event
    if ev is None or ev.kind != "failure" or ev.failed_gpus or not ev.failed_nodes:
        return None
    return failure_key(ev.failed_nodes, instance)


def read_for_event(source: str | Path, instance: Instance) -> tuple[dict, str | None]:
    """(the index at ``source`` as far as the instance's event needs it, the instance's fingerprint
    when it is known to be the index's, else None).

    ``source`` is a directory or its index file. From the keyed copy: the header and that failure's
    entry and plan (checked against the index schema), when the copy was written from the
    contingency.json there as it is now; the fingerprint is the index's when the copy's
    :func:`content_digest` is the instance's. Otherwise the whole index (:func:`read_contingency`).
    Either way :func:`lookup` gives the same answer."""
    p = Path(source)
    path = p / INDEX_FILE if p.is_dir() else p
    key = event_key(instance)
    found = _read_keyed(path, key) if key is not None else None
    if found is None:
        return read_contingency(source), None
    part, digest = found
    same = digest is not None and key in part["failures"] and digest == content_digest(instance)
    return part, part["fingerprint"] if same else None


def _read_keyed(path: Path, key: str) -> tuple[dict, str | None] | None:
    """(the part of the index at ``path`` for failure ``key``, the content digest stored with it) from
    its keyed copy, or None when there is no usable copy (absent, unreadable, written from other
    bytes, or not passing the index schema)."""
    import sqlite3

    from unicron_plan.io import MAX_BYTES, parse_json

    keyed = path.parent / KEYED_FILE
    try:
        if not keyed.is_file() or not path.is_file() or path.stat().st_size > MAX_BYTES:
            return None
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        con = sqlite3.connect(keyed.resolve().as_uri() + "?mode=ro", uri=True)
        try:
            meta = dict(con.execute("SELECT name, value FROM meta"))
            if meta.get("source_sha256") != digest:
                return None
            part = {**parse_json(meta["header"], str(keyed)), "failures": {}, "infeasible": {}, "plans": {}}
            row = con.execute("SELECT listed, entry FROM entries WHERE key = ?", (key,)).fetchone()
            if row is not None and row[0] in ("failures", "infeasible"):
                entry = part[row[0]][key] = parse_json(row[1], str(keyed))
                plan_id = entry.get("plan") if row[0] == "failures" and isinstance(entry, dict) else None
                if isinstance(plan_id, str):
                    found = con.execute("SELECT plan FROM plans WHERE id = ?", (plan_id,)).fetchone()
                    if found is not None:
                        part["plans"][plan_id] = parse_json(found[0], str(keyed))
        finally:
            con.close()
        content = meta.get("content_digest")
        return check_index(part, "index"), content if isinstance(content, str) else None
    except (OSError, sqlite3.Error, InvalidInstanceError, TypeError, ValueError, KeyError):
        return None


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
    key = event_key(instance)
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


