"""Board administration: token rotation and the board's own status (for ``taskctl``).

Rotating the token is not an event (SPEC §4.4): it changes no board state. The new token is
written to the token file first (atomically, owner-only) and only then swapped in memory, so a
failed write leaves the old token working. Every open stream is then closed (without a shutdown
frame), so nothing keeps reading with the old credential; a reconnect must bring the new token.
The answer never carries the token: clients read the file, exactly as they found the old one.
"""

from __future__ import annotations

import asyncio
import functools
import os
import time
from typing import Any

import structlog

from .. import auth
from ..api import PREFIX, Call, Route
from ..client_stream import TOKEN_ROTATED
from ..keys import CREDENTIALS, STREAMS
from ..queries import activities
from ..store import SharedSecrets

log = structlog.get_logger("taskd")
#: When this process started serving, for the status answer's uptime.
_STARTED = time.monotonic()


async def rotate_token(call: Call) -> Any:
    actor = call.actor  # an anonymous rotation is refused like any other write
    path = call.settings.token_path
    token = auth.new_token()
    loop = asyncio.get_running_loop()
    if isinstance(call.store, SharedSecrets):
        # The database's copy is the token every board process on it accepts; its NOTIFY makes
        # the others reload it (app.share_credentials).
        await loop.run_in_executor(None, functools.partial(
            call.store.write_secret, auth.TOKEN_SECRET, token, notify_token=True))
    # fsync off the loop: a slow disk must not stall every open stream.
    await loop.run_in_executor(None, auth.write_token, path, token)
    call.request.app[CREDENTIALS].replace_token(token)
    # Every open stream was authenticated with the old token (or a session it signed): without
    # this, a holder of the old token would keep reading the board until its stream ended.
    registry = call.request.app[STREAMS]
    streams = list(registry)
    for stream in streams:
        stream.end(TOKEN_ROTATED)
    log.info("token_rotated", actor=f"{actor.kind}:{actor.id}", fingerprint=auth.token_fingerprint(token),
             streams_closed=len(streams))
    return {"rotated": True, "token_file": str(path)}


def _status(conn: Any) -> dict[str, Any]:
    meta = activities.board_meta(conn)
    return {"board_id": meta["board_id"], "revision": activities.head(conn), "floor": int(meta.get("floor", "0"))}


async def board_status(call: Call) -> Any:
    from .meta import VERSION

    settings = call.settings
    return {
        **await call.store.query(_status),
        "version": VERSION,
        "pid": os.getpid(),
        "data_dir": str(settings.data_dir),
        "database": settings.database_label,
        "token_file": str(settings.token_path),
        "uptime_seconds": round(time.monotonic() - _STARTED, 1),
    }


ROUTES = [
    Route("POST", f"{PREFIX}/token/rotate", rotate_token,
          "Replace the board token with a new one written to the token file (the answer never holds it)",
          body={}),
    Route("GET", f"{PREFIX}/board/status", board_status,
          "Where this board runs: pid, data directory, database, token file (never the token)"),
]
