"""Optional parts of the package and the one-line error when one is missing.

``pip install unicron-plan`` gives the planner (solve, validate, contingency with the
DP); the rest comes with an extra: ``[ip]`` (the integer-programming backends),
``[service]`` (the HTTP coordinator and its client), ``[sim]`` (simulator plots,
intervals, sweeps' plots, calibration), ``[adapters]`` (Kubernetes and Slurm import
and export; also ``[k8s]`` and ``[slurm]``) and ``[all]``.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from unicron_plan.errors import MissingExtraError

#: The extra that brings each optional top-level module.
EXTRA_OF = {
    "ortools": "ip", "pulp": "ip", "highspy": "ip",
    "fastapi": "service", "starlette": "service", "uvicorn": "service", "prometheus_client": "service",
    "httpx": "service",
    "matplotlib": "sim", "scipy": "sim",
    "hostlist": "adapters",
}


def require(module: str, purpose: str, load: bool = True) -> ModuleType | None:
    """``import module``, or MissingExtraError naming the extra to install for ``purpose``.
    ``load=False``: only check that it is installed (no import, so no import time), return None."""
    if not load:
        from importlib.util import find_spec

        try:
            if find_spec(module.split(".")[0]) is not None:
                return None
        except ImportError:  # a finder that refuses it: missing, as below
            pass
    try:
        return importlib.import_module(module)
    except ImportError:
        top = module.split(".")[0]
        extra = EXTRA_OF.get(top, "all")
        raise MissingExtraError(
            f"{purpose} needs the optional package {top!r}: pip install 'unicron-plan[{extra}]'") from None
