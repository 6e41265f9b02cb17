"""``subscribe.state.json``: what the subscriber publishes about itself, and reading it back.

One JSON object, replaced atomically (temp file, fsync, rename) so a reader never sees half of
it. ``taskctl loop status`` reads it and trusts ``state`` only while ``pid`` is alive: a process
killed with SIGKILL cannot write ``stopped``, so a dead pid means ``not running`` whatever the
file says.

``board_id`` beside ``revision`` names the board that revision counts in, written in the same
record so the two never disagree: a restart names it in its first ``follow``, and a board
replaced meanwhile (a restore, another board on the same URL) answers ``reset`` instead of
replaying its own revisions after a number of the old one. A file written before the field
existed has none and resumes as it always did, judged by revision alone.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import structlog

from shared.hub_protocol import MAX_BOARD_ID
from shared.timestamps import format_timestamp

from .files import read_small_file, write_atomic
from .process import pid_alive as pid_alive  # where the state readers have always found it

STATE_FILE: Final = "subscribe.state.json"
STATE_VERSION: Final = 1

#: ``state`` values. The first three are SPEC §9's; ``unauthorized`` means the board refused the
#: token (after a rotation: the subscriber re-reads it on every reconnect and returns to
#: ``streaming`` once it works); ``stopped`` is the clean exit's last word.
STARTING: Final = "starting"
STREAMING: Final = "streaming"
RECONNECTING: Final = "reconnecting"
UNAUTHORIZED: Final = "unauthorized"
STOPPED: Final = "stopped"
STATES: Final = frozenset({STARTING, STREAMING, RECONNECTING, UNAUTHORIZED, STOPPED})
NOT_RUNNING: Final = "not running"

log = structlog.get_logger("taskloom.subscriber")


def utc_now() -> str:
    return format_timestamp(datetime.now(UTC))


def state_path(state_dir: Path) -> Path:
    return state_dir / STATE_FILE


def write_state(path: Path, record: dict[str, Any]) -> None:
    """Replace ``path`` with ``record`` as one JSON object, atomically, owner-only."""
    write_atomic(path, (json.dumps(record, indent=2, sort_keys=True) + "\n").encode())


#: The largest state file read back: ours is a couple of KiB; more was written by someone else.
MAX_STATE_BYTES: Final = 1 << 20


def load_state(path: Path) -> tuple[dict[str, Any] | None, str | None]:
    """The published record and, when there is a file but no record in it, why not.

    ``(None, None)``: no file (a first start). ``(None, reason)``: something is there that is no
    record of ours (a FIFO, a device, a directory, over ``MAX_STATE_BYTES``, not JSON, nested
    past the parser's depth, not an object); it is never waited on or read to its end, so
    neither ``loop status`` nor a start can hang or crash on it.
    """
    try:
        data = read_small_file(path, MAX_STATE_BYTES)
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return None, str(exc)
    try:
        record = json.loads(data)
    except (ValueError, RecursionError) as exc:
        return None, f"not JSON: {type(exc).__name__}"
    if not isinstance(record, dict):
        return None, "not a JSON object"
    return record, None


def read_state(path: Path) -> dict[str, Any] | None:
    """The published record, or None when the file is missing or unreadable."""
    return load_state(path)[0]


def saved_board_id(record: dict[str, Any] | None, board_url: str) -> str | None:
    """The ``board_id`` a previous run's cursor comes from, when that run followed ``board_url``.

    None when there is none to trust: no file, another board URL, a file from before the field
    existed, or a value the hub would refuse in ``follow`` (not a string of 1 to
    ``MAX_BOARD_ID`` characters), which is logged and left out: sent, it would have every
    ``follow`` refused; left out, the restart resumes by revision alone, as it always did.
    """
    if not record or record.get("board") != board_url or record.get("board_id") is None:
        return None
    board_id = record["board_id"]
    if isinstance(board_id, str) and 0 < len(board_id) <= MAX_BOARD_ID:
        return board_id
    log.warning("state_board_id_ignored", value=repr(board_id)[:80],
                reason=f"not a string of 1 to {MAX_BOARD_ID} characters",
                hint="resuming by revision alone; the next board id the hub names replaces it")
    return None


@dataclass(frozen=True, slots=True)
class Status:
    """What ``taskctl loop status`` reports: the state word, and the record it came from."""

    running: bool
    state: str
    record: dict[str, Any] | None

    def as_dict(self) -> dict[str, Any]:
        return {"running": self.running, "state": self.state, **({"record": self.record} if self.record else {})}


def status(state_dir: Path) -> Status:
    """``starting``/``streaming``/``reconnecting``/``unauthorized`` while the publishing pid lives, else ``not running``."""
    record = read_state(state_path(state_dir))
    if record is None:
        return Status(False, NOT_RUNNING, None)
    state = record.get("state")
    if state not in STATES or state == STOPPED or not pid_alive(record.get("pid")):
        return Status(False, NOT_RUNNING, record)
    return Status(True, str(state), record)


class Publisher:
    """Holds the subscriber's record and writes it: at once on a state change, else at most every
    ``flush_interval`` seconds (the cursor moves with every event; a disk write each time is waste).
    """

    def __init__(self, path: Path, record: dict[str, Any], *, flush_interval: float) -> None:
        self.path = path
        self.record: dict[str, Any] = {"version": STATE_VERSION, "pid": os.getpid(), **record}
        self.flush_interval = flush_interval
        self._dirty = False
        #: The error of the last write the disk refused, until one succeeds again.
        self._write_failed: str | None = None

    @property
    def dirty(self) -> bool:
        return self._dirty

    def update(self, **fields: Any) -> None:
        """Change fields; the next ``flush`` writes them."""
        for name, value in fields.items():
            if name not in self.record or self.record[name] != value:
                self.record[name] = value
                self._dirty = True

    def set_state(self, state: str, **fields: Any) -> None:
        """Change the state word and write now: a watcher waits for exactly these moments."""
        if state not in STATES:
            raise ValueError(f"unknown subscriber state {state!r}")
        self.update(state=state, **fields)
        self.flush(force=True)

    def flush(self, *, force: bool = False) -> None:
        """Write the record now if it changed (or ``force``); a write the disk refuses is logged
        and retried by the next flush, never raised.

        A full or read-only disk under a running subscriber must not stop the wakes: the file
        on disk stays whole (the write is atomic) and only grows stale, and a stale cursor makes
        a restart resume earlier, which replays and loses nothing. Raising here killed the part
        that flushed (a turn, the follower) and with it the subscriber.
        """
        if not (self._dirty or force):
            return
        self.record["updated_at"] = utc_now()
        try:
            write_state(self.path, self.record)
        except OSError as exc:
            self._dirty = True  # the periodic flush tries again
            if self._write_failed is None:
                log.warning("state_file_unwritable", path=str(self.path), error=str(exc),
                            hint="turns go on; the file keeps its last good record until the disk takes a write")
            self._write_failed = str(exc)
            return
        if self._write_failed is not None:
            log.info("state_file_writable_again", path=str(self.path), after=self._write_failed)
            self._write_failed = None
        self._dirty = False
