"""Every activity append in the source names a declared event, built by its typed constructor,
and every declared event has a writer — except the historical ``progress``, which must have none."""

from __future__ import annotations

from shared import events

from .sourcescan import parse_text, record_calls, record_calls_in, sql_calls, writers_by_event

ACTIVITY_TABLE = "task_activities"
#: The one place allowed to INSERT an activity row: the seam that stamps its revision.
ACTIVITY_APPENDERS = {("services/board/store.py", "Tx.record")}


def test_the_scan_finds_the_appends() -> None:
    calls = record_calls()
    assert len(calls) >= 20, "the scanner stopped seeing tx.record calls"
    assert {call.path for call in calls} >= {"services/board/commands/tasks.py", "services/board/commands/rollup.py"}


def test_every_append_names_a_declared_event() -> None:
    undeclared = [f"{c.path}:{c.line} {c.function}: {c.source}" for c in record_calls() if c.event not in events.EVENT_SET]
    assert undeclared == [], "tx.record must name a declared event as events.X (or its literal value)"


def test_every_append_builds_changes_with_the_events_own_constructor() -> None:
    wrong = []
    for call in record_calls():
        expected = events.CONSTRUCTORS.get(call.event or "")
        built_by = getattr(events, call.constructor, None) if call.constructor else None
        if expected is None or built_by is not expected:
            wrong.append(f"{call.path}:{call.line} {call.event}: changes built by {call.constructor or 'a non-constructor'}")
    assert wrong == [], "pass events.<event>(...) as the changes so the golden fixtures cover the wire"


def test_every_live_event_has_a_writer() -> None:
    writers = writers_by_event(record_calls())
    missing = sorted(set(events.EVENTS) - set(writers) - events.HISTORICAL)
    assert missing == [], f"declared events nothing writes: {missing}"


def test_historical_events_gain_no_writer() -> None:
    writers = writers_by_event(record_calls())
    revived = {event: sorted(writers[event]) for event in events.HISTORICAL if event in writers}
    assert revived == {}, "progress is historical: readable, never written again"


def test_import_completed_has_exactly_one_writer_again() -> None:
    """The state import ends with one ``import_completed`` row; nothing else writes it."""
    assert events.IMPORT_COMPLETED not in events.HISTORICAL
    writers = writers_by_event(record_calls())
    assert sorted(writers[events.IMPORT_COMPLETED]) == ["services/board/commands/state_import.py"]


def test_only_the_seam_inserts_activity_rows() -> None:
    inserts = {
        (call.path, call.function)
        for call in sql_calls(["services"])
        if call.writes and any(ACTIVITY_TABLE in text and "INSERT" in text.upper() for text in call.texts or ())
    }
    assert inserts == ACTIVITY_APPENDERS


def test_the_reader_rejects_what_it_should() -> None:
    """The scan itself can fail: an invented name, a dynamic name and a wrong constructor are seen."""
    source = '''
from shared import events
from shared.events import TASK_MOVED as MOVED

def good(tx):
    tx.record(MOVED, events.task_moved(from_="todo", to="blocked", delivery_round=1), task_id="t", project_id="p")

def invented(tx):
    tx.record("task_teleported", {}, task_id="t", project_id="p")

def dynamic(tx, name):
    tx.record(name, events.task_moved(from_="a", to="b", delivery_round=1), task_id="t", project_id="p")

def mismatched(self):
    self.tx.record(events.TASK_CLAIMED, events.task_moved(from_="a", to="b", delivery_round=1), task_id="t", project_id="p")
'''
    calls = {call.function: call for call in record_calls_in(parse_text(source), "snippet.py")}
    assert set(calls) == {"good", "invented", "dynamic", "mismatched"}
    assert calls["good"].event == "task_moved" and calls["good"].constructor == "task_moved"
    assert calls["invented"].event not in events.EVENT_SET
    assert calls["dynamic"].event is None
    assert calls["mismatched"].event == "task_claimed" and calls["mismatched"].constructor == "task_moved"
