"""Bounds on a decoded JSON value a client sent: nesting depth, number range, encoded size.

Pure: a value in, a ``VALIDATION_FAILED`` error out. orjson decodes an integer beyond 64 bits as
a float (2^64 becomes 1.8446744073709552e+19) and up to 2^64-1 as an exact ``int`` that SQLite
cannot store, so the range check sees both forms: any ``int`` outside the signed 64-bit range and
any ``float`` of magnitude 2^63 or more is refused. Its encoder refuses more than 254 levels, so
a value nested too deep would be stored and then fail every response that carries it.
"""

from __future__ import annotations

from typing import Any

import orjson

from .errors import TaskloomError, validation
from .limits import INT64_MAX, INT64_MIN, MAX_JSON_DEPTH, MAX_JSON_FIELD_BYTES

#: ``float(2**63)``: a float this large (either sign) is an integer literal that did not fit.
_FLOAT_LIMIT = float(1 << 63)
#: Offending paths are cut to this many characters in ``details``.
_PATH_MAX_CHARS = 200


def _path(field: str, steps: tuple[str | int, ...]) -> str:
    text = field + "".join(f"[{step}]" if isinstance(step, int) else f".{step}" for step in steps)
    return text if len(text) <= _PATH_MAX_CHARS else text[: _PATH_MAX_CHARS - 1] + "…"


def check_json(value: Any, *, field: str, max_depth: int = MAX_JSON_DEPTH, max_bytes: int | None = None) -> None:
    """Refuse ``value`` (the body field ``field``) if it nests past ``max_depth`` arrays/objects,
    holds a number outside the signed 64-bit range, or encodes to more than ``max_bytes``."""
    # Iterative: a recursive walk would meet Python's own recursion limit first.
    stack: list[tuple[Any, int, tuple[str | int, ...]]] = [(value, 0, ())]
    while stack:
        item, depth, steps = stack.pop()
        if isinstance(item, dict):
            if depth + 1 > max_depth:
                raise _too_deep(field, steps, max_depth)
            stack.extend((child, depth + 1, (*steps, key)) for key, child in item.items())
        elif isinstance(item, list):
            if depth + 1 > max_depth:
                raise _too_deep(field, steps, max_depth)
            stack.extend((child, depth + 1, (*steps, index)) for index, child in enumerate(item))
        elif isinstance(item, bool):
            continue
        elif isinstance(item, int):
            if not INT64_MIN <= item <= INT64_MAX:
                raise _out_of_range(field, steps, str(item))
        elif isinstance(item, float):
            if not -_FLOAT_LIMIT < item < _FLOAT_LIMIT:
                raise _out_of_range(field, steps, repr(item))
    if max_bytes is not None:
        size = len(orjson.dumps(value))
        if size > max_bytes:
            raise validation(
                f"{field} is {size} bytes as JSON; at most {max_bytes} are allowed",
                field=field,
                size=size,
                limit=max_bytes,
            )


def check_free_form(value: Any, *, field: str) -> None:
    """A free-form object (meta, settings): depth, numbers and ``MAX_JSON_FIELD_BYTES``."""
    check_json(value, field=field, max_bytes=MAX_JSON_FIELD_BYTES)


def _too_deep(field: str, steps: tuple[str | int, ...], max_depth: int) -> TaskloomError:
    return validation(
        f"{field} nests arrays and objects more than {max_depth} levels deep",
        field=field,
        path=_path(field, steps),
        limit=max_depth,
    )


def _out_of_range(field: str, steps: tuple[str | int, ...], shown: str) -> TaskloomError:
    return validation(
        f"{_path(field, steps)} is outside the signed 64-bit integer range ({INT64_MIN} … {INT64_MAX});"
        " send it as a string",
        field=field,
        path=_path(field, steps),
        value=shown[:40],
    )
