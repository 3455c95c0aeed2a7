"""Regenerate the benchmark instances of instances/ with their cross-checked reference optimum.

    PYTHONPATH=. python benchmarks/make_instances.py

Each instance comes from unicron_plan.tools.generate (seeded); its reference
objective is the pruned DP's, accepted only when the plain reference DP
(solvers.dp.solve_type_reference, no bounds, no windows) agrees, and, for
the tiny one, brute force too.
"""

from __future__ import annotations

import math
from pathlib import Path

from unicron_plan import api
from unicron_plan.tools.adversarial import KINDS
from unicron_plan.tools.generate import generate_instance
from unicron_plan.io import dumps, write_atomic
from unicron_plan.core.problem import build_problem
from unicron_plan.solvers import brute, dp

ROOT = Path(__file__).resolve().parent.parent
SPECS = [  # running jobs in node order (written before shuffled placement was the generator's default)
    ("jagged-128-4jobs", dict(seed=5, gpus=128, jobs=4, max_counts=12, placement="ordered"), True),
    ("jagged-2048-32jobs", dict(seed=3, gpus=2048, jobs=32, placement="ordered"), False),
    ("jagged-16384-128jobs", dict(seed=1, gpus=16384, jobs=128, placement="ordered"), False),
] + [  # the large ones again with running jobs on shuffled nodes, as real clusters place them
    ("jagged-2048-32jobs-shuffled", dict(seed=3, gpus=2048, jobs=32), False),
    ("jagged-16384-128jobs-shuffled", dict(seed=1, gpus=16384, jobs=128), False),
] + [  # the smallest instance of each adversarial curve kind (unicron_plan.tools.adversarial)
    (f"adversarial-{kind}-512-8jobs", dict(seed=3, gpus=512, jobs=8, curves=kind, placement="ordered",
                                           # two failed nodes leave 496 GPUs: not a multiple of 3
                                           **({"failed_nodes": 2} if kind.startswith("queued-") else {})),
     False) for kind in KINDS
]


def main() -> None:
    """Write every instance of SPECS with its reference."""
    import argparse

    argparse.ArgumentParser(description="Rewrite instances/jagged-*.json with cross-checked reference "
                                        "optima (overwrites the files).").parse_args()
    for name, kw, with_brute in SPECS:
        seed = kw.pop("seed")
        doc = generate_instance(seed, name=name, **kw)
        problem = build_problem(api.load_instance(doc))
        fast = dp.solve(problem).objective
        ref = 0.0
        for gtype, cap in problem.capacity.items():
            jobs = problem.jobs_of_type(gtype)
            if jobs:
                ref += dp.solve_type_reference(jobs, cap)[1]
        assert math.isclose(fast, ref, rel_tol=1e-12), (name, fast, ref)
        method = "dp (Lagrangian-pruned, windowed) == plain reference DP"
        if with_brute:
            assert math.isclose(fast, brute.solve(problem).objective, rel_tol=1e-12)
            method += " == brute force"
        doc["reference"] = {"objective": fast, "method": method}
        write_atomic(ROOT / "instances" / f"{name}.json", dumps(doc))
        print(name, fast, method)


if __name__ == "__main__":
    main()
