"""The loop subscriber's knobs: the table of ``taskctl loop subscribe`` (docs/operations.md).

``Timing`` holds every interval, each a hidden option and a ``TASKLOOM_LOOP_*`` variable with its
one default here; who the loop is (``--agent``, ``--director``, ``--on-wake``) is argv only, as the
unit files pass it. Light on purpose (no asyncio, no structlog): ``taskctl loop status`` and
``install`` read the table without paying for the runner.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final

import click

from shared import hub_protocol as hp
from shared.domain import STATUSES
from shared.knobs import Knob, Seconds, knob, table

from . import coalesce

#: The local reconnect ladder to the hub, seconds (SPEC §9: 1 s doubling to 30 s).
RECONNECT_MIN: Final = hp.RECONNECT_MIN
RECONNECT_MAX: Final = hp.RECONNECT_MAX
#: With no record at all for this long the hub connection is presumed dead (3 heartbeats).
SILENCE_TIMEOUT: Final = 3 * hp.HEARTBEAT_INTERVAL
#: The state file is rewritten at most this often for cursor moves; state changes go out at once.
STATE_FLUSH: Final = 1.0
#: How long a stopping subscriber lets a running turn finish before it terminates it, seconds.
STOP_GRACE: Final = 10.0
#: Where the loop's files live unless ``--state-dir`` says otherwise: ``<data_dir>/loop``.
STATE_DIR_ENV: Final = "TASKLOOM_LOOP_STATE_DIR"

SECONDS = Seconds(min=0)
POSITIVE = Seconds(min=0, min_open=True)


@dataclass(frozen=True, slots=True)
class Timing:
    """Every interval the subscriber uses, in seconds; tests and the bench shorten them."""

    debounce: float = knob(coalesce.DEBOUNCE, env="TASKLOOM_LOOP_DEBOUNCE", type=SECONDS, hidden=True,
                           help="Quiet time before a turn, seconds.")
    max_wait: float = knob(coalesce.MAX_WAIT, env="TASKLOOM_LOOP_MAX_WAIT", type=SECONDS, hidden=True,
                           help="Longest a wake waits for quiet, seconds.")
    min_interval: float = knob(coalesce.MIN_INTERVAL, env="TASKLOOM_LOOP_MIN_INTERVAL", type=SECONDS, hidden=True,
                               help="At most one event-triggered turn per this many seconds.")
    lock_retry: float = knob(coalesce.LOCK_RETRY, env="TASKLOOM_LOOP_LOCK_RETRY", type=SECONDS, hidden=True,
                             help="Retry delay when continue.lock is held, seconds.")
    reconnect_min: float = knob(RECONNECT_MIN, env="TASKLOOM_LOOP_RECONNECT_MIN", type=POSITIVE, hidden=True,
                                help="First step of the hub reconnect ladder, seconds.")
    reconnect_max: float = knob(RECONNECT_MAX, env="TASKLOOM_LOOP_RECONNECT_MAX", type=POSITIVE, hidden=True,
                                help="Last step of the hub reconnect ladder, seconds.")
    silence_timeout: float = knob(SILENCE_TIMEOUT, env="TASKLOOM_LOOP_SILENCE_TIMEOUT", type=POSITIVE, hidden=True,
                                  help="Reconnect after this long without a hub record.")
    state_flush: float = knob(STATE_FLUSH, env="TASKLOOM_LOOP_STATE_FLUSH", type=POSITIVE, hidden=True,
                              help="Write the cursor to the state file at most this often, seconds.")
    stop_grace: float = knob(STOP_GRACE, env="TASKLOOM_LOOP_STOP_GRACE", type=SECONDS, hidden=True,
                             help="On SIGTERM, how long a running turn may finish, seconds.")

    def __post_init__(self) -> None:
        for name in self.__dataclass_fields__:
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative")
        if self.reconnect_max < self.reconnect_min:
            raise ValueError("reconnect_max must not be below reconnect_min")
        for name in ("reconnect_min", "silence_timeout"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")


def check_agents(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> tuple[str, ...]:
    from .units import split_agents

    names = split_agents(value)
    if not names:
        raise click.BadParameter("name at least one agent id (--agent NAME, repeatable)", ctx, param)
    return names


def check_on_wake(ctx: click.Context, param: click.Parameter, value: str) -> str:
    if not value.strip():
        raise click.BadParameter("the command must not be empty", ctx, param)
    if "\0" in value:
        raise click.BadParameter("the command must not hold a NUL byte", ctx, param)
    return value


def check_director(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is not None and not value.strip():
        raise click.BadParameter("the director id must not be empty", ctx, param)
    return value.strip() if value else None


def check_timeout_statuses(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> tuple[str, ...]:
    unknown = sorted(set(value) - set(STATUSES))
    if unknown:
        raise click.BadParameter(f"not a status: {', '.join(unknown)} (one of {', '.join(STATUSES)})", ctx, param)
    return tuple(dict.fromkeys(value))


AGENTS: Final = Knob(
    "agents", (), env=None, flag="--agent", multiple=True, required=True, callback=check_agents, metavar="NAME",
    help="This loop's agent id (repeat, or a comma list); its own writes do not wake it.",
)
DIRECTOR: Final = Knob(
    "director", None, env=None, callback=check_director, metavar="NAME",
    help="The decision lane's actor id: its only waking write is an in_progress → todo release.",
)
ON_WAKE: Final = Knob(
    "on_wake", None, env=None, required=True, callback=check_on_wake, metavar="CMD",
    help="Shell command run as a continue turn, with TASKLOOM_WAKE_REVISION and TASKLOOM_WAKE_EVENTS set.",
)
STATE_DIR: Final = Knob(
    "state_dir", None, env=STATE_DIR_ENV, type=click.Path(file_okay=False, path_type=Path),
    default_text="<data dir>/loop", help="The loop's state directory.",
)
START_HUB: Final = Knob(
    "start_hub", True, env=None, flag="--no-start-hub", is_flag=True, flag_value=False,
    help="Wait for a hub someone else runs (a supervised taskhub) instead of starting one.",
)
WAKE_ON_TIMEOUT: Final = Knob(
    "wake_on_timeout", (), env=None, multiple=True, callback=check_timeout_statuses, metavar="STATUS",
    help="Also wake when a card has stayed in STATUS past its project's max_time_in_status (repeatable).",
)
VERBOSE: Final = Knob("verbose", False, env=None, short="-v", is_flag=True, help="Also log every ignored event.")
#: ``taskctl loop subscribe``'s table, in ``--help`` order (the global options come after it).
SUBSCRIBE_KNOBS: Final = table(AGENTS, DIRECTOR, ON_WAKE, WAKE_ON_TIMEOUT, STATE_DIR, START_HUB, VERBOSE, Timing)
