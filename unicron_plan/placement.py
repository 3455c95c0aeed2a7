"""Counts -> concrete nodes, moving as few GPUs as possible.

Order of work, per GPU type:
1. jobs that keep their count and were not hit, and pinned jobs, stay exactly
   where they were;
2. the other jobs retain as many of their previous GPUs as possible: a max
   flow (networkx) from jobs to their healthy previous nodes;
3. what is still missing comes from free GPUs: nodes in the job's racks first,
   whole free nodes before fragments, then the best-fitting fragment.

Per-type capacity is fungible across nodes, so any counts within capacity
can always be placed.
"""

from __future__ import annotations

import networkx as nx

from unicron_plan.problem import Problem


def place(problem: Problem, counts: dict[str, int]) -> dict[str, dict[str, int]]:
    """{job id: {node id: GPUs}} for planned ``counts`` (nodes in cluster order)."""
    state = problem.state
    order = {nid: k for k, nid in enumerate(state.nodes)}
    free = {nid: (0 if n.drained else n.healthy_after) for nid, n in state.nodes.items()}
    result: dict[str, dict[str, int]] = {j.id: {} for j in problem.jobs}
    movers = []
    for j in problem.jobs:
        y = counts[j.id]
        if y == 0:
            continue
        if (y == j.x and not j.hit) or j.pinned:  # pinned: the previous split (constraints.precheck)
            for nid, g in state.previous[j.id].items():
                result[j.id][nid] = g
                free[nid] -= g
        else:
            movers.append(j)
    _retain(problem, movers, counts, free, result)
    racks = {j.id: {state.nodes[n].rack for n in state.previous[j.id]} for j in movers}
    for j in sorted(movers, key=lambda j: (-(counts[j.id] - sum(result[j.id].values())), j.index)):
        need = counts[j.id] - sum(result[j.id].values())
        candidates = [nid for nid, n in state.nodes.items() if n.gpu_type == j.gpu_type and free[nid] > 0]
        while need > 0:
            nid = _pick(candidates, free, need, racks[j.id], state, result[j.id])
            take = min(need, free[nid])
            result[j.id][nid] = result[j.id].get(nid, 0) + take
            free[nid] -= take
            need -= take
            candidates = [c for c in candidates if free[c] > 0]
    return {jid: dict(sorted(split.items(), key=lambda kv: order[kv[0]])) for jid, split in result.items()}


def _retain(problem: Problem, movers, counts, free, result) -> None:
    """Max flow: each changed job keeps as many previous GPUs as fit in its new count."""
    g = nx.DiGraph()
    for j in movers:
        g.add_edge("s", ("j", j.id), capacity=counts[j.id])
        for nid, had in problem.state.previous[j.id].items():
            if free[nid] > 0:
                g.add_edge(("j", j.id), ("n", nid), capacity=had)
                g.add_edge(("n", nid), "t", capacity=free[nid])
    if "t" not in g:
        return
    _, flow = nx.maximum_flow(g, "s", "t")
    for j in movers:
        for (_, nid), f in flow[("j", j.id)].items():
            if f > 0:
                result[j.id][nid] = f
                free[nid] -= f


def _pick(candidates, free, need, racks, state, mine) -> str:
    """The next node to take GPUs from (see module docstring for the preference order)."""
    def whole(nid):
        return free[nid] == state.nodes[nid].healthy_after
    def key(nid):
        fits = free[nid] >= need
        return (
            nid not in mine,                       # nodes the job is already on
            state.nodes[nid].rack not in racks,    # the job's racks
            not (whole(nid) and free[nid] <= need),  # whole nodes it fills completely
            not fits,                              # then a fragment that fits...
            free[nid] if fits else -free[nid],     # ...the tightest one, else the largest
        )
    return min(candidates, key=key)


def place_constrained(problem: Problem, counts: dict[str, int], time_limit_seconds: float | None = None,
                      threads: int | None = None) -> dict[str, dict[str, int]] | None:
    """Place ``counts`` under the node-level constraints (tp groups inside nodes, max_nodes,
    same_rack, pinned and unhit-unchanged jobs on their previous split), moving as few GPUs as
    possible and preferring the jobs' racks; None when no placement was found in the time limit.

    An assignment problem (``solvers.ipmodel.build_placement``) solved with OR-Tools CP-SAT:
    tp makes node quantities multiples of tp, which a plain flow cannot express.
    """
    from unicron_plan.solvers import SolverOptions, cpsat, ipmodel

    for j in problem.jobs:
        if counts[j.id] not in j.counts:
            return None
    model = ipmodel.build_placement(problem, counts)
    values = cpsat.run(model, SolverOptions(time_limit_seconds=time_limit_seconds, threads=threads))[1]
    if values is None or not model.feasible(values):
        return None
    return model.placement(values)
