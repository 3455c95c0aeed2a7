"""Shared pydantic configuration: strict, closed, finite."""

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    """Base of every contract model: unknown fields rejected, no NaN or infinity,
    no silent coercion of strings into numbers."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False,
                              validate_default=True)

    def __eq__(self, other: object) -> bool:
        """Equal when of the same type with equal fields (and extra fields). Private attributes are
        caches made from the fields (arrays, views) and are not compared: pydantic's own comparison
        would compare them, and numpy arrays do not compare to one truth value."""
        if not isinstance(other, BaseModel):
            return NotImplemented
        if type(self) is not type(other):
            return False
        mine, theirs = self.__dict__, other.__dict__
        return all(mine.get(name, _ABSENT) == theirs.get(name, _ABSENT) for name in type(self).model_fields) \
            and (self.__pydantic_extra__ or {}) == (other.__pydantic_extra__ or {})

    __hash__ = None  # (as pydantic's: a model that is not frozen has no hash; frozen ones get theirs)


_ABSENT = object()


class OutputModel(StrictModel):
    """Base of the plan models: as strict as the rest, but fields it does not know
    are ignored, so that `validate` accepts plans from other producers, which
    docs/format.md allows to add fields (every field the checks need is required)."""

    model_config = ConfigDict(extra="ignore", strict=True, allow_inf_nan=False,
                              validate_default=True)
