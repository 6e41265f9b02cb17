"""The card as the conditions judge it: the columns they read, and three facts about it.

One definition serves the two ways the command hook (``conditions.instant``) comes by a card: its
own read of the card, and the ``RETURNING`` of the command's update of it
(``commands.common.write_task``), which hands the hook the card as the database wrote it and so
saves that read — on PostgreSQL a statement and a round trip on the writer for every command.
"""

from __future__ import annotations

from typing import Final

from .rules import POINTED_AT, blocks_pointed_clause

#: The card's columns the conditions read (the instant ones and ``temporal.episodes``): a row is
#: built for every card a command touches, and ``tasks.*`` would cost that many columns more.
COLUMNS: Final = (
    "id", "project_id", "status", "archived_at", "status_since", "updated_at", "created_at", "claimed_by",
    "claimed_by_kind", "heartbeat_at",
)

#: Whether the card blocks anything (its status decides its dependents').
BLOCKS_SOME: Final = "_blocks_some"
#: Whether it holds a condition mark.
MARKED: Final = "_marked"

#: The columns and the three facts, so the common case (no relations, no marks) pays one read:
#: whether it blocks anything, whether anything points ``blocks`` at it, whether it holds a mark.
TERMS: Final = (
    f"{', '.join(f'tasks.{column}' for column in COLUMNS)},"
    f" EXISTS (SELECT 1 FROM relations r WHERE r.type = 'blocks' AND r.source_id = tasks.id) AS {BLOCKS_SOME},"
    f" {blocks_pointed_clause()} AS {POINTED_AT},"
    f" EXISTS (SELECT 1 FROM condition_marks m WHERE m.task_id = tasks.id) AS {MARKED}"
)

#: How many terms ``TERMS`` holds: where terms appended after them begin in a row.
WIDTH: Final = len(COLUMNS) + 3

#: One card by id.
SQL: Final = f"SELECT {TERMS} FROM tasks WHERE id = ?"
