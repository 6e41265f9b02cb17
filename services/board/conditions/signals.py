"""The live lane: a condition as an id-less ``event: signal`` frame (SPEC §1.7, §6.1).

A signal never moves a cursor and is never replayed; a consumer that missed some reads
``GET /api/v1/breaches``. It is built inside the transaction that noticed it and goes out only
after that transaction committed (the store's effects listeners).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, NamedTuple

import orjson

from shared.conditions import SIGNAL, signal_data
from shared.sse import encode_named

#: The SSE event name of a signal frame.
EVENT: Final = SIGNAL


@dataclass(frozen=True, slots=True)
class Signal:
    type: str
    project_id: str
    task_id: str | None
    changes: dict[str, Any]
    at: str

    def data(self) -> dict[str, Any]:
        return signal_data(
            type_=self.type, project_id=self.project_id, task_id=self.task_id, changes=self.changes, at=self.at
        )

    def wire(self) -> bytes:
        """The complete SSE frame: ``event: signal`` and ``data:``, no ``id:`` line."""
        return encode_named(EVENT, orjson.dumps(self.data()))


class Deadlines(NamedTuple):
    """The temporal conditions of one card that have not fired yet, judged after a commit: the
    timer replaces whatever it held armed for the card with these (an empty tuple disarms it).
    A tuple: every command that touches a card builds one."""

    task_id: str
    #: (type, episode, deadline as POSIX seconds)
    entries: tuple[tuple[str, str, float], ...]
