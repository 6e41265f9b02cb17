"""Acceptance routes: read the criteria, add items or override the mode, prune an item."""

from __future__ import annotations

from typing import Any

from shared import domain

from ..api import PREFIX, Call, F, Route
from ..commands import acceptance
from ..queries.acceptance import get_acceptance
from .tasks import IF_VERSION


async def show(call: Call) -> Any:
    return await call.store.query(get_acceptance, call.path["ref"])


async def change(call: Call) -> Any:
    return await call.store.command(acceptance.change_acceptance, call.actor, call.path["ref"], **call.body)


async def prune(call: Call) -> Any:
    return await call.store.command(
        acceptance.prune_acceptance, call.actor, call.path["ref"], call.path["item"], **call.query
    )


TASK = f"{PREFIX}/tasks/{{ref}}"
ROUTES = [
    Route("GET", f"{TASK}/acceptance", show, "A task's acceptance mode, items and list revision"),
    Route("POST", f"{TASK}/acceptance", change, "Add acceptance items and/or override the acceptance mode",
          body={
              "items": F("list", items="str", description="item texts to add, in order"),
              "mode": F("str", enum=domain.ACCEPTANCE_MODES),
              "reason": F("str", description="why the mode changes (at least 8 characters); only with mode"),
              "if_version": IF_VERSION,
          }),
    Route("DELETE", f"{TASK}/acceptance/{{item}}", prune, "Prune one acceptance item (audited with the reason)",
          query={
              "reason": F("str", required=True, description="why the item goes (at least 8 characters)"),
              "if_version": IF_VERSION,
          }),
]
