"""Sealed notifications between the board processes on one PostgreSQL database.

``pg_notify`` needs nothing but a login: any role that can connect to the database can send on
any channel, and every board process listening would take its word — a forged log notification
would move a log reader past commits it never read, a forged frames notification would put
invented events into every live stream. So each payload the boards send each other carries an
HMAC-SHA256 of it, keyed by a secret kept in ``board_secrets``: a role that cannot read the board's
secrets cannot seal, and a payload whose seal does not match is dropped by the listener.

The key is made by the first process that opens the database and read by every other. Most
payloads are sealed here, in Python; the frames notification names the head the batch commits at,
which only the server knows at that moment, so its seal is computed in the same statement
(``sql``): the same HMAC, from the key's inner and outer pads and PostgreSQL's ``sha256``.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Final

from psycopg import sql

#: The ``board_secrets`` row that holds the key, hex.
KEY_SECRET: Final = "notification_key"
KEY_BYTES: Final = 32
#: What a seal adds to a payload: 64 hex digits and a space.
SEAL_BYTES: Final = 65
_BLOCK: Final = 64  # SHA-256's block size: HMAC pads the key to it


class NotificationSeal:
    def __init__(self, key: bytes) -> None:
        if len(key) != KEY_BYTES:
            raise ValueError(f"a notification key is {KEY_BYTES} bytes")
        self._key = key
        padded = key.ljust(_BLOCK, b"\0")
        self._inner = bytes(byte ^ 0x36 for byte in padded)
        self._outer = bytes(byte ^ 0x5C for byte in padded)

    def _mac(self, payload: str) -> str:
        return hmac.new(self._key, payload.encode(errors="surrogatepass"), hashlib.sha256).hexdigest()

    def seal(self, payload: str) -> str:
        """``<hmac> <payload>``."""
        return f"{self._mac(payload)} {payload}"

    def open(self, sealed: str) -> str | None:
        """The payload of a sealed notification, or None when its seal is not this key's."""
        mac, separator, payload = sealed.partition(" ")
        # Compared as bytes: ``compare_digest`` refuses ``str`` with non-ASCII characters, which
        # anyone who can notify may send.
        given = mac.encode(errors="surrogatepass")
        if not separator or not hmac.compare_digest(given, self._mac(payload).encode()):
            return None
        return payload

    def sql(self, payload: sql.Composable) -> sql.Composed:
        """The sealed form of a text ``payload`` the server computes, as ``seal`` would give it.
        ``payload`` appears twice: pass a column of a subquery, not an expression with effects."""
        inner = sql.SQL("sha256({} || convert_to({}, 'UTF8'))").format(sql.Literal(self._inner), payload)
        return sql.SQL("encode(sha256({} || {}), 'hex') || ' ' || {}").format(sql.Literal(self._outer), inner, payload)
