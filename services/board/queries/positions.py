"""Page cursors that name the board that issued them.

Every list the board pages by its rows' own numbering (``/activities`` by activity id; tasks, the
ready queue, a task's comments and reports by row id) continues after the last row a page handed
out. A board restored from a backup numbers its new rows on from the backup's last id, so the ids
of the history it replaced come again, meaning other rows: a cursor from before the restore,
taken as a position, would resume past new rows it never showed. So these cursors carry the
board's id (``board_id``, new at every restore) before the key, and one from another board is
``410 CURSOR_EXPIRED`` — reason ``restored`` when it is this board's previous id — rather than a
position. A cursor of the older shape (the key alone, issued before cursors named their board) is
taken as it always was.
"""

from __future__ import annotations

from collections.abc import Mapping

from shared.errors import TaskloomError

from .paging import decode_cursor, decode_key_cursor, integer_part


def board_key(meta: Mapping[str, str], *parts: int) -> tuple[str, ...]:
    """The key a page's cursor names: this board, then the row's key (``paging.encode_cursor``)."""
    return (meta.get("board_id", ""), *(str(part) for part in parts))


def resume_after(cursor: str, meta: Mapping[str, str], width: int = 1) -> list[int]:
    """The key of ``width`` integers a page cursor of this board continues after (``board_key``)."""
    try:
        cursor_board, *parts = decode_key_cursor(cursor, width + 1)
    except TaskloomError:  # the older shapes: an integer key, or a composite one of ``width`` parts
        if width == 1:
            return [decode_cursor(cursor)]
        return [integer_part(cursor, part) for part in decode_key_cursor(cursor, width)]
    key = [integer_part(cursor, part) for part in parts]
    if cursor_board != meta.get("board_id"):
        raise cursor_from_another_board(cursor_board, meta)
    return key


def cursor_from_another_board(cursor_board: str, meta: Mapping[str, str]) -> TaskloomError:
    restored = cursor_board == meta.get("previous_board_id")
    return TaskloomError(
        "CURSOR_EXPIRED",
        f"this page cursor was issued by board {cursor_board}, not by this one ({meta.get('board_id')})"
        + (": the board was restored from a backup since, and the rows after the cursor may be"
           " ones the restore undid or new ones numbered alike" if restored else ""),
        details={"reason": "restored" if restored else "another_board", "cursor_board_id": cursor_board,
                 "board_id": meta.get("board_id")},
        hint="page again from the start, or follow from /api/v1/meta's revision",
    )
