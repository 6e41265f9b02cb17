"""Every kind of ``follow.after`` a person with ``nc`` might type: refused with ``VALIDATION_FAILED``
and the session kept, replayed from the ring, or answered with a ``reset`` (docs/hub-protocol.md)."""

from __future__ import annotations

from typing import Any

import pytest

from shared import hub_protocol as hp
from tests.support.board import BoardClient, RunningBoard

from .conftest import RawClient, hub_caught_up, make_task, start_hub, write_rows

pytestmark = pytest.mark.asyncio


async def test_cursor_edges(board: RunningBoard, client: BoardClient) -> None:
    task = await make_task(client)
    await write_rows(board, task, 20)
    hub = await start_hub(board.url, board.token, ring_size=8)
    try:
        start = await hub_caught_up(hub, board)  # the ring starts here: nothing older is held
        revisions = await write_rows(board, task, 12)  # 12 > ring: base moves to revisions[3]
        head = await hub_caught_up(hub, board)
        assert hub.ring.base == revisions[3]

        async def opening(after: Any) -> list[dict[str, Any]]:
            raw = await RawClient.greeted(hub)
            try:
                await raw.send(b'{"type":"follow","idle_ms":300,"after":' + after + b"}\n")
                records = []
                while (record := await raw.recv())["type"] not in ("idle", "error"):
                    if record["type"] != "heartbeat":
                        records.append(record)
                records.append(record)
                return records
            finally:
                await raw.close()

        def revs(records: list[dict[str, Any]]) -> list[int]:
            return [r["revision"] for r in records if r["type"] == "event"]

        for bad in (b"-1", b'"7"', b"true", b"1.5", b"18446744073709551616", b"[]", b"{}"):
            records = await opening(bad)
            assert records[-1]["type"] == "error" and records[-1]["code"] == hp.VALIDATION_FAILED, (bad, records)
        # Exactly the base: every later event is held.
        records = await opening(str(revisions[3]).encode())
        assert records[0] == {"type": "open", "revision": head, "replay": "ring"}
        assert revs(records) == revisions[4:]
        # One below the base: a reset, then live (nothing replayed).
        records = await opening(str(revisions[2]).encode())
        assert [r["type"] for r in records[:2]] == ["open", "reset"] and records[1]["reason"] == hp.RESET_RING
        assert revs(records) == []
        # Zero and the ring's start of life: reset.
        for after in (b"0", str(start).encode()):
            records = await opening(after)
            assert records[1]["type"] == "reset" and records[1]["reason"] == hp.RESET_RING, (after, records)
        # The head: ring, nothing to replay. Beyond it, or the largest u64: cursor_ahead.
        records = await opening(str(head).encode())
        assert records[0]["replay"] == "ring" and revs(records) == []
        for after in (str(head + 1).encode(), b"18446744073709551615"):
            records = await opening(after)
            assert records[1] == {"type": "reset", "reason": hp.RESET_CURSOR_AHEAD, "revision": head}, records
    finally:
        await hub.stop()
