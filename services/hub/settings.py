"""The hub's knobs: ``HubSettings`` is the table of ``taskhub serve`` (docs/operations.md).

Every field with a ``knob`` is a ``taskhub serve`` option and a ``TASKLOOM_HUB_*`` variable (the
board's URL is ``TASKLOOM_URL``, as for ``taskctl``); its default here is the only one. A client
that starts the hub on demand passes its own environment on, which is how tests and operators
tune a spawned hub — and why no variable of the board's may be read here. Light on purpose
(no aiohttp, no asyncio): ``taskctl`` may read the table.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import click

from shared import hub_protocol as hp
from shared.knobs import Knob, Seconds, knob, required_knob, table
from shared.ndjson import MAX_LINE

#: Without a byte for this long (the board pings every 15 s) the connection is presumed dead.
READ_TIMEOUT: Final = 45.0
#: A follower's outbox holds at most this many lines before it leaves the live fan-out.
MAX_PENDING: Final = 1024

SECONDS = Seconds(min=0.01)
CADENCE = Seconds(min=0)


@dataclass(frozen=True)
class HubSettings:
    # The token comes first: mypy cannot tell that required_knob, like field(), gives no default.
    board_token: str = field(repr=False)
    board_url: str = required_knob(env="TASKLOOM_URL", flag="--board", help="The board's URL.")
    host: str = "127.0.0.1"
    port: int = knob(0, env="TASKLOOM_HUB_PORT", type=click.IntRange(0, 65535), help="Local port; 0 picks one.")
    hello_timeout: float = knob(hp.HELLO_TIMEOUT, env="TASKLOOM_HUB_HELLO_TIMEOUT", type=SECONDS, hidden=True,
                                help="Seconds a new connection has to say hello.")
    heartbeat_interval: float = knob(hp.HEARTBEAT_INTERVAL, env="TASKLOOM_HUB_HEARTBEAT", flag="--heartbeat",
                                     type=SECONDS, hidden=True, help="Seconds of silence before a heartbeat line.")
    #: Seconds with no clients and no registrations before the hub exits; 0 never.
    idle_exit: float = knob(hp.IDLE_EXIT, env="TASKLOOM_HUB_IDLE_EXIT", type=Seconds(min=0),
                            help="Exit after this many seconds without clients; 0 never.")
    ring_size: int = knob(hp.RING_SIZE, env="TASKLOOM_HUB_RING_SIZE", type=click.IntRange(min=1), hidden=True,
                          help="Event lines kept for replay.")
    max_line: int = MAX_LINE
    #: Connections waiting for their hello at once; a new one past this drops the oldest.
    max_awaiting_hello: int = hp.MAX_AWAITING_HELLO
    max_pending: int = MAX_PENDING
    reconnect_min: float = knob(hp.RECONNECT_MIN, env="TASKLOOM_HUB_RECONNECT_MIN", type=SECONDS, hidden=True,
                                help="First step of the board reconnect ladder, seconds.")
    reconnect_max: float = knob(hp.RECONNECT_MAX, env="TASKLOOM_HUB_RECONNECT_MAX", type=SECONDS, hidden=True,
                                help="Last step of the board reconnect ladder, seconds (at least --reconnect-min).")
    board_read_timeout: float = READ_TIMEOUT
    #: How long start-up waits for a first answer from the board before serving anyway.
    first_contact_timeout: float = 5.0
    #: Card-brief refresh cadence, seconds (SPEC §7.4); ``taskctl export watch --standalone``
    #: reads the same three variables.
    refresh_debounce: float = knob(hp.REFRESH_DEBOUNCE, env="TASKLOOM_HUB_REFRESH_DEBOUNCE", type=CADENCE,
                                   hidden=True, help="Brief refresh: quiet time after the last change, seconds.")
    refresh_max_wait: float = knob(hp.REFRESH_MAX_WAIT, env="TASKLOOM_HUB_REFRESH_MAX_WAIT", type=CADENCE,
                                   hidden=True, help="Brief refresh: longest wait after the first change, seconds.")
    refresh_floor: float = knob(hp.REFRESH_FLOOR, env="TASKLOOM_HUB_REFRESH_FLOOR", type=CADENCE,
                                hidden=True, help="Brief refresh: least time between two batches, seconds.")
    #: ``hub-<key>.registrations.json``; None keeps detached registrations in memory only.
    registrations_path: Path | None = None
    #: Directories no brief may be written into (runtime and data directories, docs/security.md).
    protected_dirs: tuple[Path, ...] = ()


TOKEN_FILE: Final = Knob(
    "token_file", None, env="TASKLOOM_HUB_TOKEN_FILE", type=click.Path(dir_okay=False, path_type=Path),
    help="Read the board token here (default: $TASKLOOM_TOKEN, then the board's token file).",
)
LOG_STDERR: Final = Knob(
    "log_stderr", None, env="TASKLOOM_HUB_LOG_STDERR", flag="--log-stderr/--no-log-stderr",
    default_text="stderr when it is not a terminal",
    help="Log JSON lines to stderr (a supervisor's journal) instead of hub-<key>.log.",
)
#: A descriptor number means something only to the process it was passed to: argv only.
LOCK_FD: Final = Knob(
    "lock_fd", None, env=None, type=int, hidden=True,
    help="The owner lock, locked and passed down by the starter.",
)
#: ``taskhub serve``'s table, in ``--help`` order.
SERVE_KNOBS: Final = table(HubSettings, TOKEN_FILE, LOG_STDERR, LOCK_FD)
#: The brief cadence, which the standalone watcher reads from the same variables.
CADENCE_KNOBS: Final = tuple(row for row in SERVE_KNOBS if row.name.startswith("refresh_"))
