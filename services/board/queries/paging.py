"""Keyset pages and their opaque cursors: the one shape of every list the board answers (SPEC §5).

A page is ``{"items": [...], "next_cursor": str | None}``. A cursor names the key of the last row
handed out; the next page is the rows after it in the same order, so rows written meanwhile never
shift a page (no OFFSET). Two key shapes exist and both keep the wire format cursors were first
issued in, so a cursor handed out before still decodes:

* an integer key (a rowid, an activity id): base64url, unpadded, of ``a:<decimal>``;
* a composite text key (labels by project and name, actors by kind and id): base64url, unpadded,
  of ``k:`` and the key as a JSON list of strings.

A malformed cursor is a clear 400, never a silent restart from the first page.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Sequence
from typing import Any, Final

import orjson

from shared.errors import validation
from shared.limits import INT64_MAX

from ..dialect import Row

#: Prefixes inside the base64url text, one per key shape.
INTEGER_KEY: Final = b"a:"
TEXT_KEY: Final = b"k:"

Key = int | tuple[str, ...]


def encode_cursor(key: Key) -> str:
    """The opaque cursor after ``key``: an int, or a tuple of texts (a composite key)."""
    if isinstance(key, int):
        raw = INTEGER_KEY + str(key).encode()
    else:
        raw = TEXT_KEY + orjson.dumps(list(key))
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _unwrap(text: str, prefix: bytes) -> bytes:
    try:
        raw = base64.urlsafe_b64decode((text + "=" * (-len(text) % 4)).encode())
    except (ValueError, binascii.Error) as exc:  # non-ASCII text, or bad base64
        raise validation("malformed cursor", cursor=text) from exc
    if not raw.startswith(prefix):
        raise validation("malformed cursor", cursor=text)
    return raw[len(prefix):]


def decode_cursor(text: str) -> int:
    """The integer key a cursor from :func:`encode_cursor` names."""
    return integer_part(text, _unwrap(text, INTEGER_KEY))


def integer_part(text: str, value: str | bytes) -> int:
    """An integer inside the cursor ``text``: the whole integer key, or a part of a composite key
    that holds one (a row id beside the board that numbered it)."""
    # ASCII digits only: '²' or '١' are not part of any cursor the board wrote; and at most a
    # signed 64-bit integer, which is what SQLite can bind (it raised OverflowError, a 500).
    if not (value.isascii() and value.isdigit()) or len(value) > len(str(INT64_MAX)) or int(value) > INT64_MAX:
        raise validation("malformed cursor", cursor=text)
    return int(value)


def decode_key_cursor(text: str, width: int) -> list[str]:
    """The ``width`` texts of a composite key a cursor from :func:`encode_cursor` names."""
    try:
        key = orjson.loads(_unwrap(text, TEXT_KEY))
    except orjson.JSONDecodeError as exc:
        raise validation("malformed cursor", cursor=text) from exc
    # No text the board stores holds U+0000 (PostgreSQL cannot, and the API refuses it), so no
    # cursor it wrote does either.
    if (not isinstance(key, list) or len(key) != width
            or not all(isinstance(part, str) and "\x00" not in part for part in key)):
        raise validation("malformed cursor", cursor=text)
    return key


def page(
    rows: Sequence[Row],
    *,
    limit: int,
    item: Callable[[Row], Any],
    key: Callable[[Row], Key],
) -> dict[str, Any]:
    """The page of ``rows`` fetched with ``LIMIT limit + 1``: the extra row, when it came, only
    says that more follow, and the cursor names the key of the last row kept."""
    more = len(rows) > limit
    kept = rows[:limit]
    return {
        "items": [item(row) for row in kept],
        "next_cursor": encode_cursor(key(kept[-1])) if more else None,
    }


def whole(items: list[Any]) -> dict[str, Any]:
    """A list the board answers whole (a task's relations, its attachments): the same shape, no cursor."""
    return {"items": items, "next_cursor": None}
