"""Who may talk to the board: the bearer token, the browser session cookie, the Host guard.

The token is ``tl_`` + 64 hex in ``<data_dir>/token`` (0600). A session cookie is a nonce signed
with the token, so it survives a board restart and dies with a token rotation. Login links carry
one-time codes held in memory; they expire after ``LOGIN_CODE_TTL``.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import ipaddress
import secrets
import time
from collections.abc import Iterable
from pathlib import Path

from .files import write_atomic

TOKEN_PREFIX = "tl_"
SESSION_COOKIE = "taskloom_session"
LOGIN_CODE_TTL = 600.0
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_hex(32)


def is_token(text: str) -> bool:
    rest = text[len(TOKEN_PREFIX):]
    return text.startswith(TOKEN_PREFIX) and len(rest) == 64 and all(c in "0123456789abcdef" for c in rest)


def write_token(path: Path, token: str) -> None:
    """Write the token owner-only, atomically, so no reader ever sees a half-written file."""
    write_atomic(path, (token + "\n").encode())


def load_or_create_token(path: Path) -> str:
    if path.exists():
        token = path.read_text(encoding="utf-8").strip()
        if not is_token(token):
            raise RuntimeError(f"{path} does not hold a Taskloom token; remove it to create a new one")
        return token
    token = new_token()
    write_token(path, token)
    return token


def token_fingerprint(token: str) -> str:
    """A short, non-reversible name for a token (never the token itself)."""
    return hashlib.sha256(token.encode()).hexdigest()[:16]


class Credentials:
    """The board's current token and the session cookies and login codes derived from it."""

    def __init__(self, token: str) -> None:
        self._token = token
        self._codes: dict[str, float] = {}

    def replace_token(self, token: str) -> None:
        self._token = token
        self._codes.clear()

    def check_bearer(self, header: str | None) -> bool:
        if not header:
            return False
        scheme, _, credentials = header.strip().partition(" ")
        if scheme.lower() != "bearer":  # RFC 9110 §11.1: the scheme is case-insensitive
            return False
        return hmac.compare_digest(credentials.strip().encode(), self._token.encode())

    def _sign(self, nonce: str) -> str:
        return hmac.new(self._token.encode(), f"session:{nonce}".encode(), hashlib.sha256).hexdigest()

    def new_session(self) -> str:
        nonce = secrets.token_hex(16)
        return f"{nonce}.{self._sign(nonce)}"

    def check_session(self, cookie: str | None) -> bool:
        if not cookie or "." not in cookie:
            return False
        nonce, _, signature = cookie.partition(".")
        return hmac.compare_digest(signature.encode(), self._sign(nonce).encode())

    def new_login_code(self, *, now: float | None = None) -> str:
        now = time.monotonic() if now is None else now
        self._codes = {code: expiry for code, expiry in self._codes.items() if expiry > now}
        code = secrets.token_urlsafe(24)
        self._codes[code] = now + LOGIN_CODE_TTL
        return code

    def redeem_login_code(self, code: str, *, now: float | None = None) -> bool:
        now = time.monotonic() if now is None else now
        expiry = self._codes.pop(code, None)
        return expiry is not None and expiry > now


def host_allowed(host_header: str | None, extra_hosts: Iterable[str] = ()) -> bool:
    """DNS-rebinding guard: only loopback names and addresses, or hosts the operator configured."""
    if not host_header:
        return False
    return _host_allowed(host_header, extra_hosts if isinstance(extra_hosts, tuple) else tuple(extra_hosts))


#: Every request asks about one of a handful of Host values; parsing an address each time showed
#: in profiles. Bounded, so a client sending endless distinct names only churns the cache.
@functools.lru_cache(maxsize=256)
def _host_allowed(host_header: str, extra_hosts: tuple[str, ...]) -> bool:
    host = host_header.strip().lower()
    if host.startswith("["):
        host = host[1:].partition("]")[0]
    elif host.count(":") == 1:
        host = host.partition(":")[0]
    if host in LOOPBACK_NAMES or host in {h.lower() for h in extra_hosts}:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
