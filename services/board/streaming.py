"""Live streaming machinery of the board (the log reader and the open-stream registry).

``setup(app)`` attaches it to the application's lifecycle.
"""

from __future__ import annotations

from aiohttp import web


def setup(app: web.Application) -> None:
    """Nothing to attach until the live stream lands."""
