"""A contingency index of part of an instance's failures, for timing a warm answer against a cold one
where the whole index takes long to build (1,048,576 GPUs: 131,072 node failures).

    PYTHONPATH=. python benchmarks/warm_cold.py I.json --out DIR [--failures 64] [--seed 0]

Writes DIR/contingency.json and its keyed copy with the failure of the instance's event and
``--failures - 1`` other single-node failures drawn by ``--seed`` (every stored plan optimal, as
``unicron-plan contingency`` stores it). Then time, whole processes paired:
``unicron-plan solve I.json --contingency DIR [--contingency-use always]`` against
``unicron-plan solve I.json`` (docs/performance.md, "A warm answer against a cold one").
"""

from __future__ import annotations

import argparse

import numpy as np

from unicron_plan import api
from unicron_plan.plan.contingency import build_contingency, candidate_failures, event_key, write_contingency


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("instance")
    ap.add_argument("--out", required=True)
    ap.add_argument("--failures", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    inst = api.load_instance(a.instance)
    key = event_key(inst)
    if key is None:
        raise SystemExit("the instance's event is not a failure of whole nodes with a key")
    others = [k for k, _ in candidate_failures(inst) if k != key]
    rng = np.random.default_rng(a.seed)
    picked = rng.choice(len(others), size=min(max(a.failures - 1, 0), len(others)), replace=False)
    keys = {key, *(others[i] for i in picked.tolist())}
    index = build_contingency(inst, keys=keys)
    path = write_contingency(index, a.out, inst)
    print(f"{len(index['failures'])} failures, {len(index['plans'])} plans -> {path}")


if __name__ == "__main__":
    main()
