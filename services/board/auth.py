"""Who may talk to the board: the bearer token, the browser session cookie, the Host guard.

The token is ``tl_`` + 64 hex in ``<data_dir>/token`` (0600). Login links carry one-time codes
held in memory (and, on a shared database, as ``board_secrets`` rows); they expire after
``LOGIN_CODE_TTL``, and each mint or redemption forgets the expired ones, a bounded number at a time
(``SWEEP_AT_MOST``), so codes nobody redeemed do not pile up.

A session cookie is ``tls1.<nonce>.<issued>.<seen>.<signature>``: the times (Unix seconds) are
when the login link was redeemed and when the cookie was last renewed, signed with the token. So
it survives a board restart, dies with a token rotation, and its lifetime is checked by the
board, not left to the browser: it is refused once ``seen`` is ``idle_seconds`` old (renewed on
use, at most every ``RENEW_AFTER`` seconds) or ``issued`` is ``absolute_seconds`` old, whatever
the browser still sends. Logging out revokes the nonce; revocations are kept, owner-only, in
``<data_dir>/revoked-sessions.json`` until the session could not be valid anyway, so a restart
does not bring a logged-out cookie back.

The cookie is named per board (``taskloom_session_<board id>``): cookies ignore ports, so every
server on 127.0.0.1 receives it, and one board must neither overwrite another's cookie nor be
mistaken for it.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import hmac
import ipaddress
import json
import secrets
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

import structlog

from shared.errors import TaskloomError

from .files import write_atomic
from .store import SecretChanged, disk_refused

if TYPE_CHECKING:
    from .store import SharedSecrets

log = structlog.get_logger("taskd.auth")

TOKEN_PREFIX = "tl_"
#: Every board's cookie name starts so; the board id follows (``session_cookie_name``).
SESSION_COOKIE_PREFIX: Final = "taskloom_session_"
#: Marks a cookie value as a Taskloom session, version 1 (as ``tl_`` marks the token).
SESSION_MARK: Final = "tls1"
#: A session unused this long is refused: a browser left logged in is not logged in for ever.
SESSION_IDLE_SECONDS: Final = 12 * 60 * 60
#: No session outlives this, however busy: bounds what a copied cookie is worth.
SESSION_ABSOLUTE_SECONDS: Final = 7 * 24 * 60 * 60
#: A cookie in use is re-issued with a new ``seen`` at most this often (one Set-Cookie a minute).
RENEW_AFTER: Final = 60.0
LOGIN_CODE_TTL = 600.0
#: Expired login codes one mint or redemption removes at most: the work stays bounded however many
#: piled up, and each mint adds one code, so a backlog shrinks.
SWEEP_AT_MOST: Final = 100
#: The token's key among the secrets a shared database keeps (``store.SharedSecrets``), and the
#: prefixes of a login code's and a revoked session's keys.
TOKEN_SECRET: Final = "token"
LOGIN_PREFIX: Final = "login:"
REVOKED_PREFIX: Final = "revoked:"
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


def bearer_of(header: str | None) -> bytes | None:
    """The credential of an ``Authorization: Bearer …`` header, as bytes; None for any other."""
    if not header:
        return None
    scheme, _, credentials = header.strip().partition(" ")
    if scheme.lower() != "bearer":  # RFC 9110 §11.1: the scheme is case-insensitive
        return None
    # Bytes that are not UTF-8 reach us as surrogates: such a credential is simply wrong.
    return credentials.strip().encode(errors="surrogatepass")


def token_fingerprint(token: str) -> str:
    """A short, non-reversible name for a token (never the token itself)."""
    return hashlib.sha256(token.encode()).hexdigest()[:16]


def session_cookie_name(board_id: str) -> str:
    """``taskloom_session_<hex>``: the board id without its ``brd_`` prefix (a cookie-name token)."""
    suffix = "".join(c for c in board_id.removeprefix("brd_") if c.isascii() and c.isalnum())
    return SESSION_COOKIE_PREFIX + suffix


@dataclass(frozen=True, slots=True)
class Session:
    """A session cookie the board accepted: who it was issued to is the nonce, and when."""

    nonce: str
    issued: int
    seen: int
    #: The token generation that signed it (``Credentials.generation``): a rotation while a request
    #: is under way must not renew its cookie under the new token.
    generation: int = 0


class Credentials:
    """The board's current token and the session cookies and login codes derived from it."""

    def __init__(
        self,
        token: str,
        *,
        revoked_path: Path | None = None,
        idle_seconds: float = SESSION_IDLE_SECONDS,
        absolute_seconds: float = SESSION_ABSOLUTE_SECONDS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._token = token
        self._codes: dict[str, float] = {}
        #: Counts token replacements in this process: which token a ``Session`` was checked with.
        self.generation = 0
        self.idle_seconds = idle_seconds
        self.absolute_seconds = absolute_seconds
        #: Wall-clock seconds: a session's times must mean the same after a restart. Tests replace it.
        self.clock = clock
        self.cookie_name = SESSION_COOKIE_PREFIX + "board"  # until ``bind_board`` names it
        self._revoked_path = revoked_path
        self._revoked: dict[str, int] = load_revocations(revoked_path) if revoked_path else {}
        self._saving = asyncio.Lock()
        #: Held by every replacement of the token in this process, from the read or write of the
        #: token's home (the database, on a shared one) to ``replace_token``: a rotation here and
        #: one heard from another process, or two heard at once, each take seconds' fractions in
        #: executor threads, and two run side by side could finish in the other order, leaving
        #: this process, and its token file, on a token the database no longer holds.
        self.replacing = asyncio.Lock()
        #: On a database several board processes serve (``store.SharedSecrets``), login codes and
        #: revocations are rows there too, so any process redeems a code or refuses a cookie.
        self.shared: SharedSecrets | None = None
        #: On such a database: take the token the database holds now, if it is another (set by
        #: ``app.share_credentials``). A bearer this process is about to refuse may be the token
        #: another process's rotation just answered with, before its notification arrived here.
        self.take_stored_token: Callable[[], Awaitable[None]] | None = None

    def bind_board(self, board_id: str) -> None:
        self.cookie_name = session_cookie_name(board_id)

    @property
    def token(self) -> str:
        return self._token

    def replace_token(self, token: str) -> None:
        self._token = token
        self._codes.clear()
        self.generation += 1

    def check_bearer(self, header: str | None) -> bool:
        given = bearer_of(header)
        return given is not None and hmac.compare_digest(given, self._token.encode())

    async def check_bearer_anywhere(self, header: str | None) -> bool:
        """``check_bearer``, and on a shared database, for a bearer shaped like a token that it
        refuses, once more after reading the database's token: a rotation on another process is
        good at once here too (its notification comes a few milliseconds after its answer). A read
        the database refuses leaves the refusal as it was."""
        if self.check_bearer(header):
            return True
        given = bearer_of(header)
        if self.take_stored_token is None or given is None or not is_token(given.decode(errors="replace")):
            return False
        try:
            await self.take_stored_token()
        except (TaskloomError, OSError):  # the database away, the token file unwritable
            return False
        return self.check_bearer(header)

    # -- session cookies ---------------------------------------------------------------------------

    def _sign(self, nonce: str, issued: int, seen: int) -> str:
        message = f"session:{SESSION_MARK}:{nonce}:{issued}:{seen}".encode(errors="surrogatepass")
        return hmac.new(self._token.encode(), message, hashlib.sha256).hexdigest()

    def _cookie(self, nonce: str, issued: int, seen: int) -> str:
        return f"{SESSION_MARK}.{nonce}.{issued}.{seen}.{self._sign(nonce, issued, seen)}"

    def new_session(self) -> str:
        now = int(self.clock())
        return self._cookie(secrets.token_hex(16), now, now)

    def check_session(self, cookie: str | None) -> Session | None:
        """The session of a genuine, unexpired, not revoked cookie; None for anything else."""
        parts = cookie.split(".") if cookie else []
        # ASCII digits only: ``isdigit`` also takes ``²``, which ``int`` refuses.
        if len(parts) != 5 or parts[0] != SESSION_MARK or not all(
            text.isascii() and text.isdigit() for text in parts[2:4]
        ):
            return None
        _, nonce, issued_text, seen_text, signature = parts
        issued, seen = int(issued_text), int(seen_text)
        given = signature.encode(errors="surrogatepass")  # not UTF-8: a wrong signature, not a crash
        if not hmac.compare_digest(given, self._sign(nonce, issued, seen).encode()):
            return None
        now = self.clock()
        if now >= issued + self.absolute_seconds or now >= seen + self.idle_seconds or nonce in self._revoked:
            return None
        return Session(nonce, issued, seen, self.generation)

    def renewal(self, session: Session) -> str | None:
        """A re-issued cookie with ``seen`` = now, when the one in use is due (the sliding part)."""
        now = int(self.clock())
        if session.generation != self.generation or now - session.seen < min(RENEW_AFTER, self.idle_seconds / 4):
            return None  # checked under a token rotated since: signing it anew would outlive the rotation
        return self._cookie(session.nonce, session.issued, now)

    def max_age(self, session: Session) -> int:
        """Seconds the browser should keep the cookie: until the first of its two deadlines."""
        deadline = min(session.seen + self.idle_seconds, session.issued + self.absolute_seconds)
        return max(0, int(deadline - int(self.clock())))

    async def end_session(self, session: Session) -> None:
        """Revoke the session for good: refused at once, and on disk before the logout is answered."""
        now = self.clock()
        revoked_until = int(session.issued + self.absolute_seconds) + 1
        loop = asyncio.get_running_loop()
        if self.shared is not None:
            # Every board process on the database hears of it (the secrets NOTIFY) and refuses it too.
            # The database first: a logout it refuses (503, retry) must leave the session as it was
            # here as well, or this process would refuse the retry as logged out while every other
            # one still accepted the cookie.
            await loop.run_in_executor(None, functools.partial(
                self.shared.write_secret, REVOKED_PREFIX + session.nonce, str(revoked_until), notify_token=True))
        if self._revoked_path is not None:
            await self._save_revocation(session.nonce, revoked_until, now)
        else:
            self._revoked = {nonce: until for nonce, until in self._revoked.items() if until > now}
            self._revoked[session.nonce] = revoked_until
        if self.shared is not None:
            # A revocation outlives its session by nothing: past the session's own deadline the
            # cookie is refused anyway, so the row goes (a bounded number per logout). Only
            # housekeeping: the logout is done, and the database going away now must not answer
            # it 503, whose retry this process would then refuse as logged out (401).
            try:
                await loop.run_in_executor(None, functools.partial(
                    self.shared.drop_expired_secrets, REVOKED_PREFIX, now, at_most=SWEEP_AT_MOST))
            except TaskloomError as exc:
                log.warning("revocation_sweep_failed", error=exc.code, hint="the next logout sweeps them")

    async def _save_revocation(self, nonce: str, revoked_until: int, now: float) -> None:
        """The revocations file with ``nonce`` in it, then the session refused here: the disk
        first, as the database first above. A disk that refuses the file (full, read-only) is a
        503 that leaves the session as it was, so the person's retry ends it for good; refused in
        memory first, the retry met 401 and the next start took the cookie again."""
        assert self._revoked_path is not None
        async with self._saving:  # one writer at a time, each writing the newest list
            revoked = {held: until for held, until in self._revoked.items() if until > now}
            revoked[nonce] = revoked_until
            try:
                # fsync off the loop: a slow disk must not stall every open stream.
                await asyncio.get_running_loop().run_in_executor(None, save_revocations, self._revoked_path, revoked)
            except OSError as exc:
                raise disk_refused(exc, f"could not write {self._revoked_path}", then="; you are still logged in",
                                   hint="free space on the board's disk, then log out again") from None
            # What another process's revocations brought meanwhile (``merge_revocations``) stays.
            self._revoked = {held: until for held, until in {**self._revoked, nonce: revoked_until}.items() if until > now}

    def new_login_code(self, *, now: float | None = None) -> str:
        now = time.monotonic() if now is None else now
        self._forget_expired_codes(now)
        code = secrets.token_urlsafe(24)
        self._codes[code] = now + LOGIN_CODE_TTL
        return code

    def redeem_login_code(self, code: str, *, now: float | None = None) -> bool:
        now = time.monotonic() if now is None else now
        expiry = self._codes.pop(code, None)
        self._forget_expired_codes(now)
        return expiry is not None and expiry > now

    def _forget_expired_codes(self, now: float) -> None:
        """Drop expired codes from the front: codes are added in expiry order (each one TTL after a
        monotonic now), so the first live one ends the walk and the work is the codes it removes."""
        for _ in range(SWEEP_AT_MOST):
            oldest = next(iter(self._codes.items()), None)
            if oldest is None or oldest[1] > now:
                return
            del self._codes[oldest[0]]

    async def mint_login_code(self) -> str:
        """A login code any board process on a shared database redeems (else this one only).

        On a shared database the code is written only while the database still holds the token
        this process checked the request with: another process's rotation reaches this one by a
        notification, a few milliseconds later, and a code minted in between would let the holder
        of the replaced token log in after the rotation (which drops every code written before it).
        """
        code = self.new_login_code()
        if self.shared is not None:
            now, checked_with = self.clock(), self._token
            try:
                await asyncio.get_running_loop().run_in_executor(None, self._mint_shared, code, now, checked_with)
            except SecretChanged:
                self._codes.pop(code, None)
                raise TaskloomError(
                    "UNAUTHORIZED", "the board token was replaced while this request was under way",
                    hint="read the board's token file again (taskctl does) and ask for the link again",
                ) from None
        return code

    def _mint_shared(self, code: str, now: float, checked_with: str) -> None:
        assert self.shared is not None
        self.shared.drop_expired_secrets(LOGIN_PREFIX, now, at_most=SWEEP_AT_MOST)
        self.shared.write_secret(LOGIN_PREFIX + code, str(int(now + LOGIN_CODE_TTL)),
                                 while_holding=(TOKEN_SECRET, checked_with))

    async def redeem_anywhere(self, code: str) -> bool:
        """Redeem a code minted here or, on a shared database, by any board process: once, anywhere."""
        local = self.redeem_login_code(code)
        if self.shared is None or not code:
            return local
        # The database's row decides, wherever the code was minted: whoever deletes it redeems it.
        now = self.clock()
        expiry = await asyncio.get_running_loop().run_in_executor(None, self._redeem_shared, code, now)
        return expiry is not None and int(expiry) > now

    def _redeem_shared(self, code: str, now: float) -> str | None:
        assert self.shared is not None
        expiry = self.shared.take_secret(LOGIN_PREFIX + code)
        self.shared.drop_expired_secrets(LOGIN_PREFIX, now, at_most=SWEEP_AT_MOST)
        return expiry

    def is_revoked(self, nonce: str) -> bool:
        return nonce in self._revoked

    def merge_revocations(self, revoked: dict[str, int]) -> None:
        """Revocations another board process on the shared database wrote."""
        now = self.clock()
        self._revoked = {nonce: until for nonce, until in {**self._revoked, **revoked}.items() if until > now}


def load_revocations(path: Path) -> dict[str, int]:
    """Revoked session nonces and when each could no longer be valid anyway."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except ValueError as exc:
        raise RuntimeError(f"{path} is not a Taskloom revocation list; remove it to start a new one") from exc
    revoked = record.get("revoked") if isinstance(record, dict) else None
    if not isinstance(revoked, dict):
        raise RuntimeError(f"{path} is not a Taskloom revocation list; remove it to start a new one")
    return {str(nonce): int(until) for nonce, until in revoked.items()}


def save_revocations(path: Path, revoked: dict[str, int]) -> None:
    write_atomic(path, json.dumps({"version": 1, "revoked": revoked}, sort_keys=True).encode())


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
