"""The board pointer: ``board.json`` in the runtime directory, so clients find a running board.

It names the URL, pid, board_id, data_dir and token file, never the token. It is removed on exit
only if it still names this process (a newer board may have replaced it).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from shared.paths import BOARD_POINTER

from .files import ensure_private_dir, write_atomic


def write_pointer(runtime: Path, record: dict[str, Any]) -> Path:
    ensure_private_dir(runtime)
    target = runtime / BOARD_POINTER
    write_atomic(target, (json.dumps(record, indent=2) + "\n").encode())
    return target


def remove_pointer_if_mine(runtime: Path, pid: int) -> None:
    target = runtime / BOARD_POINTER
    try:
        record = json.loads(target.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    if record.get("pid") == pid:
        target.unlink(missing_ok=True)
