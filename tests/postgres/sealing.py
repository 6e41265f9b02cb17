"""The seal the board processes on one database share (``services/board/notification_seal.py``),
for tests that must speak on their channels as one of them."""

from __future__ import annotations

import psycopg

from services.board.notification_seal import KEY_SECRET, NotificationSeal


def seal_of(url: str) -> NotificationSeal:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT value FROM board_secrets WHERE key = %s", (KEY_SECRET,)).fetchone()
    assert row is not None, "no board has opened the database yet"
    return NotificationSeal(bytes.fromhex(str(row[0])))
