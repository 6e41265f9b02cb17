"""A project's condition settings: validated on write, read on every evaluation.

``settings`` stays free-form JSON; only the keys conditions read are checked (SPEC §12): an
unknown condition name, a negative limit, a threshold under one second or an unknown status is
``400 VALIDATION_FAILED`` naming the field, and nothing is written.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any

import orjson

from shared import conditions, domain
from shared.errors import validation

WIP_LIMITS = "wip_limits"
MONITORS = "monitors"
PERSIST = "persist_conditions"


@dataclass(frozen=True)
class ProjectConditions:
    """What one project asks the board to notice."""

    wip_limits: dict[str, int] = field(default_factory=dict)
    lanes: frozenset[str] = frozenset()
    emit_rejections: bool = False
    max_time_in_status: dict[str, float] = field(default_factory=dict)
    idle_after: float | None = None
    claim_stale_after: float | None = None
    persist: frozenset[str] = frozenset()

    @functools.cached_property
    def column_statuses(self) -> tuple[str, ...]:
        """The statuses whose column a condition watches (WIP limits and lanes), sorted."""
        return tuple(sorted(set(self.wip_limits) | self.lanes))

    @functools.cached_property
    def wip_statuses(self) -> tuple[str, ...]:
        return tuple(sorted(self.wip_limits))

    @functools.cached_property
    def lane_statuses(self) -> tuple[str, ...]:
        return tuple(sorted(self.lanes))


NONE = ProjectConditions()


def _status(value: Any, name: str) -> str:
    if not isinstance(value, str) or value not in domain.STATUSES:
        raise validation(f"{name}: {value!r} is not a status ({', '.join(domain.STATUSES)})", field=name, value=value)
    return str(value)


def _timed_status(value: Any, name: str) -> str:
    """A status a card can outstay: a terminal card has no time in status (it left the work)."""
    status = _status(value, name)
    if status in domain.TERMINAL:
        raise validation(
            f"{name}: a card in {status!r} has left the work, so no timeout can fire there", field=name, value=value,
            terminal=sorted(domain.TERMINAL),
        )
    return status


def _threshold(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise validation(f"{name} must be a number of seconds", field=name, value=value)
    if value < conditions.MIN_THRESHOLD_SECONDS:
        raise validation(
            f"{name} must be at least {conditions.MIN_THRESHOLD_SECONDS:g} second", field=name, value=value,
            minimum=conditions.MIN_THRESHOLD_SECONDS,
        )
    return float(value)


def _object(value: Any, name: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise validation(f"{name} must be an object", field=name, value=value)
    return value


def parse(settings: Any) -> ProjectConditions:
    """The condition settings of a project's ``settings``; refuses what it cannot honour."""
    if not isinstance(settings, dict):
        return NONE
    wip: dict[str, int] = {}
    for status, limit in _object(settings.get(WIP_LIMITS, {}), WIP_LIMITS).items():
        name = f"{WIP_LIMITS}.{status}"
        _status(status, name)
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise validation(f"{name} must be a non-negative integer", field=name, value=limit)
        wip[status] = limit
    monitors = _object(settings.get(MONITORS, {}), MONITORS)
    unknown = sorted(set(monitors) - conditions.MONITOR_KEYS)
    if unknown:
        raise validation(
            f"{MONITORS}: unknown key{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}",
            field=f"{MONITORS}.{unknown[0]}", unknown=unknown, known=sorted(conditions.MONITOR_KEYS),
        )
    lanes = monitors.get("lanes", [])
    if not isinstance(lanes, list):
        raise validation(f"{MONITORS}.lanes must be a list of statuses", field=f"{MONITORS}.lanes", value=lanes)
    emit = monitors.get("emit_rejections", False)
    if not isinstance(emit, bool):
        raise validation(f"{MONITORS}.emit_rejections must be true or false", field=f"{MONITORS}.emit_rejections", value=emit)
    timeouts = {
        _timed_status(status, f"{MONITORS}.max_time_in_status.{status}"): _threshold(
            seconds, f"{MONITORS}.max_time_in_status.{status}"
        )
        for status, seconds in _object(monitors.get("max_time_in_status", {}), f"{MONITORS}.max_time_in_status").items()
    }
    idle = monitors.get("idle_after")
    stale = monitors.get("claim_stale_after")
    persist = settings.get(PERSIST, [])
    if not isinstance(persist, list):
        raise validation(f"{PERSIST} must be a list of condition names", field=PERSIST, value=persist)
    for name in persist:
        if not isinstance(name, str) or name not in conditions.CONDITION_SET:
            raise validation(
                f"{PERSIST}: {name!r} is not a condition", field=PERSIST, value=name, known=list(conditions.CONDITIONS)
            )
    return ProjectConditions(
        wip_limits=wip,
        lanes=frozenset(_status(status, f"{MONITORS}.lanes") for status in lanes),
        emit_rejections=emit,
        max_time_in_status=timeouts,
        idle_after=None if idle is None else _threshold(idle, f"{MONITORS}.idle_after"),
        claim_stale_after=None if stale is None else _threshold(stale, f"{MONITORS}.claim_stale_after"),
        persist=frozenset(persist),
    )


def check(settings: Any) -> None:
    """Refuse settings conditions cannot honour (called before a project write)."""
    parse(settings)


@functools.lru_cache(maxsize=256)
def from_json(settings_json: str) -> ProjectConditions:
    """The settings as stored; a row written before validation existed reads as far as it is valid."""
    try:
        return parse(orjson.loads(settings_json))
    except Exception:  # noqa: BLE001 - an old, unvalidated row must not stop the board's commands
        return NONE
