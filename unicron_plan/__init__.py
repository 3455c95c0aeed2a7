"""unicron-plan: cost-minimising reconfiguration plans for multi-job LLM training clusters.

Example::

    >>> from unicron_plan import load_instance, solve
    >>> plan = solve(load_instance("instances/tiny-one-job-two-nodes.json"))  # doctest: +SKIP
    >>> plan.objective  # doctest: +SKIP
    38697000.0

Imports are lazy so that the command line starts fast.
"""

__version__ = "0.1.0"

__all__ = ["load_instance", "solve", "validate_plan", "load_plan", "__version__"]


def __getattr__(name):
    if name in ("load_instance", "solve", "validate_plan", "load_plan"):
        from unicron_plan import api

        return getattr(api, name)
    raise AttributeError(f"module 'unicron_plan' has no attribute {name!r}")
