"""Bounded numeric options: every number a request may set is finite and within stated bounds.

``BoundedModel`` is the base of the request options models. Each of their numeric fields declares both
bounds with ``Field(ge=/gt=, le=/lt=)`` (a test checks that none is left open), and one validator checks
every such value before pydantic's own: ``NaN``, ``Infinity`` (which Python's JSON parser accepts) or a
value out of range is refused with a message naming the bounds, e.g. ``options.tolerance: must be a
finite number in [0, 1]; got inf``.
"""

from __future__ import annotations

import math
import types
from typing import Any, Union, get_args, get_origin

import annotated_types
from pydantic import ConfigDict, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

from benchmark_runner.schemas import StrictModel


def numeric(annotation: Any) -> bool:
    """Whether a field of this annotation holds a number (``int``, ``float``, or one of them | None)."""
    if annotation in (int, float):
        return True
    if get_origin(annotation) in (Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        return bool(args) and all(a in (int, float) for a in args)
    return False


def bounds_of(metadata: list[Any]) -> tuple[float | None, bool, float | None, bool]:
    """``(low, low_inclusive, high, high_inclusive)`` of a field's ``Field(ge/gt/le/lt)`` metadata."""
    low: float | None = None
    high: float | None = None
    low_in = high_in = True
    for m in metadata:
        if isinstance(m, annotated_types.Ge):
            low, low_in = float(m.ge), True  # type: ignore[arg-type]
        elif isinstance(m, annotated_types.Gt):
            low, low_in = float(m.gt), False  # type: ignore[arg-type]
        elif isinstance(m, annotated_types.Le):
            high, high_in = float(m.le), True  # type: ignore[arg-type]
        elif isinstance(m, annotated_types.Lt):
            high, high_in = float(m.lt), False  # type: ignore[arg-type]
    return low, low_in, high, high_in


def describe_bounds(metadata: list[Any]) -> str:
    low, low_in, high, high_in = bounds_of(metadata)
    left = "(-inf" if low is None else f"{'[' if low_in else '('}{low:g}"
    right = "inf)" if high is None else f"{high:g}{']' if high_in else ')'}"
    return f"{left}, {right}"


class BoundedModel(StrictModel):
    """Options whose numbers must be finite and within their fields' bounds (see the module doc)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _finite_within_bounds(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or info.field_name is None:
            return value  # not a number: pydantic's own validation says what is wrong
        field = cls.model_fields[info.field_name]
        if not numeric(field.annotation):
            return value
        low, low_in, high, high_in = bounds_of(field.metadata)
        fine = isinstance(value, int) or math.isfinite(value)  # an int may be past a float's range
        if fine and low is not None:
            fine = value >= low if low_in else value > low
        if fine and high is not None:
            fine = value <= high if high_in else value < high
        if not fine:
            got = repr(value) if len(repr(value)) <= 40 else f"{repr(value)[:37]}..."
            raise PydanticCustomError(
                "bounded_number",
                "must be a finite number in {bounds}; got {got}",
                {"bounds": describe_bounds(field.metadata), "got": got},
            )
        return value
