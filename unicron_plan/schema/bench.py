"""The results file of `unicron-plan bench` (``--out``), as far as ``--check`` reads it."""

from __future__ import annotations

from typing import Optional

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Open(BaseModel):
    # Results carry more fields (times per run, the machine...); --check reads these.
    model_config = ConfigDict(extra="allow", strict=True, allow_inf_nan=False)


class BenchSolverResult(_Open):
    """One solver on one instance."""

    status: str = Field(max_length=100, description="ok, or why the solver did not run.")
    median_solve_seconds: Optional[float] = Field(default=None, ge=0, description="Median solve time, seconds.")
    objective: Optional[float] = Field(default=None, description="Objective of its plan, TFLOP.")
    gap: Optional[float] = Field(default=None, ge=0, description="Relative gap of its plan (0: proven optimal).")

    @model_validator(mode="after")
    def _ok_has_figures(self) -> "BenchSolverResult":
        if self.status == "ok" and (self.median_solve_seconds is None or self.objective is None):
            raise ValueError("a result with status 'ok' gives 'median_solve_seconds' and 'objective'")
        return self


class BenchInstanceResult(_Open):
    """The solvers' results on one instance."""

    solvers: dict[str, BenchSolverResult] = Field(default_factory=dict, description="Results by solver name.")


class BenchResults(_Open):
    """A results file of `unicron-plan bench --out`, used as a baseline by `--check`."""

    instances: dict[str, BenchInstanceResult] = Field(description="Results by instance, keyed as given to bench.")
