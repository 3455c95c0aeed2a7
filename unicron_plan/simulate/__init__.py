"""Trace-driven simulation of self-healing over time, and the baseline policies.

Example::

    from unicron_plan.simulate import load_scenario, simulate
    out = simulate(load_scenario("scenarios/gpt3-mix-128-a800.json"), ["unicron", "megatron"], seed=0)
    print(out["policies"]["unicron"]["weighted_tflop"])
"""

from unicron_plan.simulate.policies import POLICIES, make_policy
from unicron_plan.simulate.run import (DEFAULT_POLICIES, load_scenario, plot, run_seeds, simulate,
                                       summarize)

__all__ = ["POLICIES", "DEFAULT_POLICIES", "make_policy", "load_scenario", "plot", "run_seeds",
           "simulate", "summarize"]
