"""``GET /api/v1/breaches``: the conditions that hold now (docs/conditions.md)."""

from __future__ import annotations

from typing import Any

from ..api import PREFIX, Call, F, Route
from ..queries.breaches import list_breaches


async def breaches(call: Call) -> Any:
    return await call.store.query(list_breaches, **call.query)


ROUTES = [
    Route(
        "GET",
        f"{PREFIX}/breaches",
        breaches,
        "The conditions that hold now (WIP, drained lanes, blocked cards, fired timeouts): read after missed signals",
        query={"project": F("str", description="only this project's conditions")},
    ),
]
