"""Descriptor exhaustion against a real ``taskd serve`` under a low ``RLIMIT_NOFILE``.

More idle (or half-sent) connections than the board has descriptors must not cut off
``/health``; streams beyond the descriptor reserve are refused with ``503 TOO_MANY_STREAMS``
and ``Retry-After``, never a reset; the board raises its soft limit to the hard one at start.
"""

from __future__ import annotations

import asyncio
import plistlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.subscriber import units

from .support_connections import (
    LOW_NOFILE,
    LimitedTaskd,
    connect,
    ensure_own_descriptors,
    get,
    read_head,
    read_reply,
    request_head,
)

RESERVE = 64
#: More connections than the board may open at all.
FLOOD = LOW_NOFILE + 100
#: A shipped unit must lift the limit well above the common default of 1024.
UNIT_NOFILE_FLOOR = 4096


@pytest.fixture
def process(tmp_path: Path) -> Iterator[LimitedTaskd]:
    board = LimitedTaskd(data_dir=tmp_path / "data", runtime_dir=tmp_path / "run", log_path=tmp_path / "taskd.log")
    yield board
    if board.process is not None and board.process.poll() is None:
        board.process.kill()
        board.process.wait(timeout=10)


async def test_the_soft_open_file_limit_is_raised_to_the_hard_limit(process: LimitedTaskd) -> None:
    process.nofile = (LOW_NOFILE, 2 * LOW_NOFILE)
    process.start()
    assert process.open_files_limit() == (2 * LOW_NOFILE, 2 * LOW_NOFILE)
    assert (await get(process.port, "/health")).status == 200


async def test_health_answers_while_more_connections_than_the_limit_sit_idle(process: LimitedTaskd) -> None:
    """Half the flood never sends a byte, half stops in the middle of a head (header deadline 60 s)."""
    ensure_own_descriptors(FLOOD + 64)
    process.start("--descriptor-reserve", str(RESERVE), "--idle-timeout", "60", "--header-timeout", "60")
    assert process.open_files_limit() == (LOW_NOFILE, LOW_NOFILE)
    held = []
    for n in range(FLOOD):
        reader, writer = await connect(process.port)
        if n % 2:
            writer.write(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Half: ")
        held.append((reader, writer))
    try:
        for _ in range(5):
            reply = await get(process.port, "/health", timeout=5)
            assert reply.status == 200 and reply.json() == {"ok": True}
        projects = await get(process.port, "/api/v1/projects", token=process.token, timeout=5)
        assert projects.status == 200
        closed = [reader for reader, _ in held if reader.at_eof() or await eof_soon(reader)]
        assert len(closed) >= FLOOD - LOW_NOFILE, "the board cannot hold the whole flood open"
        assert process.open_descriptors() < LOW_NOFILE
        assert process.process is not None and process.process.poll() is None
    finally:
        for _, writer in held:
            writer.close()


async def eof_soon(reader: asyncio.StreamReader) -> bool:
    try:
        return await asyncio.wait_for(reader.read(1), timeout=0.01) == b""
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


async def test_streams_beyond_the_descriptor_reserve_get_503_never_a_reset(process: LimitedTaskd) -> None:
    ensure_own_descriptors(FLOOD + 64)
    process.start("--descriptor-reserve", str(RESERVE), "--max-streams", "1024")
    streams = []
    refused = []
    try:
        for _ in range(FLOOD):
            reader, writer = await connect(process.port)
            writer.write(request_head("GET", "/api/v1/events", token=process.token))
            status, headers = await read_head(reader)  # a reset or a close here fails the test
            if status == 200:
                assert headers["content-type"].startswith("text/event-stream")
                streams.append(writer)
                continue
            reader_body = await reader.readexactly(int(headers["content-length"]))
            refused.append((status, headers, reader_body))
            writer.close()
        assert len(streams) > LOW_NOFILE // 2, "streams were refused long before descriptors ran short"
        assert len(streams) < LOW_NOFILE - RESERVE // 2
        assert len(refused) >= FLOOD - LOW_NOFILE
        for status, headers, body in refused:
            assert status == 503 and headers["retry-after"].isdigit(), (status, headers)
            assert b'"TOO_MANY_STREAMS"' in body and b'"descriptors"' in body
        # The reserve holds for everything else while the streams stay open.
        assert (await get(process.port, "/health", timeout=5)).status == 200
        reader, writer = await connect(process.port)
        writer.write(request_head("GET", "/api/v1/meta", token=process.token, extra={"Connection": "close"}))
        assert (await read_reply(reader)).status == 200
        writer.close()
    finally:
        for writer in streams:
            writer.close()


def test_every_shipped_unit_lifts_the_open_file_limit() -> None:
    for supervisor, files in units.UNIT_FILES.items():
        for name in files.values():
            text = (units.TEMPLATES / supervisor / name).read_text()
            if supervisor == units.SYSTEMD:
                service = text.split("[Service]", 1)[1].split("\n[", 1)[0]
                values = [line.split("=", 1)[1] for line in service.splitlines() if line.startswith("LimitNOFILE=")]
                assert len(values) == 1 and int(values[0]) >= UNIT_NOFILE_FLOOR, (name, values)
            else:
                limits = plistlib.loads(text.encode()).get("SoftResourceLimits", {})
                assert limits.get("NumberOfFiles", 0) >= UNIT_NOFILE_FLOOR, (name, limits)


async def test_a_limit_too_low_for_the_reserve_lowers_the_reserve_and_streams_still_open(process: LimitedTaskd) -> None:
    """128 descriptors cannot keep the default reserve of 128 free: the board keeps a quarter."""
    process.nofile = (128, 128)
    process.start()
    reader, writer = await connect(process.port)
    writer.write(request_head("GET", "/api/v1/events", token=process.token))
    status, _ = await read_head(reader)
    writer.close()
    assert status == 200
    lowered = [line for line in process.log_path.read_text().splitlines() if "descriptor_reserve_lowered" in line]
    assert len(lowered) == 1 and '"reserve": 32' in lowered[0], lowered
