"""Slow clients cannot hold a connection: idle keep-alive, a trickled head (Slowloris) and a
stalled body are closed by a real ``taskd serve`` within their deadlines; live streams are not."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .support_connections import (
    LimitedTaskd,
    closed_by_server,
    connect,
    get,
    read_head,
    read_reply,
    request_head,
)

#: Short deadlines for the test, seconds (the defaults are 30, 10, 30); the head's is the longest,
#: so a head cut off at HEAD shows that the idle deadline stopped counting once the head began.
IDLE, HEAD, BODY = 1.0, 2.0, 1.0
#: How late past its deadline a close may come (aiohttp timers, a loaded machine).
SLACK = 3.0
DEADLINES = ("--idle-timeout", str(IDLE), "--header-timeout", str(HEAD), "--body-timeout", str(BODY))


@pytest.fixture
def board(tmp_path: Path) -> Iterator[LimitedTaskd]:
    process = LimitedTaskd(data_dir=tmp_path / "data", runtime_dir=tmp_path / "run", log_path=tmp_path / "taskd.log",
                           nofile=(1024, 1024))
    process.start(*DEADLINES, "--ping-interval", "0.2")
    yield process
    process.stop()


def writes_headers(token: str) -> dict[str, str]:
    return {"X-Taskloom-Actor-Kind": "human", "X-Taskloom-Actor": "ann", "Content-Type": "application/json"}


async def project_ids(board: LimitedTaskd) -> list[str]:
    reply = await get(board.port, "/api/v1/projects", token=board.token)
    assert reply.status == 200, reply.body
    return [project["id"] for project in reply.json()["items"]]


async def test_an_idle_connection_is_closed_after_the_idle_timeout(board: LimitedTaskd) -> None:
    silent_reader, silent = await connect(board.port)  # connects and never says a word
    reader, writer = await connect(board.port)  # one request, then keeps the connection idle
    writer.write(request_head("GET", "/health"))
    reply = await read_reply(reader)
    assert reply.status == 200 and reply.headers.get("connection", "").lower() != "close"
    sent, took = await closed_by_server(reader, timeout=IDLE + SLACK)
    assert sent == b"" and took < IDLE + SLACK
    sent, _ = await closed_by_server(silent_reader, timeout=IDLE + SLACK)
    assert sent == b""
    writer.close()
    silent.close()


async def test_a_trickled_head_is_cut_off_at_the_header_deadline(board: LimitedTaskd) -> None:
    """Slowloris: a header line every 0.1 s keeps the connection busy but never ends the head."""
    reader, writer = await connect(board.port)
    writer.write(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    started = time.monotonic()

    async def trickle() -> None:
        for n in range(200):
            writer.write(f"X-Slow-{n}: a\r\n".encode())
            await asyncio.sleep(0.1)  # the attack's pace, not a synchronisation

    trickling = asyncio.ensure_future(trickle())
    try:
        sent, _ = await closed_by_server(reader, timeout=HEAD + SLACK)
    finally:
        trickling.cancel()
        writer.close()
    took = time.monotonic() - started
    assert HEAD * 0.9 <= took < HEAD + SLACK, took
    head, _, body = sent.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408 "), sent
    assert json.loads(body)["error"]["code"] == "REQUEST_TIMEOUT"


async def test_a_stalled_body_is_answered_408_closed_and_writes_nothing(board: LimitedTaskd) -> None:
    body = json.dumps({"id": "slow", "name": "never arrives"}).encode()
    reader, writer = await connect(board.port)
    extra = writes_headers(board.token) | {"Content-Length": str(len(body))}
    writer.write(request_head("POST", "/api/v1/projects", token=board.token, extra=extra) + body[:10])
    started = time.monotonic()
    sent, _ = await closed_by_server(reader, timeout=BODY + SLACK)
    writer.close()
    took = time.monotonic() - started
    assert BODY * 0.9 <= took < BODY + SLACK, took
    head, _, payload = sent.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408 "), sent
    assert json.loads(payload)["error"]["code"] == "REQUEST_TIMEOUT"
    assert "slow" not in await project_ids(board)


async def test_a_body_that_keeps_arriving_is_not_cut_however_long_it_takes(board: LimitedTaskd) -> None:
    """The body deadline is on progress, not on the whole body: 3 s of bytes 0.25 s apart pass."""
    body = json.dumps({"id": "steady", "name": "x" * 10}).encode()
    reader, writer = await connect(board.port)
    extra = writes_headers(board.token) | {"Content-Length": str(len(body))}
    writer.write(request_head("POST", "/api/v1/projects", token=board.token, extra=extra))
    step = max(1, len(body) // 12)
    for start in range(0, len(body), step):
        writer.write(body[start:start + step])
        await writer.drain()
        await asyncio.sleep(BODY / 4)  # the client's pace, not a synchronisation
    reply = await read_reply(reader)
    writer.close()
    assert reply.status == 201, reply.body
    assert "steady" in await project_ids(board)


async def test_a_live_stream_outlives_every_deadline(board: LimitedTaskd) -> None:
    reader, writer = await connect(board.port)
    writer.write(request_head("GET", "/api/v1/events", token=board.token))
    status, headers = await read_head(reader)
    assert status == 200 and headers["content-type"].startswith("text/event-stream")
    started = time.monotonic()
    pings = 0
    while time.monotonic() - started < 2 * max(IDLE, HEAD, BODY) + 1:
        chunk = await asyncio.wait_for(reader.read(65536), timeout=5)
        assert chunk, "the board closed a live stream"
        pings += chunk.count(b":")
    writer.close()
    assert pings >= 5
