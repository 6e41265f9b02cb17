"""Short references: a unique prefix of an id stands for the id, wherever an id is taken.

People copy the first few characters of a uuid (``taskctl task list`` shows identifiers, activity
rows and attachments show ids); the board accepts any prefix that names exactly one row, like git's
abbreviated hashes. A prefix naming several rows is refused with ``409 AMBIGUOUS_REF`` listing
them, never resolved by a guess. Every lookup of a task, attachment, relation or session by id goes
through :func:`resolve_prefix`, so the rule is the same on every route.

Portable SQL only (SQLite and PostgreSQL), and indexed: the prefix is lower-cased and checked
against the id's own alphabet in Python (uuids: hex and ``-``; sessions: ``ses_`` + hex), so no
other text reaches the database; then ``id >= prefix AND id < prefix || 'g'`` narrows to a range
of the primary key, and ``LIKE … ESCAPE`` keeps exactly the ids that start with it. Every
character that can follow the prefix in an id sorts below ``g`` bytewise and in any common
collation (digits and a–f before g; ``-`` and ``_`` below it, or ignored), so the range loses no
match; the ``LIKE`` drops whatever else the range holds. A ref that cannot be a prefix (an
identifier, a typo) costs no query at all.
"""

from __future__ import annotations

import re
from typing import Any, Final

from shared.errors import TaskloomError

#: The shortest prefix looked up, as git's shortest abbreviation: fewer characters name too much.
MIN_PREFIX_CHARS: Final = 4
#: How many candidates an AMBIGUOUS_REF lists (and so how many rows the lookup reads at most).
MAX_CANDIDATES: Final = 10
#: What a prefix of each kind of id may hold (uuid4 text; ``session_id``'s ``ses_`` + hex).
_UUID_PREFIX: Final = re.compile(r"[0-9a-f][0-9a-f-]*")
_SESSION_PREFIX: Final = re.compile(r"ses_[0-9a-f]*")
#: The table behind each kind of id (a closed list: the name is spliced into SQL) and its alphabet.
TABLES: Final = {
    "task": ("tasks", _UUID_PREFIX),
    "attachment": ("attachments", _UUID_PREFIX),
    "relation": ("relations", _UUID_PREFIX),
    "session": ("agent_sessions", _SESSION_PREFIX),
}
#: Above every character an id can hold after a prefix (see the module doc): the range's end.
RANGE_END: Final = "g"
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
    table, alphabet = TABLES[what]
    if len(prefix) < MIN_PREFIX_CHARS or not alphabet.fullmatch(prefix):
        return None
    condition = f" AND ({scope})" if scope else ""
    rows = conn.execute(
        f"SELECT id FROM {table} WHERE id >= ? AND id < ? AND id LIKE ? ESCAPE '{ESCAPE}'{condition}"
        " ORDER BY id LIMIT ?",
        (prefix, prefix + RANGE_END, _like_pattern(prefix), *scope_params, MAX_CANDIDATES + 1),
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
