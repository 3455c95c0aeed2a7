"""A contingency index of part of an instance's failures, for timing a warm answer against a cold one
where the whole index takes long to build (1,048,576 GPUs: 131,072 node failures).

    PYTHONPATH=. python benchmarks/warm_cold.py I.json --out DIR [--failures 64] [--seed 0] [--direct]

Writes DIR/contingency.json and its keyed copy with the failure of the instance's event and
``--failures - 1`` other single-node failures drawn by ``--seed`` (every stored plan optimal, as
``unicron-plan contingency`` stores it; ``--direct``: each failure solved afresh by ``api.solve``,
the DP, for instances where the contingency solver's tables do not fit in memory). Then time,
whole processes paired:
``unicron-plan solve I.json --contingency DIR [--contingency-use always]`` against
``unicron-plan solve I.json`` (docs/performance.md, "A warm answer against a cold one").
"""

from __future__ import annotations

import argparse

import numpy as np

from unicron_plan import api
from unicron_plan.core.problem import build_problem
from unicron_plan.plan import contingency as C
from unicron_plan.plan.contingency import build_contingency, candidate_failures, event_key, write_contingency


def direct_index(inst, failures: list[tuple[str, list[str]]]) -> dict:
    """The index of ``failures`` with each one's plan from a fresh exact solve of the instance under it."""
    base = inst.model_copy(update={"event": None})
    failed, plans, ids = {}, {}, {}
    for key, nodes in failures:
        event = {"kind": "failure", "failed_nodes": nodes, "failed_gpus": []}
        plan = api.solve(base.model_copy(update={"event": type(inst.event).model_validate(event)}),
                         time_limit_seconds=None)
        counts = {j.id: j.gpus for j in plan.jobs}
        vector = tuple(counts.values())
        pid = ids.setdefault(vector, f"p{len(ids):05d}")
        plans[pid] = {"counts": counts}
        failed[key] = {"failed_nodes": sorted(nodes), "objective": plan.objective, "plan": pid}
    index = {"schema_version": "1", "kind": "contingency", "instance": base.name,
             "fingerprint": C.fingerprint(base), "racks": False,
             "multipliers": C._multipliers(build_problem(base)), "failures": failed, "infeasible": {},
             "plans": plans, "stats": {"failures": len(failed), "plans": len(plans), "method": "direct"}}
    return C._with_changes(base, index)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("instance")
    ap.add_argument("--out", required=True)
    ap.add_argument("--failures", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--direct", action="store_true")
    a = ap.parse_args()
    inst = api.load_instance(a.instance)
    key = event_key(inst)
    if key is None:
        raise SystemExit("the instance's event is not a failure of whole nodes with a key")
    candidates = candidate_failures(inst)
    others = [k for k, _ in candidates if k != key]
    rng = np.random.default_rng(a.seed)
    picked = rng.choice(len(others), size=min(max(a.failures - 1, 0), len(others)), replace=False)
    keys = {key, *(others[i] for i in picked.tolist())}
    if a.direct:
        index = direct_index(inst, [c for c in candidates if c[0] in keys])
    else:
        index = build_contingency(inst, keys=keys)
    path = write_contingency(index, a.out, inst)
    print(f"{len(index['failures'])} failures, {len(index['plans'])} plans -> {path}")


if __name__ == "__main__":
    main()
