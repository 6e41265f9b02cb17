"""The board's settings: one frozen object the app and its parts read (``app[SETTINGS]``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from . import auth
from .store import Actor


@dataclass(frozen=True)
class BoardSettings:
    data_dir: Path
    host: str = "127.0.0.1"
    port: int = 7431
    #: Extra Host header names accepted besides loopback (the DNS-rebinding guard).
    allowed_hosts: tuple[str, ...] = ()
    default_actor: Actor | None = None
    max_streams: int = 1024
    ping_interval: float = 15.0
    retry_ms: int = 1000
    stream_lifetime: float | None = None
    #: How often another process's commits are looked for (PRAGMA data_version), seconds.
    external_poll_interval: float = 0.05
    claim_fresh_seconds: float = 10 * 60
    claim_stale_seconds: float = 6 * 60 * 60
    archive_quiet_seconds: float = 0.0
    #: Connection deadlines, seconds (services/board/connections.py): idle keep-alive, a request
    #: head from its first byte, a request body between two reads.
    idle_timeout: float = 30.0
    header_timeout: float = 10.0
    body_timeout: float = 30.0
    #: Descriptors kept free for /health and ordinary requests: new streams are refused below
    #: this many free, idle connections are closed below half of it.
    descriptor_reserve: int = 128
    #: The browser session's sliding idle limit and its absolute limit (auth.py).
    session_idle_seconds: float = auth.SESSION_IDLE_SECONDS
    session_absolute_seconds: float = auth.SESSION_ABSOLUTE_SECONDS

    @property
    def database_path(self) -> Path:
        return self.data_dir / "board.sqlite"

    @property
    def token_path(self) -> Path:
        return self.data_dir / "token"

    @property
    def attachments_dir(self) -> Path:
        return self.data_dir / "attachments"

    @property
    def revoked_sessions_path(self) -> Path:
        return self.data_dir / "revoked-sessions.json"
