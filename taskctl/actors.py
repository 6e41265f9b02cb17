"""Who is acting: ``--actor``/``--actor-kind`` → ``TASKLOOM_ACTOR``/``TASKLOOM_ACTOR_KIND`` → the
user name as ``human`` (SPEC §4.1)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Actor:
    kind: str
    id: str

    def __str__(self) -> str:
        return f"{self.kind}:{self.id}"


def resolve_actor(actor: str | None = None, kind: str | None = None, *, environ: Mapping[str, str] | None = None) -> Actor:
    """``--actor``/``--actor-kind`` → ``TASKLOOM_ACTOR``/``TASKLOOM_ACTOR_KIND`` → the user as ``human``."""
    env = os.environ if environ is None else environ
    # A blank value is no value: the board would read a blank header as no actor at all.
    actor_id = (actor or "").strip() or (env.get("TASKLOOM_ACTOR") or "").strip() or _user_name()
    actor_kind = (kind or "").strip() or (env.get("TASKLOOM_ACTOR_KIND") or "").strip() or "human"
    return Actor(actor_kind, actor_id)


def _user_name() -> str:
    import getpass

    try:
        return getpass.getuser()
    except Exception:  # noqa: BLE001 - no passwd entry (containers): still a person at a shell
        return "user"
