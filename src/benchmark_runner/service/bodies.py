"""A request body parsed within bounds: a hostile client's body (nested 100,000 deep, millions of values,
not UTF-8, NaN or Infinity, an unpaired surrogate) is refused with a message naming what and where before
Python's parser or a model can fail on it with a 500.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from array import array
from collections.abc import Callable
from typing import Any

#: A JSON string, up to its closing quote or, unterminated, to the end of the body: it matches at every
#: quote it is tried at, so one pass over any body is linear (no rescan from each escaped quote).
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*(?:"|\\?\Z)', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_BRACKET_DELTA = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")
#: A ``\uD800``-``\uDFFF`` escape: an unpaired one decodes to a string that is not valid Unicode.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


class BodyError(Exception):
    """A body that cannot be parsed within the service's bounds (or is not JSON at all)."""


def json_shape_error(raw: bytes, max_depth: int, max_items: int) -> str | None:
    """Why ``raw`` is out of bounds (nesting deeper than ``max_depth``, more than ``max_items`` values),
    or None. Linear in the body's size, and done before parsing: a body nested 100,000 deep never
    reaches a recursive parser or validator."""
    if raw.count(b"[") + raw.count(b"{") <= max_depth and raw.count(b",") + raw.count(b":") < max_items:
        return None  # fast path: even counting brackets and commas inside strings, within bounds
    skeleton = _JSON_STRING.sub(b'""', raw)  # what is left: structure, numbers and literals
    items = skeleton.count(b",") + skeleton.count(b"[") + skeleton.count(b"{")
    if items > max_items:
        return f"it holds more than {max_items} values (arrays' items and objects' members); the limit is {max_items}"
    if skeleton.count(b"[") + skeleton.count(b"{") > max_depth:
        deltas = array("b", skeleton.translate(None, _NOT_BRACKETS).translate(_BRACKET_DELTA))
        depth = max(itertools.accumulate(deltas), default=0)
        if depth > max_depth:
            return f"arrays and objects are nested {depth} deep; the limit is {max_depth}"
    return None


def _where(path: list[Any]) -> str:
    return ".".join(str(p) for p in path) or "<body>"


def _find(data: Any, bad: Callable[[Any], bool]) -> list[Any] | None:
    """The path of the first value in ``data`` (parsed JSON, bounded depth) for which ``bad`` holds."""
    stack: list[tuple[list[Any], Any]] = [([], data)]
    while stack:
        path, value = stack.pop()
        if bad(value):
            return path
        if isinstance(value, dict):
            for k, v in reversed(list(value.items())):
                if bad(k):
                    return [*path, k]
                stack.append(([*path, k], v))
        elif isinstance(value, list):
            stack.extend(([*path, i], v) for i, v in reversed(list(enumerate(value))))
    return None


def _not_finite(value: Any) -> bool:
    return isinstance(value, float) and not math.isfinite(value)


def _not_unicode(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def parse_json_body(raw: bytes, max_depth: int = 100, max_items: int = 1_000_000) -> Any:
    """``raw`` as JSON, or :class:`BodyError` saying why not (bounds, syntax, encoding, NaN/Infinity).

    Numbers JSON cannot hold (``NaN``, ``Infinity``, ``1e999``) parse to non-finite floats and are
    refused after the schema has had its say (a bounded field then names its own bounds).
    """
    why = json_shape_error(raw, max_depth, max_items)
    if why is not None:
        raise BodyError(f"request body is out of bounds: {why}")
    try:
        text = raw.decode("utf-8").removeprefix("\ufeff")  # JSON between systems is UTF-8 (RFC 8259)
    except UnicodeDecodeError as exc:
        raise BodyError(f"request body is not valid JSON: not UTF-8 text ({exc})") from exc
    try:
        data = json.loads(text)
    except RecursionError as exc:  # not reached with a sane max_depth; a bound all the same
        raise BodyError("request body is out of bounds: arrays and objects are nested too deep") from exc
    except ValueError as exc:  # JSONDecodeError, and an integer of more digits than Python converts
        raise BodyError(f"request body is not valid JSON: {str(exc)[:300]}") from exc
    if _SURROGATE_ESCAPE.search(raw):
        path = _find(data, _not_unicode)
        if path is not None:
            raise BodyError(
                f"request body is not valid JSON text: {_where(path)}: a string holds an unpaired UTF-16 "
                "surrogate escape (\\ud800-\\udfff), which is not a Unicode character"
            )
    return data


def non_finite_field(data: Any) -> str | None:
    """Where ``data`` holds a number that is not finite (NaN, Infinity, or past a float's range), if
    anywhere: checked after the model accepted the body, so a field it does not know is found too."""
    path = _find(data, _not_finite)
    return None if path is None else _where(path)
