"""``POST /api/v1/export``: one card's brief, read in one snapshot and rendered (SPEC §8).

The board only renders: it returns the markdown and never writes a file, whatever path a caller
has in mind. Gathering and rendering both run on a reader thread, so a large card does not hold
the event loop.
"""

from __future__ import annotations

from typing import Any

from shared.errors import validation

from .. import brief
from ..api import PREFIX, Call, F, Route
from ..dialect import Connection
from ..queries.cards import card_snapshot


def export_card(conn: Connection, ref: str) -> dict[str, Any]:
    """The export answer: the brief and the card's identity and revision (its ETag)."""
    card = card_snapshot(conn, ref)
    task = card["task"]
    return {
        "markdown": brief.render(card),
        "task": {key: task[key] for key in ("id", "identifier", "status", "revision")},
    }


async def export(call: Call) -> Any:
    ref = call.body["ref"].strip()
    if not ref:
        raise validation("ref must name a task (uuid or identifier)", field="ref")
    return await call.store.query(export_card, ref)


ROUTES = [
    Route(
        "POST",
        f"{PREFIX}/export",
        export,
        "Render one card's markdown brief (the board never writes it to a file)",
        body={"ref": F("str", required=True, description="task uuid or identifier")},
    ),
]
