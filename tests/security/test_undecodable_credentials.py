"""A credential the board cannot read is a 401, never a 500 (SPEC §5; docs/security.md).

``guard_middleware`` runs before any route for every client that can reach the loopback port,
token or not. Three shapes of a wrong credential crashed it instead of being refused:

- an ``Authorization`` header with bytes that are not UTF-8 (aiohttp hands them over as
  surrogates, and ``Credentials.check_bearer`` called ``.encode()`` on them);
- a session cookie whose time fields are non-ASCII digits such as ``²`` (``str.isdigit`` accepts
  them, ``int()`` does not: the same trap ``api._INTEGER`` documents for query integers);
- a session cookie with bytes that are not UTF-8 (``check_session`` encoded the signature).

Each was answered ``500 INTERNAL`` with a traceback in the board log (``request_failed``), where
a wrong credential must get ``401 UNAUTHORIZED`` with ``WWW-Authenticate: Bearer``. The board is
a real ``taskd serve`` subprocess and the requests are raw bytes on a socket.
"""

from __future__ import annotations

import pytest

from services.board.auth import SESSION_MARK, session_cookie_name
from tests.support.board import TaskdProcess

from .support_http import exchange, get_once


def request_with(header: bytes) -> bytes:
    return b"GET /api/v1/meta HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n" + header + b"\r\n\r\n"


CASES = {
    "Authorization with non-UTF-8 bytes": lambda cookie: b"Authorization: Bearer tl_\xff\xfe",
    "session cookie with superscript digits": lambda cookie: (
        f"Cookie: {cookie}={SESSION_MARK}.abcd.\u00b2.\u00b2.{'0' * 64}".encode()
    ),
    "session cookie with non-UTF-8 bytes": lambda cookie: (
        f"Cookie: {cookie}={SESSION_MARK}.abcd.1.1.".encode() + b"\xff" * 4
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_an_unreadable_credential_is_401_not_500(taskd: TaskdProcess, case: str) -> None:
    taskd.start()
    token = taskd.token
    board_id = get_once(taskd.url, "/api/v1/meta", {"Authorization": f"Bearer {token}"}).json()["board_id"]
    cookie = session_cookie_name(board_id)

    reply = exchange(taskd.url, request_with(CASES[case](cookie)))

    assert reply.status == 401, f"{case}: expected 401 UNAUTHORIZED, got {reply.status} {reply.body[:200]!r}"
    assert reply.json()["error"]["code"] == "UNAUTHORIZED"
    assert reply.headers.get("www-authenticate", "").startswith("Bearer")
    # Still serving, and the refusal wrote nothing.
    projects = get_once(taskd.url, "/api/v1/projects", {"Authorization": f"Bearer {token}"})
    assert projects.status == 200 and projects.json()["items"] == []
    assert taskd.stop() == 0
    assert b"request_failed" not in taskd.log_path.read_bytes(), "a wrong credential is not the board's own fault"
