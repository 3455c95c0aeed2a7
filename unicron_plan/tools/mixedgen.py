"""Seeded random mixed-fleet instances (several GPU types, jobs allowed on several of them), for the tests
and benchmarks/mixed_fleet.py."""

from __future__ import annotations

import numpy as np

GPU_SPECS = {
    "h100": {"peak_tflops": 989.0, "memory_gib": 80.0, "intra_node_gbps": 900.0, "inter_node_gbps": 50.0},
    "a100": {"peak_tflops": 312.0, "memory_gib": 80.0, "intra_node_gbps": 600.0, "inter_node_gbps": 25.0},
    "h200": {"peak_tflops": 989.0, "memory_gib": 141.0, "intra_node_gbps": 900.0, "inter_node_gbps": 50.0},
    "b200": {"peak_tflops": 2250.0, "memory_gib": 180.0, "intra_node_gbps": 1800.0, "inter_node_gbps": 50.0},
}


def _table(rng, cap: int, speed: float, sizes=None) -> dict[str, float]:
    """A jagged table: random counts up to ``cap``, values rising on average with noise."""
    counts = sizes if sizes is not None else sorted(set(rng.integers(1, cap + 1, size=rng.integers(1, 5)).tolist()))
    return {str(c): round(float(speed * c * rng.uniform(0.5, 1.2)), 3) for c in counts}


def mixed_instance(seed: int, types: int = 2, nodes_per_type: int = 2, gpus_per_node: int = 4, jobs: int = 3,
                   event: bool = True, constraints: bool = False, exclusive_types: bool = False) -> dict:
    """A small mixed-fleet instance: every job may run on 1..``types`` types (``exclusive_types``: one)."""
    rng = np.random.default_rng(seed)
    names = list(GPU_SPECS)[:types]
    nodes = []
    for t in names:
        for k in range(nodes_per_type):
            nodes.append({"id": f"{t}-{k}", "gpu_type": t, "gpus": int(gpus_per_node), "rack": f"r{k % 2}"})
    free = {t: [n["id"] for n in nodes if n["gpu_type"] == t] for t in names}
    speed = {t: float(rng.uniform(50, 300)) for t in names}
    out_jobs = []
    for i in range(jobs):
        allowed = [names[i % types]] if exclusive_types else \
            list(rng.choice(names, size=int(rng.integers(1, types + 1)), replace=False))
        current = allowed[0]
        by_type = {t: _table(rng, len(free[t]) * gpus_per_node + gpus_per_node, speed[t]) for t in allowed}
        cur = {"gpus": 0, "nodes": []}
        if free[current] and rng.random() < 0.7:
            take = free[current][: int(rng.integers(1, min(2, len(free[current])) + 1))]
            free[current] = free[current][len(take):]
            cur = {"gpus": len(take) * gpus_per_node, "nodes": take}
            by_type[current][str(cur["gpus"])] = round(float(speed[current] * cur["gpus"] * rng.uniform(0.6, 1.1)), 3)
        job = {"id": f"j{i}", "weight": round(float(rng.uniform(0.5, 2.0)), 3), "current": cur,
               "transition_seconds": round(float(rng.uniform(0, 3000)), 1),
               "throughput": {"gpu_type": current, "by_type": by_type} if len(allowed) > 1 or rng.random() < 0.5
               else {"gpu_type": current, "tflops": by_type[current]}}
        if constraints and rng.random() < 0.3:
            job["min_gain_fraction"] = round(float(rng.uniform(0, 0.3)), 3)
        if constraints and rng.random() < 0.2 and cur["gpus"] and rng.random() < 0.5:
            job["pinned"] = True
        out_jobs.append(job)
    inst = {"schema_version": "1", "name": f"mixed-{seed}",
            "cluster": {"gpu_types": {t: GPU_SPECS[t] for t in names}, "nodes": nodes},
            "jobs": out_jobs, "cost": {"expected_run_seconds": 36000.0, "default_transition_seconds": 600.0}}
    if event:
        held = [n for j in out_jobs for n in j["current"]["nodes"]]
        pick = held[int(rng.integers(len(held)))] if held and rng.random() < 0.8 else nodes[0]["id"]
        inst["event"] = {"kind": "failure", "failed_nodes": [pick]}
    return inst


CURVES = ("jagged", "linear-step", "dense", "near-linear")
STATES = ("mixed", "queued", "running")
#: The kinds of benchmarks/mixed_fleet.py: a curve, optionally led by a state other than ``mixed``.
KINDS = CURVES + ("queued-linear-step", "queued-near-linear", "running-jagged", "running-linear-step")


def kind_args(kind: str) -> dict:
    """``large_mixed`` keyword arguments of a kind name such as ``queued-linear-step``."""
    state, _, rest = kind.partition("-")
    if state in STATES and rest in CURVES:
        return {"curves": rest, "state": state}
    if kind not in CURVES:
        raise ValueError(f"unknown kind {kind!r}; one of {', '.join(KINDS)}")
    return {"curves": kind}


def large_mixed(seed: int, gpus: int, types: int, jobs: int, gpus_per_node: int = 8, counts_per_job: int = 64,
                curves: str = "jagged", state: str = "mixed") -> dict:
    """A large mixed fleet: ``gpus`` GPUs split evenly over ``types`` types, every job allowed 2..4 types;
    the first node of the first running job fails (of that job's type). ``curves``: ``jagged`` (random counts, near-linear with random
    dents), ``linear-step`` (exactly linear on multiples of 8, one slope per type for every job: many
    type choices tie), ``near-linear`` (the same with a relative noise of 1e-9: ties broken by
    amounts far below the transitions) or ``dense`` (every count from 1 to 4x the job's share,
    near-linear with a relative noise of 1e-6). ``state``: ``mixed`` (each job queued with probability 1/4,
    the others running at their share while it fits), ``queued`` (every job queued: no transition
    term breaks a tie) or ``running`` (every job running while its share fits)."""
    if curves not in CURVES or state not in STATES:
        raise ValueError(f"curves one of {CURVES}, state one of {STATES}")
    rng = np.random.default_rng(seed)
    names = list(GPU_SPECS)[:types]
    per_type = gpus // types // gpus_per_node
    nodes = [{"id": f"{t}-{k}", "gpu_type": t, "gpus": gpus_per_node, "rack": f"{t}-r{k // 32}"}
             for t in names for k in range(per_type)]
    next_free = {t: 0 for t in names}
    speed = {t: s for t, s in zip(names, (400.0, 150.0, 450.0, 900.0))}
    cap = per_type * gpus_per_node
    share = max(gpus_per_node, (gpus // jobs) // gpus_per_node * gpus_per_node)
    out_jobs = []
    for i in range(jobs):
        k = int(rng.integers(2, min(4, types) + 1))
        allowed = list(rng.choice(names, size=k, replace=False))
        current = allowed[0]
        by_type = {}
        for t in allowed:
            if curves == "linear-step":
                by_type[t] = {str(c): speed[t] * c for c in range(gpus_per_node, min(cap, 4 * share) + 1, gpus_per_node)}
                by_type[t].setdefault(str(share), speed[t] * share)
                continue
            if curves == "near-linear":
                y = np.arange(gpus_per_node, min(cap, 4 * share) + 1, gpus_per_node)
                by_type[t] = {str(int(c)): float(speed[t] * c * (1 + 1e-9 * e))
                              for c, e in zip(y, rng.uniform(-1, 1, size=len(y)))}
                by_type[t].setdefault(str(share), speed[t] * share)
                continue
            if curves == "dense":
                y = np.arange(1, min(cap, 4 * share) + 1)
                by_type[t] = {str(int(c)): float(speed[t] * c * (1 + 1e-6 * e))
                              for c, e in zip(y, rng.uniform(-1, 1, size=len(y)))}
                by_type[t].setdefault(str(share), speed[t] * share)
                continue
            counts = sorted(set((rng.integers(1, max(2, 4 * share // gpus_per_node), size=counts_per_job)
                                 * gpus_per_node).tolist()) | {share})
            counts = [c for c in counts if c <= cap]
            eff = np.cumprod(rng.uniform(0.985, 1.0, size=len(counts)))
            dents = np.where(rng.random(len(counts)) < 0.2, rng.uniform(0.8, 0.97, size=len(counts)), 1.0)
            by_type[t] = {str(c): round(float(speed[t] * c * e * d), 3) for c, e, d in zip(counts, eff, dents)}
        cur = {"gpus": 0, "nodes": []}
        runs = {"mixed": rng.random() < 0.75, "queued": False, "running": True}[state]
        if runs and next_free[current] + share // gpus_per_node <= per_type:
            a = next_free[current]
            take = [f"{current}-{a + q}" for q in range(share // gpus_per_node)]
            next_free[current] += len(take)
            cur = {"gpus": share, "nodes": take}
        out_jobs.append({"id": f"job{i}", "weight": round(float(rng.uniform(0.5, 2.0)), 3), "current": cur,
                         "transition_seconds": round(float(rng.uniform(60, 1800)), 1),
                         "throughput": {"gpu_type": current, "by_type": by_type}})
    failed = next((j["current"]["nodes"][0] for j in out_jobs if j["current"]["nodes"]), nodes[0]["id"])
    label = curves if state == "mixed" else f"{state}-{curves}"
    return {"schema_version": "1", "name": f"mixed-{label}-{gpus}-{types}types-{jobs}jobs-s{seed}",
            "cluster": {"gpu_types": {t: GPU_SPECS[t] for t in names}, "nodes": nodes},
            "jobs": out_jobs, "event": {"kind": "failure", "failed_nodes": [failed]},
            "cost": {"expected_run_seconds": 36000.0, "default_transition_seconds": 600.0}}


def _node(nid: str, gpu_type: str, rack: str) -> dict:
    return {"id": nid, "gpu_type": gpu_type, "gpus": 8, "rack": rack}


def _small(name: str, nodes: list[dict], jobs: list[dict], event: dict | None) -> dict:
    types = sorted({n["gpu_type"] for n in nodes})
    doc = {"schema_version": "1", "name": name,
           "cluster": {"gpu_types": {t: GPU_SPECS[t] for t in types}, "nodes": nodes}, "jobs": jobs,
           "cost": {"expected_run_seconds": 36000.0, "default_transition_seconds": 600.0}}
    if event is not None:
        doc["event"] = event
    return doc


def library() -> list[dict]:
    """The mixed-fleet instances of instances/ (without their recorded optimum; see instances/README.md
    for the arithmetic of the hand-made ones)."""
    h = [_node(f"h{k}", "h100", "rack-h") for k in range(3)]
    a = [_node(f"a{k}", "a100", "rack-a") for k in range(2)]
    queued = _small("mixed-queued-on-idle-type", h[:2] + a, [
        {"id": "run-h", "weight": 1.0, "current": {"gpus": 16, "nodes": ["h0", "h1"]},
         "transition_seconds": 600.0, "throughput": {"gpu_type": "h100", "tflops": {"8": 3000.0, "16": 5800.0}}},
        {"id": "queued", "weight": 1.0, "current": {"gpus": 0, "nodes": []}, "transition_seconds": 600.0,
         "throughput": {"gpu_type": "h100", "by_type": {"h100": {"8": 3100.0, "16": 6000.0},
                                                        "a100": {"8": 1000.0, "16": 1900.0}}}},
    ], None)
    stay = _small("mixed-move-not-worth-transition", h + a, [
        {"id": "steady", "weight": 1.0, "current": {"gpus": 8, "nodes": ["h0"]}, "transition_seconds": 1800.0,
         "throughput": {"gpu_type": "h100", "by_type": {"h100": {"8": 3000.0},
                                                        "a100": {"8": 1600.0, "16": 3100.0}}}},
        {"id": "victim", "weight": 1.0, "current": {"gpus": 16, "nodes": ["h1", "h2"]},
         "transition_seconds": 600.0, "throughput": {"gpu_type": "h100", "tflops": {"8": 2500.0, "16": 2520.0}}},
    ], {"kind": "failure", "failed_nodes": ["h2"]})
    constrained = mixed_instance(9, types=3, nodes_per_type=3, jobs=5, constraints=True)
    constrained["name"] = "mixed-pinned-hysteresis-3types"
    large = large_mixed(0, 16384, 4, 32, counts_per_job=4)
    large["name"] = "mixed-jagged-16384-4types-32jobs"
    return [queued, stay, constrained, large]


def record_reference(doc: dict) -> dict:
    """Solve ``doc`` with the mixed solver and store its proven optimum, cross-checked by the exhaustive
    solver where it is small enough and by the IP backends (HiGHS, CP-SAT)."""
    import math

    from unicron_plan import api
    from unicron_plan.errors import SolverUnavailableError

    doc.pop("reference", None)
    plan = api.solve(doc, solver="dp")
    if plan.status.solution != "optimal":
        raise RuntimeError(f"{doc['name']}: not proven optimal")
    agree = []
    for solver in ("brute", "milp", "cpsat"):
        try:
            ref = api.solve(doc, solver=solver)
        except SolverUnavailableError:
            continue
        if ref.status.solution == "optimal":
            if not math.isclose(ref.objective, plan.objective, rel_tol=1e-9, abs_tol=1e-6):
                raise RuntimeError(f"{doc['name']}: {solver} finds {ref.objective}, dp {plan.objective}")
            agree.append({"brute": "brute force over every (GPU type, count) per job", "milp": "milp",
                          "cpsat": "cpsat"}[solver])
    doc["reference"] = {"objective": plan.objective,
                        "method": "dp (mixed, bound == objective); " + ", ".join(agree) + " agree"}
    return doc


if __name__ == "__main__":
    import argparse
    from pathlib import Path

    from unicron_plan.io import dumps, write_atomic

    ap = argparse.ArgumentParser(description="Write the mixed-fleet instances of the library with their "
                                             "recorded optimum (run from the repository root).")
    ap.add_argument("--out", default="instances")
    for inst in library():
        inst = record_reference(inst)
        write_atomic(Path(ap.parse_args().out) / f"{inst['name']}.json", dumps(inst))
        print(f"{inst['name']:40s} {inst['reference']['objective']:>22.3f}  {inst['reference']['method']}")
