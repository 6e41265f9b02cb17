"""Short references: a unique prefix of an id stands for the id, wherever an id is taken.

People copy the first few characters of a uuid (``taskctl task list`` shows identifiers, activity
rows and attachments show ids); the board accepts any prefix that names exactly one row, like git's
abbreviated hashes. A prefix naming several rows is refused with ``409 AMBIGUOUS_REF`` listing
them, never resolved by a guess. Every lookup of a task, attachment, relation or session by id goes
through :func:`resolve_prefix`, so the rule is the same on every route.

Portable SQL only (SQLite and PostgreSQL): ``LIKE … ESCAPE`` with the prefix lower-cased in
Python. Ids are lower-case (uuids, ``ses_`` + hex), so SQLite's case-insensitive ``LIKE`` and
PostgreSQL's case-sensitive one match the same rows.
"""

from __future__ import annotations

import re
from typing import Any, Final

from shared.errors import TaskloomError

#: The shortest prefix looked up, as git's shortest abbreviation: fewer characters name too much.
MIN_PREFIX_CHARS: Final = 4
#: How many candidates an AMBIGUOUS_REF lists (and so how many rows the lookup reads at most).
MAX_CANDIDATES: Final = 10
#: What a prefix may hold: the characters of our ids. Anything else is no prefix of any id.
_PREFIX_CHARS: Final = re.compile(r"[0-9a-z_-]+")
#: The table behind each kind of id (a closed list: the name is spliced into SQL).
TABLES: Final = {"task": "tasks", "attachment": "attachments", "relation": "relations", "session": "agent_sessions"}
ESCAPE: Final = "!"


def _like_pattern(prefix: str) -> str:
    escaped = prefix.replace(ESCAPE, ESCAPE * 2).replace("%", ESCAPE + "%").replace("_", ESCAPE + "_")
    return escaped + "%"


def resolve_prefix(conn: Any, what: str, ref: str, *, scope: str = "", scope_params: tuple[Any, ...] = ()) -> str | None:
    """The one id of a ``what`` row starting with ``ref``; None when none does.

    ``scope`` is an extra SQL condition (with ``scope_params``) the rows must meet, e.g. the task a
    relation must touch. Called after the exact lookup failed, so a full id never comes here.
    Raises ``409 AMBIGUOUS_REF`` naming the candidates when several rows start with ``ref``.
    """
    prefix = ref.strip().lower()
    if len(prefix) < MIN_PREFIX_CHARS or not _PREFIX_CHARS.fullmatch(prefix):
        return None
    table = TABLES[what]
    condition = f" AND ({scope})" if scope else ""
    rows = conn.execute(
        f"SELECT id FROM {table} WHERE id LIKE ? ESCAPE '{ESCAPE}'{condition} ORDER BY id LIMIT ?",
        (_like_pattern(prefix), *scope_params, MAX_CANDIDATES + 1),
    ).fetchall()
    if not rows:
        return None
    if len(rows) == 1:
        return str(rows[0][0])
    candidates = [str(row[0]) for row in rows[:MAX_CANDIDATES]]
    more = len(rows) > MAX_CANDIDATES
    raise TaskloomError(
        "AMBIGUOUS_REF",
        f"{ref!r} is the start of {'more than ' if more else ''}{len(candidates)} {what} ids: {', '.join(candidates)}",
        details={what: ref, "candidates": candidates, "more": more},
        hint="give more characters of the id (or the whole id)",
    )
