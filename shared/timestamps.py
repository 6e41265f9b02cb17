"""The one timestamp format on the wire and in the database: UTC, fixed width, milliseconds."""

from __future__ import annotations

import re
from datetime import UTC, datetime

#: ``YYYY-MM-DDTHH:MM:SS.mmmZ``: fixed width, so text order is time order.
TIMESTAMP_LENGTH = 24


def format_timestamp(moment: datetime) -> str:
    moment = moment.astimezone(UTC)
    if moment.year >= 1000:
        # Every commit stamps one: isoformat writes the same text at a fraction of strftime's cost
        # (it pads a year below 1000 to four digits, where strftime does not).
        return moment.isoformat(timespec="milliseconds")[:23] + "Z"
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def parse_timestamp(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)


_SHAPE = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


def is_timestamp(text: str) -> bool:
    """Whether ``text`` is a timestamp as :func:`format_timestamp` writes them: that shape, and a
    moment that exists (no 31 February)."""
    if not _SHAPE.fullmatch(text):
        return False
    try:
        parse_timestamp(text)
    except ValueError:
        return False
    return True
