"""The sweep file of ``unicron-plan sweep``: a grid over scenario fields x policies x seeds."""

from __future__ import annotations

import re
from typing import Any, Optional

from pydantic import Field, field_validator, model_validator

from unicron_plan.schema.base import StrictModel

#: Most simulator runs one sweep may ask for (grid points x most replications).
MAX_RUNS = 5000
#: Most grid points.
MAX_POINTS = 400
_PATH = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.([A-Za-z_][A-Za-z0-9_]*|[0-9]+))*")


class Replications(StrictModel):
    """How many seeds each grid point runs: batches until every ratio's interval is tight enough."""

    min: int = Field(default=5, ge=2, le=1000, description="Seeds run first at every grid point.")
    max: int = Field(default=30, ge=2, le=1000, description="Seeds at most per grid point.")
    batch: int = Field(default=5, ge=1, le=1000, description="Seeds added per round while an interval is wide.")
    target_half_width: float = Field(
        default=0.02, gt=0, le=10,
        description="Stop adding seeds to a grid point when the 95% confidence half-width of every "
                    "unicron / policy ratio is at most this.")

    @model_validator(mode="after")
    def _ordered(self) -> "Replications":
        if self.max < self.min:
            raise ValueError(f"max ({self.max}) is below min ({self.min})")
        return self


class Sweep(StrictModel):
    """A grid over scenario fields, the policies compared at each point, and the seeds."""

    schema_version: str = Field(default="1", pattern="^1$", description="Version of the format: 1.")
    name: Optional[str] = Field(default=None, max_length=200, description="Name of the sweep.")
    scenario: str = Field(min_length=1, max_length=4096,
                          description="Base scenario: a path, relative to the sweep file when not absolute.")
    grid: dict[str, list[Any]] = Field(
        default_factory=dict,
        description="Dotted path into the scenario (e.g. failures.node_mtbf_hours, "
                    "failures.repair_hours.median, jobs.0.weight) -> the values it takes. "
                    "Points are the product of the lists.")
    policies: list[str] = Field(
        default_factory=lambda: ["unicron", "megatron", "oobleck", "varuna", "bamboo", "greedy", "equal-share"],
        min_length=1, max_length=20,
        description="Policies compared at each grid point (default: these seven, and type-bound when a point's "
                    "scenario is a mixed fleet).")
    seed: int = Field(default=0, ge=0, le=2**63 - 1, description="Root of numpy.random.SeedSequence.")
    replications: Replications = Field(default_factory=Replications,
        description="Seeds per point: added until the intervals are narrow enough or the maximum is reached.")

    @field_validator("grid")
    @classmethod
    def _grid(cls, grid: dict[str, list[Any]]) -> dict[str, list[Any]]:
        if len(grid) > 8:
            raise ValueError(f"{len(grid)} fields; at most 8")
        points = 1
        for path, values in grid.items():
            if not _PATH.fullmatch(path) or len(path) > 200:
                raise ValueError(f"{path!r} is not a dotted path of field names and list indexes")
            if not values:
                raise ValueError(f"{path}: no values")
            if len(values) > MAX_POINTS:
                raise ValueError(f"{path}: {len(values)} values; at most {MAX_POINTS}")
            points *= len(values)
        if points > MAX_POINTS:
            raise ValueError(f"{points} grid points; at most {MAX_POINTS}")
        return grid

    @model_validator(mode="after")
    def _bounded(self) -> "Sweep":
        points = 1
        for values in self.grid.values():
            points *= len(values)
        if points * self.replications.max > MAX_RUNS:
            raise ValueError(f"replications.max: {points} grid points x {self.replications.max} seeds is more "
                             f"than {MAX_RUNS} runs")
        if "unicron" not in self.policies:
            raise ValueError("policies: the ratios are unicron / policy, so 'unicron' must be one of them")
        return self
