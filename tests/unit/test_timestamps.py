"""The one timestamp format: fixed width, UTC, milliseconds truncated, whatever the input's zone."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from shared.timestamps import TIMESTAMP_LENGTH, format_timestamp, parse_timestamp


def by_strftime(moment: datetime) -> str:
    """The format spelled out field by field, as the board has always written it."""
    moment = moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


@pytest.mark.parametrize("moment", [
    datetime(2026, 12, 1, 16, 5, 9, 999_999, tzinfo=UTC),
    datetime(2026, 1, 2, 3, 4, 5, 0, tzinfo=UTC),
    datetime(2026, 1, 1, 0, 30, 0, 1_500, tzinfo=timezone(timedelta(hours=5, minutes=30))),  # the day before in UTC
    datetime(1000, 1, 1, 0, 0, 0, 999, tzinfo=UTC),
    datetime(9999, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC),
])
def test_the_text_is_the_fields_in_utc_with_milliseconds_truncated(moment: datetime) -> None:
    text = format_timestamp(moment)
    assert text == by_strftime(moment)
    assert len(text) == TIMESTAMP_LENGTH and text.endswith("Z")
    assert parse_timestamp(text) == moment.astimezone(UTC).replace(microsecond=moment.microsecond // 1000 * 1000)


def test_a_year_before_1000_is_written_as_it_always_was() -> None:
    moment = datetime(999, 5, 6, 7, 8, 9, 10_000, tzinfo=UTC)
    assert format_timestamp(moment) == by_strftime(moment)
