"""Requests aiohttp's parser refuses must not echo the token into the log or the answer.

Each request carries the real token where a client would put it (and in the request target,
where a careless one might); the parser refuses it for a framing fault somewhere else on the
line. The board must answer the JSON ``400 VALIDATION_FAILED`` of SPEC §5 with a generic reason,
log one line without the bytes, and keep serving.
"""

from __future__ import annotations

import json

import pytest

from tests.support.board import TaskdProcess

from .support_http import exchange, get_once


def malformed_requests(token: str) -> dict[str, bytes]:
    bearer = f"Authorization: Bearer {token}".encode()
    crlf_head = b"Host: 127.0.0.1\r\n" + bearer
    return {
        "bare LF line endings": b"GET /api/v1/meta HTTP/1.1\nHost: 127.0.0.1\n" + bearer + b"\n\n",
        "NUL after the token": b"GET /api/v1/meta HTTP/1.1\r\n" + crlf_head + b"\x00\r\n\r\n",
        "control character after the token": b"GET /api/v1/meta HTTP/1.1\r\n" + crlf_head + b"\x01\r\n\r\n",
        "DEL after the token": b"GET /api/v1/meta HTTP/1.1\r\n" + crlf_head + b"\x7f\r\n\r\n",
        "over-long header line": b"GET /api/v1/meta HTTP/1.1\r\n" + crlf_head + b"x" * 9000 + b"\r\n\r\n",
        "bad method": b"G@T /api/v1/meta?" + token.encode() + b" HTTP/1.1\r\n" + crlf_head + b"\r\n\r\n",
        "bad version": b"GET /api/v1/meta?" + token.encode() + b" HTTP/9.x\r\n" + crlf_head + b"\r\n\r\n",
        "chunked encoding garbage": (
            b"POST /api/v1/projects HTTP/1.1\r\n" + crlf_head + b"\r\n"
            b"X-Taskloom-Actor: ann\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"zz" + token.encode() + b"\r\n{\"id\": \"leak\"}\r\n0\r\n\r\n"
        ),
    }


def secret_parts(token: str) -> list[bytes]:
    """The token and pieces of it: a truncated echo (LineTooLong cuts the line) still leaks."""
    hex_part = token.removeprefix("tl_")
    return [token.encode(), hex_part[:16].encode(), hex_part[-16:].encode()]


def test_malformed_requests_get_json_400_without_the_token(taskd: TaskdProcess) -> None:
    taskd.start()
    token = taskd.token
    cases = malformed_requests(token)
    for name, request in cases.items():
        reply = exchange(taskd.url, request)
        for part in secret_parts(token):
            assert part not in reply.raw, f"{name}: the answer echoes the token"
        assert reply.status == 400, (name, reply.raw[:300])
        assert reply.headers["content-type"].startswith("application/json"), (name, reply.headers)
        error = reply.json()["error"]
        assert error["code"] == "VALIDATION_FAILED", (name, error)
        assert set(error) == {"code", "message", "details", "hint"}
        assert set(error["details"]) == {"reason"}, (name, error)

    # Still serving, to the same token, after every refusal.
    assert get_once(taskd.url, "/health", {}).json() == {"ok": True}
    meta = get_once(taskd.url, "/api/v1/meta", {"Authorization": f"Bearer {token}"})
    assert meta.status == 200 and meta.json()["board_id"].startswith("brd_")
    projects = get_once(taskd.url, "/api/v1/projects", {"Authorization": f"Bearer {token}"})
    assert projects.status == 200 and projects.json()["items"] == [], "the garbage body wrote nothing"

    assert taskd.stop() == 0
    log = taskd.log_path.read_bytes()
    # Refusals are logged at most once per interval, counted (the last line is written at the stop).
    counted = [json.loads(line)["count"] for line in log.splitlines() if b'"request_unparseable"' in line]
    assert sum(counted) == len(cases), "each refusal is counted once in the log (so the log was read)"
    for part in secret_parts(token):
        assert part not in log, "the board's stderr holds the token"


def test_a_request_line_too_long_is_told_so_not_about_line_endings(taskd: TaskdProcess) -> None:
    """A long query (a filter of 10,000 characters) was answered with the hint about CRLF and
    control characters, which sends the client looking for a fault it does not have."""
    taskd.start()
    reply = exchange(taskd.url, b"GET /api/v1/ready?project=" + b"p" * 10_000 + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    assert reply.status == 400, reply.raw[:300]
    error = reply.json()["error"]
    assert error["details"] == {"reason": "a request line or header line is too long"}, error
    assert "8 KiB" in error["hint"] and "CRLF" not in error["hint"], error
    assert taskd.stop() == 0


@pytest.mark.parametrize("header", ["Authorization", "Cookie"])
def test_a_refused_header_is_not_named_back_by_value(taskd: TaskdProcess, header: str) -> None:
    """The reason is a fixed sentence per fault: it never carries the header's text."""
    taskd.start()
    value = f"Bearer {taskd.token}" if header == "Authorization" else f"taskloom_session=secret-{taskd.token}"
    request = f"GET /api/v1/meta HTTP/1.1\r\nHost: 127.0.0.1\r\n{header}: {value}".encode() + b"\x02\r\n\r\n"
    reply = exchange(taskd.url, request)
    assert reply.status == 400 and reply.json()["error"]["code"] == "VALIDATION_FAILED"
    assert taskd.token[3:19].encode() not in reply.raw and b"secret-" not in reply.raw


def test_aiohttp_server_log_lines_lose_a_parser_errors_quoted_bytes(caplog: pytest.LogCaptureFixture) -> None:
    """Defence in depth for aiohttp paths other than ``handle_error`` that log a parser's exception."""
    import logging

    from aiohttp.http_exceptions import BadHttpMessage

    from services.board.httpserver import redact_aiohttp_server_log

    redact_aiohttp_server_log()
    secret = "tl_" + "ab" * 32
    try:
        raise BadHttpMessage(f"Invalid header value char:\n  b'Authorization: Bearer {secret}\\x01'")
    except BadHttpMessage:
        with caplog.at_level(logging.DEBUG, logger="aiohttp.server"):
            logging.getLogger("aiohttp.server").exception("Error handling request from %s", "127.0.0.1")
    assert caplog.records, "the record was emitted"
    assert secret not in caplog.text
    assert "BadHttpMessage" in caplog.text
