"""Where Taskloom keeps things on this machine, computed from an environment mapping (no I/O).

The runtime directory holds the board pointer and the hub files (SPEC §7.1); the data directory
holds the board's SQLite file, token and attachments.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path

BOARD_POINTER = "board.json"


def board_pointer_for(data_dir: Path) -> str:
    """The name of the pointer of the board serving ``data_dir`` (absolute, symlinks resolved):
    one per data directory beside ``board.json`` (the board started last), so two boards of one
    user under one runtime directory are each found by a client that names its data directory."""
    digest = hashlib.sha256(str(data_dir).encode("utf-8", "surrogateescape")).hexdigest()[:16]
    return f"board-{digest}.json"
#: Where ``taskd serve`` listens unless told otherwise (and where ``loop install`` points the units).
BOARD_PORT = 7431


def runtime_dir(environ: Mapping[str, str], home: Path, *, windows: bool = False) -> Path:
    if environ.get("TASKLOOM_RUNTIME_DIR"):
        return Path(environ["TASKLOOM_RUNTIME_DIR"])
    if windows and environ.get("LOCALAPPDATA"):
        return Path(environ["LOCALAPPDATA"]) / "taskloom" / "run"
    if environ.get("XDG_RUNTIME_DIR"):
        return Path(environ["XDG_RUNTIME_DIR"]) / "taskloom"
    return home / ".taskloom" / "run"


def data_dir(environ: Mapping[str, str], home: Path, *, platform: str = "linux") -> Path:
    if environ.get("TASKLOOM_DATA_DIR"):
        return Path(environ["TASKLOOM_DATA_DIR"])
    if platform == "darwin":
        return home / "Library" / "Application Support" / "taskloom"
    if platform == "win32" and environ.get("LOCALAPPDATA"):
        return Path(environ["LOCALAPPDATA"]) / "taskloom"
    if environ.get("XDG_DATA_HOME"):
        return Path(environ["XDG_DATA_HOME"]) / "taskloom"
    return home / ".local" / "share" / "taskloom"
