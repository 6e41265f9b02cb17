"""``GET /api/v1/tasks/{ref}/history``: the card's History as data (SPEC §8, docs/agents.md).

The same timeline the brief's History section renders (queries/history.py computes it once), as a
JSON list an agent can read to resume interrupted work without parsing markdown. Read and computed
on a reader thread, in one snapshot, like the brief.
"""

from __future__ import annotations

from typing import Any

from ..api import PREFIX, Call, Route
from ..queries.history import task_history


async def history(call: Call) -> Any:
    return await call.store.query(task_history, call.path["ref"])


ROUTES = [
    Route("GET", f"{PREFIX}/tasks/{{ref}}/history", history,
          "A task's History as JSON: the timeline its brief renders, oldest first (heartbeat runs folded)"),
]
