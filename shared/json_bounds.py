"""Bounds on a decoded JSON value a client sent: nesting depth, number range, encoded size.

Pure: bytes or a value in, a ``VALIDATION_FAILED`` error out. orjson decodes an integer literal
beyond 64 bits as a float (2^64 becomes 1.8446744073709552e+19) and up to 2^64-1 as an exact
``int`` that SQLite cannot store, so :func:`decode_exact` decodes such a body again with the
standard library, which keeps every integer literal exact; the range check then refuses any
``int`` outside the signed 64-bit range, while a number written as a float (``2.5e134``) stays
the float it is. orjson's encoder refuses more than 254 levels, so a value nested too deep would
be stored and then fail every response that carries it.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

from .errors import TaskloomError, validation
from .limits import INT64_MAX, INT64_MIN, MAX_JSON_DEPTH, MAX_JSON_FIELD_BYTES

#: ``float(2**63)``: orjson gives a float this large (either sign) for an integer literal that
#: did not fit 64 bits, and for a float literal: only a second decode can tell which it was.
_FLOAT_LIMIT = float(1 << 63)
#: Offending paths are cut to this many characters in ``details``.
_PATH_MAX_CHARS = 200


def _path(field: str, steps: tuple[str | int, ...]) -> str:
    text = field + "".join(f"[{step}]" if isinstance(step, int) else f".{step}" for step in steps)
    return text if len(text) <= _PATH_MAX_CHARS else text[: _PATH_MAX_CHARS - 1] + "…"


def decode_exact(data: bytes) -> Any:
    """``data`` as JSON, every integer literal exact (``orjson.JSONDecodeError`` when it is not JSON).

    orjson first (strict and fast); only a body holding a float of magnitude 2^63 or more, which
    may have been an integer literal, is decoded again by ``json``, whose integers are exact.
    """
    value = orjson.loads(data)
    if not _holds_wide_float(value):
        return value
    try:
        return json.loads(data)
    except RecursionError:
        # orjson accepted the nesting; the standard decoder's recursion cannot: it is too deep anyway.
        raise validation(f"the request body nests arrays and objects more than {MAX_JSON_DEPTH} levels deep",
                         limit=MAX_JSON_DEPTH) from None


def _holds_wide_float(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, float) and not -_FLOAT_LIMIT < item < _FLOAT_LIMIT:
            return True
    return False


def check_json(value: Any, *, field: str, max_depth: int = MAX_JSON_DEPTH, max_bytes: int | None = None) -> None:
    """Refuse ``value`` (the body field ``field``) if it nests past ``max_depth`` arrays/objects,
    holds an integer outside the signed 64-bit range, or encodes to more than ``max_bytes``.

    Integers must come from :func:`decode_exact`, or one beyond 64 bits may already be a float.
    """
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
        elif isinstance(item, int) and not INT64_MIN <= item <= INT64_MAX:
            raise _out_of_range(field, steps, str(item))
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
