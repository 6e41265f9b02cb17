"""``docs/events.md`` carries the catalogue as a table the tests read (SPEC §1.5): one row per
declared event, writers as the source really has them, task scope, ``changes`` keys, and whether
the row reaches the SSE stream."""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest

import shared.fixtures
from shared import events

from .sourcescan import ROOT, record_calls, writers_by_event

CATALOGUE = ROOT / "docs" / "events.md"
FIXTURES = Path(shared.fixtures.__file__).parent / "events"
COLUMNS = ("event", "writer", "task scope", "changes keys", "reaches sse")
WRITER_ROOT = "services/board/"


@dataclass(frozen=True)
class Row:
    event: str
    writers: frozenset[str]
    scope: str
    keys: tuple[str, ...]
    reaches_sse: str


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def _plain(cell: str) -> str:
    return re.sub(r"\s+", " ", cell.replace("`", "")).strip().lower()


def parse_catalogue(text: str) -> list[Row]:
    """The one markdown table whose header holds the catalogue's columns."""
    lines = text.splitlines()
    for start, line in enumerate(lines):
        if not line.lstrip().startswith("|"):
            continue
        header = [_plain(cell) for cell in _cells(line)]
        if not set(COLUMNS) <= set(header):
            continue
        index = {name: header.index(name) for name in COLUMNS}
        rows = []
        for body in lines[start + 2:]:
            if not body.lstrip().startswith("|"):
                break
            cells = _cells(body)
            names = re.findall(r"`([^`]+)`", cells[index["event"]])
            assert len(names) == 1, f"one backticked event name per row: {body}"
            rows.append(
                Row(
                    event=names[0],
                    writers=frozenset(re.findall(r"`([\w/]+\.py)`", cells[index["writer"]])),
                    scope=_plain(cells[index["task scope"]]),
                    keys=tuple(re.findall(r"`([^`]+)`", cells[index["changes keys"]])),
                    reaches_sse=_plain(cells[index["reaches sse"]]),
                )
            )
        return rows
    raise AssertionError(f"no table with columns {COLUMNS} in {CATALOGUE}")


@pytest.fixture(scope="module")
def rows() -> dict[str, Row]:
    parsed = parse_catalogue(CATALOGUE.read_text(encoding="utf-8"))
    names = [row.event for row in parsed]
    duplicated = sorted({name for name in names if names.count(name) > 1})
    assert duplicated == [], f"events listed twice: {duplicated}"
    return {row.event: row for row in parsed}


def test_catalogue_lists_exactly_the_vocabulary(rows: dict[str, Row]) -> None:
    assert sorted(set(events.EVENTS) - set(rows)) == [], "declared events missing from docs/events.md"
    assert sorted(set(rows) - set(events.EVENTS)) == [], "rows naming no declared event"


def test_writer_column_names_the_modules_that_write(rows: dict[str, Row]) -> None:
    actual = writers_by_event(record_calls())
    wrong = {}
    for event, row in rows.items():
        documented = {WRITER_ROOT + path if not path.startswith("services/") else path for path in row.writers}
        if documented != actual.get(event, set()):
            wrong[event] = {"documented": sorted(documented), "source": sorted(actual.get(event, set()))}
    assert wrong == {}


def test_task_scope_column(rows: dict[str, Row]) -> None:
    wrong = {}
    for event, row in rows.items():
        expected = "none" if event in events.TASKLESS else ("target task" if event.startswith("relation_") else "task")
        if row.scope != expected:
            wrong[event] = (row.scope, expected)
    assert wrong == {}


def test_reaches_sse_is_no_exactly_for_wire_noise(rows: dict[str, Row]) -> None:
    assert {row.reaches_sse for row in rows.values()} <= {"yes", "no"}
    assert {event for event, row in rows.items() if row.reaches_sse == "no"} == set(events.WIRE_NOISE)


def required_keys(event: str) -> set[str]:
    """The keys a row always carries: the constructor called with its required parameters only."""
    constructor = events.CONSTRUCTORS[event]
    parameters = inspect.signature(constructor).parameters.values()
    return set(constructor(**{p.name: "x" for p in parameters if p.default is p.empty and p.kind is p.KEYWORD_ONLY}))


def takes_free_form(event: str) -> bool:
    parameters = inspect.signature(events.CONSTRUCTORS[event]).parameters.values()
    return any(p.kind is p.VAR_KEYWORD for p in parameters)


@pytest.mark.parametrize("event", events.EVENTS)
def test_changes_keys_column_matches_the_constructor(rows: dict[str, Row], event: str) -> None:
    if event not in rows:
        pytest.fail(f"{event} has no catalogue row")
    documented = rows[event].keys
    if takes_free_form(event):
        assert documented == ("*",), f"{event} carries free-form counters: write `*`"
        return
    every_key = set(orjson.loads((FIXTURES / f"{event}.json").read_bytes()))
    optional = every_key - required_keys(event)
    expected = {key if key not in optional else f"{key}?" for key in every_key}
    assert set(documented) == expected, f"{event}: write each key in backticks, optional ones as `key?`"


def test_parser_notices_a_missing_and_an_extra_row() -> None:
    text = CATALOGUE.read_text(encoding="utf-8")
    parsed = {row.event for row in parse_catalogue(text)}
    without = "\n".join(line for line in text.splitlines() if not line.startswith("| `task_moved`"))
    assert parsed - {row.event for row in parse_catalogue(without)} == {"task_moved"}
    extra = text.replace(
        "| `project_created` |", "| `task_teleported` | `commands/tasks.py` | task | `x` | yes | invented |\n| `project_created` |", 1
    )
    assert {row.event for row in parse_catalogue(extra)} - parsed == {"task_teleported"}
