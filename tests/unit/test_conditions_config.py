"""Condition settings and vocabulary, as pure functions (docs/conditions.md §2, §5)."""

from __future__ import annotations

from typing import Any

import pytest

from services.board.conditions import config
from shared import conditions, events
from shared.errors import TaskloomError


def test_every_condition_is_a_declared_event_with_a_constructor() -> None:
    assert set(conditions.CONDITIONS) <= events.EVENT_SET
    assert all(name in events.CONSTRUCTORS for name in conditions.CONDITIONS)
    assert len(set(conditions.CONDITIONS)) == len(conditions.CONDITIONS) == 10
    assert set(conditions.INSTANT) | set(conditions.TEMPORAL) == conditions.CONDITION_SET
    assert not set(conditions.INSTANT) & set(conditions.TEMPORAL)
    for crossing, clearing in conditions.CLEARED_BY.items():
        assert crossing in conditions.INSTANT and clearing in conditions.INSTANT


def test_column_conditions_carry_no_task() -> None:
    column = {events.WIP_EXCEEDED, events.WIP_CLEARED, events.LANE_DRAINED, events.LANE_REFILLED}
    assert column <= events.TASKLESS
    assert not (conditions.CONDITION_SET - column) & events.TASKLESS


def test_signal_data_has_exactly_the_wire_keys() -> None:
    data = conditions.signal_data(type_="wip_exceeded", project_id="demo", task_id=None, changes={}, at="t")
    assert tuple(data) == conditions.SIGNAL_KEYS == ("type", "project_id", "task_id", "changes", "at")


def test_full_settings_parse() -> None:
    parsed = config.parse({
        "wip_limits": {"in_progress": 3, "todo": 0},
        "monitors": {"lanes": ["todo"], "emit_rejections": True, "max_time_in_status": {"in_review": 1},
                     "idle_after": 1.5, "claim_stale_after": 60},
        "persist_conditions": ["wip_exceeded", "claim_stale"],
        "something_else": {"free": "form"},
    })
    assert parsed == config.ProjectConditions(
        wip_limits={"in_progress": 3, "todo": 0}, lanes=frozenset({"todo"}), emit_rejections=True,
        max_time_in_status={"in_review": 1.0}, idle_after=1.5, claim_stale_after=60.0,
        persist=frozenset({"wip_exceeded", "claim_stale"}),
    )
    assert config.parse({}) == config.NONE


@pytest.mark.parametrize(
    ("settings", "field"),
    [
        ({"wip_limits": []}, "wip_limits"),
        ({"wip_limits": {"in_progress": 1.5}}, "wip_limits.in_progress"),
        ({"wip_limits": {"in_progress": True}}, "wip_limits.in_progress"),
        ({"monitors": []}, "monitors"),
        ({"monitors": {"lanes": "todo"}}, "monitors.lanes"),
        ({"monitors": {"max_time_in_status": {"done": 0.999}}}, "monitors.max_time_in_status.done"),
        ({"monitors": {"max_time_in_status": {"in_review": float("inf")}}}, "monitors.max_time_in_status.in_review"),
        ({"monitors": {"max_time_in_status": {"waiting": 10}}}, "monitors.max_time_in_status.waiting"),
        ({"monitors": {"claim_stale_after": "600"}}, "monitors.claim_stale_after"),
        ({"monitors": {"idle_after": -5}}, "monitors.idle_after"),
        ({"persist_conditions": "wip_exceeded"}, "persist_conditions"),
        ({"persist_conditions": ["task_moved"]}, "persist_conditions"),
    ],
)
def test_refusals_name_the_field(settings: dict[str, Any], field: str) -> None:
    with pytest.raises(TaskloomError) as caught:
        config.check(settings)
    assert caught.value.code == "VALIDATION_FAILED"
    assert caught.value.details["field"] == field


def test_a_stored_row_that_no_longer_validates_reads_as_no_conditions() -> None:
    assert config.from_json('{"wip_limits": {"doing": 2}}') == config.NONE
    assert config.from_json("not json") == config.NONE
