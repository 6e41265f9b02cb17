"""One-time login codes: good once, until their expiry to the second, and gone once expired.

A code nobody redeems must not stay for ever: in the board's memory (every engine) and, on
PostgreSQL, as a ``board_secrets`` row any board process could read. Time moves through the
functions' ``now=`` and the board's ``Credentials.clock``, never by sleeping.
"""

from __future__ import annotations

from pathlib import Path

import aiohttp
import psycopg

from services.board import auth
from services.board.keys import CREDENTIALS
from shared.errors import TaskloomError
from tests.support.board import BoardClient, RunningBoard, start_board

API = "/api/v1"
TTL = auth.LOGIN_CODE_TTL


def held(credentials: auth.Credentials) -> set[str]:
    """The codes this process keeps in memory, expired or not."""
    return set(credentials._codes)


# -- in memory (SQLite's board, and each process of a shared one) ---------------------------------


def test_expired_codes_are_forgotten_when_a_code_is_minted_or_redeemed() -> None:
    credentials = auth.Credentials(auth.new_token())
    stale = {credentials.new_login_code(now=0.0) for _ in range(3)}
    assert held(credentials) == stale

    fresh = credentials.new_login_code(now=TTL)  # the first three expire at TTL exactly
    assert held(credentials) == {fresh}, "minting forgets the expired codes"
    assert not any(credentials.redeem_login_code(code, now=TTL) for code in stale)

    later = credentials.new_login_code(now=TTL + 10)
    assert credentials.redeem_login_code("not-a-code", now=2 * TTL) is False
    assert held(credentials) == {later}, "a redemption forgets the expired codes too"
    assert credentials.redeem_login_code(later, now=2 * TTL + 9.5), "still live half a second before its expiry"
    assert credentials.redeem_login_code(later, now=2 * TTL + 9.5) is False, "good once"
    assert held(credentials) == set()


def test_forgetting_is_bounded_per_mint() -> None:
    credentials = auth.Credentials(auth.new_token())
    for _ in range(auth.SWEEP_AT_MOST + 5):
        credentials.new_login_code(now=0.0)
    fresh = credentials.new_login_code(now=TTL)
    assert len(held(credentials)) == 5 + 1, "one mint removes at most SWEEP_AT_MOST"
    credentials.new_login_code(now=TTL)
    assert fresh in held(credentials) and len(held(credentials)) == 2, "the next mint removes the rest"


# -- on PostgreSQL: rows of board_secrets -------------------------------------------------------------


class Clock:
    """Whole wall-clock seconds that move only when the test says so (a stored expiry is whole)."""

    def __init__(self) -> None:
        self.now = 1_900_000_000.0

    def __call__(self) -> float:
        return self.now


def login_rows(url: str) -> dict[str, int]:
    """The login codes board_secrets holds, read past the board, and their expiries."""
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute("SELECT key, value FROM board_secrets WHERE key LIKE 'login:%'").fetchall()
    return {key.removeprefix(auth.LOGIN_PREFIX): int(value) for key, value in rows}


async def mint(board: RunningBoard, http: aiohttp.ClientSession) -> str:
    reply = await BoardClient(board.url, board.token, http).post(f"{API}/login-links")
    assert reply.status == 200, reply.body
    return str(reply.body["url"]).split("code=", 1)[1]


async def redeem(board: RunningBoard, http: aiohttp.ClientSession, code: str) -> int:
    async with http.get(f"{board.url}/login?code={code}", allow_redirects=False) as answer:
        return answer.status


async def test_expired_codes_leave_board_secrets_and_a_live_one_works_once(
    pg_board: RunningBoard, http: aiohttp.ClientSession, postgres_url: str
) -> None:
    clock = Clock()
    pg_board.app[CREDENTIALS].clock = clock
    stale = [await mint(pg_board, http) for _ in range(3)]
    assert set(login_rows(postgres_url)) == set(stale)
    assert set(login_rows(postgres_url).values()) == {int(clock.now + TTL)}

    clock.now += TTL  # they expire now
    fresh = await mint(pg_board, http)
    assert login_rows(postgres_url) == {fresh: int(clock.now + TTL)}, "minting removed the expired rows"
    assert await redeem(pg_board, http, stale[0]) == 401

    # Redeeming sweeps too: these two expire unredeemed, and the next redemption takes them along.
    unused = [await mint(pg_board, http) for _ in range(2)]
    clock.now += TTL - 1  # the fresh code has one second left; the two, minted at the same moment, too
    assert await redeem(pg_board, http, fresh) == 302, "live up to its expiry"
    assert set(login_rows(postgres_url)) == set(unused), "nothing live is swept"
    clock.now += 1
    assert await redeem(pg_board, http, unused[0]) == 401, "refused at its expiry exactly"
    assert login_rows(postgres_url) == {}

    last = await mint(pg_board, http)
    assert await redeem(pg_board, http, last) == 302
    assert await redeem(pg_board, http, last) == 401, "good once"
    assert login_rows(postgres_url) == {}


async def test_a_backlog_of_expired_rows_drains_a_bounded_number_per_mint(
    pg_board: RunningBoard, http: aiohttp.ClientSession, postgres_url: str
) -> None:
    """Rows an older board left behind are removed SWEEP_AT_MOST at a time, never in one sweep."""
    clock = Clock()
    pg_board.app[CREDENTIALS].clock = clock
    backlog = auth.SWEEP_AT_MOST + 20
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO board_secrets (key, value, updated_at)"
            " SELECT 'login:old' || n, %s, '2026-01-01T00:00:00.000Z' FROM generate_series(1, %s) AS n",
            (str(int(clock.now) - 1), backlog),
        )
    first = await mint(pg_board, http)
    assert len(login_rows(postgres_url)) == 20 + 1
    second = await mint(pg_board, http)
    assert set(login_rows(postgres_url)) == {first, second}
    assert await redeem(pg_board, http, first) == 302 and await redeem(pg_board, http, second) == 302


async def test_a_token_rotation_ends_the_login_links_minted_before_it(
    tmp_path: Path, pg_board: RunningBoard, http: aiohttp.ClientSession, postgres_url: str
) -> None:
    """A rotation is how a leaked token is answered, and a login link is the token's power for ten
    minutes: every board process must refuse the links minted before it, not only the one that
    rotated (which forgets its own codes in memory)."""
    other = await start_board(tmp_path / "other", database=postgres_url)
    try:
        minted = [await mint(pg_board, http) for _ in range(2)]
        assert set(login_rows(postgres_url)) == set(minted)
        rotated = await BoardClient(pg_board.url, pg_board.token, http).post(f"{API}/token/rotate")
        assert rotated.status == 200, rotated.body
        assert login_rows(postgres_url) == {}, "the rotation took the links minted under the old token"
        assert await redeem(other, http, minted[0]) == 401, "another process refuses a link from before"
        assert await redeem(pg_board, http, minted[1]) == 401
        token = pg_board.app[CREDENTIALS].token
        reply = await BoardClient(pg_board.url, token, http).post(f"{API}/login-links")
        assert reply.status == 200, reply.body
        after = str(reply.body["url"]).split("code=", 1)[1]
        assert await redeem(other, http, after) == 302, "a link minted after the rotation works anywhere"
    finally:
        await other.runner.cleanup()


# -- a logout on a shared database ------------------------------------------------------------------


class SweepRefused:
    """A shared database that takes the revocation, then goes away before the sweep after it."""

    def __init__(self) -> None:
        self.written: dict[str, str] = {}

    def write_secret(self, key: str, value: str, **_: object) -> str:
        self.written[key] = value
        return value

    def drop_expired_secrets(self, prefix: str, now: float, *, at_most: int) -> int:
        raise TaskloomError("STORE_UNAVAILABLE", "the database server went away")


async def test_a_logout_whose_sweep_the_database_refuses_is_still_done() -> None:
    """The revocation is written: the sweep of expired ones after it is housekeeping, and a 503
    for it would send a retry that this process refuses as logged out (401)."""
    credentials = auth.Credentials(auth.new_token())
    shared = SweepRefused()
    credentials.shared = shared  # type: ignore[assignment]
    session = auth.Session(nonce="n" * 22, issued=int(credentials.clock()), seen=int(credentials.clock()))
    await credentials.end_session(session)
    assert credentials.is_revoked(session.nonce)
    assert list(shared.written) == [auth.REVOKED_PREFIX + session.nonce]
