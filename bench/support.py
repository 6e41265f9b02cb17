"""Helpers the bench scripts share: waiting on another process's files."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any


def wait_for(what: str, check: Any, timeout: float = 30.0) -> Any:
    """Poll ``check`` until it returns something truthy; benches are scripts, not tests."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)  # polling a file another process writes
    raise RuntimeError(f"timed out waiting for {what}")


def read_json(path: Path) -> dict[str, Any] | None:
    """A JSON file another process writes atomically, or None while it is missing."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None
