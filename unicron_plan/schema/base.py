"""Shared pydantic configuration: strict, closed, finite."""

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    """Base of every contract model: unknown fields rejected, no NaN or infinity,
    no silent coercion of strings into numbers."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False,
                              validate_default=True)
