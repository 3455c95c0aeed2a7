"""Placement in whole tp groups, greedily: a fast first try before the CP-SAT placement model.

Used by ``auto`` (step 2) when tp is the only node-level constraint that binds. Jobs that
keep their count and were not hit (and pinned jobs) stay exactly where they were; the other
jobs keep their previous GPUs in whole tp groups, then take free groups largest tp first,
each from the node with the least free GPUs that still holds one (best fit, so that large
blocks stay whole). The answer is checked before it is returned; None when some group finds
no node (the exact model may still find a placement).
"""

from __future__ import annotations

import bisect

from unicron_plan.core.problem import Problem


def place_groups(problem: Problem, counts: dict[str, int]) -> dict[str, dict[str, int]] | None:
    """{job id: {node id: GPUs}} with every share a multiple of the job's tp, or None."""
    state = problem.state
    free, result, movers = problem.stays(counts)
    if any(v < 0 for v in free.values()):
        return None
    need = {}
    for j in sorted(movers, key=lambda j: (-j.tp, j.index)):  # keep previous GPUs, whole groups
        t, left = max(j.tp, 1), counts[j.id]
        for nid, had in state.previous[j.id].items():
            take = min(had, free[nid], left) // t * t
            if take > 0:
                result[j.id][nid] = take
                free[nid] -= take
                left -= take
        need[j.id] = left
    by_type: dict[str, list[tuple[int, str]]] = {}  # (free, node) ascending, per GPU type
    for nid, n in state.nodes.items():
        if free[nid] > 0:
            by_type.setdefault(n.gpu_type, []).append((free[nid], nid))
    for pool in by_type.values():
        pool.sort()
    for j in sorted(movers, key=lambda j: (-j.tp, -need[j.id], j.index)):
        t, left = max(j.tp, 1), need[j.id]
        pool = by_type.get(j.gpu_type, [])
        while left > 0:
            k = bisect.bisect_left(pool, (t, ""))  # the fullest node that still holds a group
            if k == len(pool):
                return None
            v, nid = pool.pop(k)
            take = min(left, v) // t * t
            result[j.id][nid] = result[j.id].get(nid, 0) + take
            left -= take
            if v - take > 0:
                bisect.insort(pool, (v - take, nid))
    return result if _valid(problem, counts, result) else None


def _valid(problem: Problem, counts, placement) -> bool:
    """Counts met, whole tp groups, no node over its usable GPUs, nothing on other types' nodes."""
    state = problem.state
    used: dict[str, int] = {}
    for j in problem.jobs:
        split = placement.get(j.id, {})
        if sum(split.values()) != counts[j.id]:
            return False
        for nid, g in split.items():
            node = state.nodes[nid]
            if g % max(j.tp, 1) or node.gpu_type != j.gpu_type or node.drained:
                return False
            used[nid] = used.get(nid, 0) + g
    return all(g <= state.nodes[nid].healthy_after for nid, g in used.items())
