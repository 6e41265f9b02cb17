"""Every time knob refuses a value that is not a finite number of seconds.

A NaN compares false with any bound, so a ``click.FloatRange`` with a minimum lets ``nan`` through
(and ``inf`` passes any minimum): it would reach ``loop.call_later`` (a ValueError at some later
moment) or make a deadline that never comes. ``shared.knobs.Seconds`` refuses both, and every
float knob of the three processes' tables is one.
"""

from __future__ import annotations

import math

import click
import pytest

from services.board.settings import SERVE_KNOBS as BOARD_KNOBS
from services.hub.settings import SERVE_KNOBS as HUB_KNOBS
from services.subscriber.settings import SUBSCRIBE_KNOBS
from shared.knobs import Knob, Seconds

TABLES = {"taskd serve": BOARD_KNOBS, "taskhub serve": HUB_KNOBS, "taskctl loop subscribe": SUBSCRIBE_KNOBS}


def float_knobs() -> list[tuple[str, Knob]]:
    found = []
    for command, table in TABLES.items():
        for knob in table:
            if isinstance(knob.type, click.FloatRange) or isinstance(knob.default, float) or knob.type is float:
                found.append((command, knob))
    return found


def test_every_float_knob_of_every_process_is_a_seconds_knob() -> None:
    plain = [f"{command} {knob.option}" for command, knob in float_knobs() if not isinstance(knob.type, Seconds)]
    assert plain == [] and len(float_knobs()) > 25


def accepts(knob: Knob, text: str) -> bool:
    try:
        knob.parse(text)
    except click.BadParameter:
        return False
    return True


@pytest.mark.parametrize("text", ["nan", "NaN", "-nan", "inf", "+Infinity", "1e999"])
def test_every_float_knob_refuses_what_is_not_a_finite_number(text: str) -> None:
    taken = [f"{command} {knob.option}" for command, knob in float_knobs() if accepts(knob, text)]
    assert taken == [], f"{text!r} is taken by {taken}"


@pytest.mark.parametrize(("kind", "text", "value"), [
    (Seconds(min=0.01), "0.5", 0.5), (Seconds(min=0), "0", 0.0), (Seconds(min=1), "86400", 86400.0),
])
def test_seconds_takes_a_finite_number_in_its_range(kind: Seconds, text: str, value: float) -> None:
    assert kind.convert(text, None, None) == value and math.isfinite(value)


def test_seconds_keeps_its_range() -> None:
    with pytest.raises(click.BadParameter, match="range"):
        Seconds(min=0, min_open=True).convert("0", None, None)
