"""Label routes (list, GC) and the actor dictionary."""

from __future__ import annotations

from typing import Any

from ..api import LIST_QUERY, PREFIX, Call, F, Route
from ..commands import labels
from ..queries import labels as label_reads

GC_BODY = {
    "project": F("str", description="limit the GC to one project (default: the whole board)"),
    "ttl_days": F("int", minimum=0, maximum=36500,
                  description=f"archive unused labels last used at least this long ago (default {labels.DEFAULT_TTL_DAYS})"),
    "dry_run": F("bool", description="report what would happen; write nothing"),
}


async def list_labels(call: Call) -> Any:
    return await call.store.query(label_reads.list_labels, **call.query)


async def gc(call: Call) -> Any:
    return await call.store.command(labels.gc_labels, call.actor, **call.body)


async def list_actors(call: Call) -> Any:
    return await call.store.query(label_reads.list_actors, **call.query)


ROUTES = [
    Route("GET", f"{PREFIX}/labels", list_labels, "List labels with their use counts",
          query={**LIST_QUERY, "project": F("str"), "archived": F("bool", description="include archived labels")}),
    Route("POST", f"{PREFIX}/labels/gc", gc,
          "Recount label use, repair wrong counts and archive long-unused labels (one label_gc row if any)",
          body=GC_BODY),
    Route("GET", f"{PREFIX}/actors", list_actors, "List the assignee/reporter dictionary",
          query={**LIST_QUERY, "kind": F("str")}),
]
