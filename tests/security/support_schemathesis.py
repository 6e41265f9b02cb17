"""Schemathesis hooks for tests/security/test_schemathesis.py (loaded through SCHEMATHESIS_HOOKS).

The bearer token is read from the board's token file for every request, as ``taskctl`` does:
the run also calls ``POST /api/v1/token/rotate``, and a token cached from the start would turn
every later request into a 401.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import schemathesis

#: Where the board under test keeps its token (the test sets it).
TOKEN_FILE_ENV = "TASKLOOM_FUZZ_TOKEN_FILE"


@schemathesis.auth(refresh_interval=None)
class TokenFromFile:
    """The board's current token, from its data directory."""

    def __init__(self) -> None:
        self._seen: tuple[int, int] | None = None
        self._token = ""

    def get(self, case: Any, context: Any) -> str:
        # Read again only when the file changed: a rotation replaces it (a new inode), and the
        # coverage phase asks for the token once per generated case.
        path = Path(os.environ[TOKEN_FILE_ENV])
        info = path.stat()
        if (info.st_ino, info.st_mtime_ns) != self._seen:
            self._token = path.read_text().strip()
            self._seen = (info.st_ino, info.st_mtime_ns)
        return self._token

    def set(self, case: Any, data: str, context: Any) -> None:
        case.headers = {**(case.headers or {}), "Authorization": f"Bearer {data}"}
