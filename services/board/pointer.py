"""The board pointers in the runtime directory, so clients find a running board: ``board.json``
(the board started last: what a client that names no data directory finds) and
``board-<key>.json`` for this board's data directory (what a client that names one finds, however
many boards the user runs).

They name the URL, pid, board_id, data_dir and token file, never the token. Each is removed on
exit only if it still names this process (a newer board may have replaced it).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from shared.paths import BOARD_POINTER, board_pointer_for

from .files import ensure_private_dir, write_atomic


def pointer_names(data_dir: str | Path) -> tuple[str, str]:
    return BOARD_POINTER, board_pointer_for(Path(data_dir).resolve())


def write_pointer(runtime: Path, record: dict[str, Any]) -> Path:
    ensure_private_dir(runtime)
    payload = (json.dumps(record, indent=2) + "\n").encode()
    shared, own = pointer_names(record["data_dir"])
    write_atomic(runtime / own, payload)
    write_atomic(runtime / shared, payload)
    return runtime / shared


def remove_pointer_if_mine(runtime: Path, pid: int, data_dir: str | Path) -> None:
    for name in pointer_names(data_dir):
        target = runtime / name
        try:
            record = json.loads(target.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if record.get("pid") == pid:
            target.unlink(missing_ok=True)
