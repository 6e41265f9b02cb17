"""Card-brief registrations (SPEC §7.4): the room for ``watch``, ``watch-status``, ``watch-stop``.

Not built yet. The hub already counts registrations where the protocol needs them (``pong``, the
idle exit), and the file they persist to is ``HubFiles.registrations``. To land them: give this
class the registry (owner / viewer / covered, serialised registration, persistence with
``version: 2``), add validators to ``protocol.REQUEST_VALIDATORS`` and handlers to
``server.Connection``'s dispatch table, and re-render every registration after the board link
reconnects.
"""

from __future__ import annotations


class Registrations:
    """The hub's registrations; none until SPEC §7.4 is built."""

    def count(self) -> int:
        return 0

    def board_reconnected(self) -> None:
        """The board link came back: every registration re-renders (SPEC §7.2). Nothing to do yet."""
