"""The one timestamp format on the wire and in the database: UTC, fixed width, milliseconds."""

from __future__ import annotations

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
