"""Shared pydantic configuration: strict, closed, finite."""

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    """Base of every contract model: unknown fields rejected, no NaN or infinity,
    no silent coercion of strings into numbers."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False,
                              validate_default=True)


class OutputModel(StrictModel):
    """Base of the plan models: as strict as the rest, but fields it does not know
    are ignored, so that `validate` accepts plans from other producers, which
    docs/format.md allows to add fields (every field the checks need is required)."""

    model_config = ConfigDict(extra="ignore", strict=True, allow_inf_nan=False,
                              validate_default=True)
