"""One bad entry in ``hub-<key>.registrations.json`` is dropped; it no longer wedges the hub.

docs/hub-protocol.md (*Persistence*): "an entry that cannot be read, is dropped", and the hub
"rehydrates them before it answers ``watch-status`` or registers anything new". A real board, a
real hub, raw TCP clients; the file is written the way a corrupt or hand-edited one would be.
Before, such an entry killed the rehydration task: ``watch-status`` and every new ``watch`` went
unanswered for the hub's life, and the good entries were never restored.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from shared import hub_protocol as hp
from tests.support.board import BoardClient, RunningBoard

from .conftest import RawClient, make_task, start_hub

pytestmark = pytest.mark.asyncio

FAST_WATCH = {"refresh_debounce": 0.03, "refresh_max_wait": 0.2, "refresh_floor": 0.05}


def entry(task: dict[str, Any], path: str, registration_id: str, ttl_ms: Any = 0) -> dict[str, Any]:
    return {
        "registration_id": registration_id,
        "created_at": "2026-05-04T09:12:44.120Z",
        "ttl_ms": ttl_ms,
        "expires_at": None,
        "cards": [{"ref": task["identifier"], "task_id": task["id"], "identifier": task["identifier"], "path": path}],
    }


async def status_within(hub: Any, timeout: float) -> dict[str, Any]:
    raw = await RawClient.greeted(hub)
    try:
        await raw.send(hp.watch_status())
        try:
            return await raw.recv(timeout)
        except TimeoutError:
            raise AssertionError(
                f"watch-status got no answer in {timeout:g} s: rehydration never finished "
                f"(hub.registrations.rehydrated={hub.registrations.rehydrated.is_set()})"
            ) from None
    finally:
        await raw.close()


async def _one_bad_entry(board: RunningBoard, client: BoardClient, tmp_path: Path, bad: dict[str, Any],
                         raw_text: str | None = None) -> None:
    good_task, bad_task = await make_task(client), await make_task(client)
    path = tmp_path / "run" / "hub-test.registrations.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    good_out = tmp_path / "good.md"
    record = {"version": 2, "board": board.url,
              "registrations": [entry(good_task, str(good_out), "w_good"),
                                {**entry(bad_task, bad["path"], "w_bad", bad.get("ttl_ms", 0)), **bad}]}
    text = json.dumps(record)
    if raw_text is not None:
        text = text.replace('"ttl_ms": "__RAW__"', f'"ttl_ms": {raw_text}')
    path.write_text(text)
    hub = await start_hub(board.url, board.token, registrations_path=path, **FAST_WATCH)
    try:
        answer = await status_within(hub, 5.0)
        assert answer["type"] == "watch-status", answer
        assert [r["registration_id"] for r in answer["registrations"]] == ["w_good"]
        # And a new watch is served, not queued behind a rehydration that never ends.
        raw = await RawClient.greeted(hub)
        try:
            await raw.send(hp.watch(ref=good_task["identifier"], out=str(tmp_path / "new.md"), detach=True))
            registered = await raw.recv(5.0)
            assert registered["type"] == "registered", registered
        finally:
            await raw.close()
    finally:
        await asyncio.wait_for(hub.stop(), 15)


async def test_a_path_with_a_nul_in_the_registrations_file_is_dropped(
    board: RunningBoard, client: BoardClient, tmp_path: Path
) -> None:
    # A JSON "\u0000" in a path: os.path.realpath raises ValueError in _without_protected.
    await _one_bad_entry(board, client, tmp_path, {"path": str(tmp_path / "bad\u0000.md")})


async def test_an_infinite_ttl_in_the_registrations_file_is_dropped(
    board: RunningBoard, client: BoardClient, tmp_path: Path
) -> None:
    # Python's json reads 1e400 as inf; int(inf) raises OverflowError, which _parse does not catch.
    await _one_bad_entry(board, client, tmp_path, {"path": str(tmp_path / "bad.md"), "ttl_ms": "__RAW__"},
                         raw_text="1e400")


@pytest.mark.parametrize("text", ["[" * 100_000, '{"version": 2, "registrations": [' + "[" * 100_000 + "]}"],
                         ids=["nested-array", "nested-entry"])
async def test_a_file_nested_deeper_than_the_parser_goes_is_ignored(board: RunningBoard, tmp_path: Path,
                                                                     text: str) -> None:
    """A file that cannot be read is ignored, like a truncated one. ``json.loads`` of a document
    this deep raises RecursionError, not ValueError; before, that killed the rehydration and with
    it every ``watch-status`` and ``watch`` of the hub's life."""
    path = tmp_path / "run" / "hub-test.registrations.json"
    path.parent.mkdir(mode=0o700)
    path.write_text(text)
    hub = await start_hub(board.url, board.token, registrations_path=path, **FAST_WATCH)
    try:
        assert await status_within(hub, 10.0) == {"type": "watch-status", "registrations": []}
    finally:
        await hub.stop()


@pytest.mark.parametrize("ends", [{"ttl_ms": 10**17}, {"created_at": "9999-12-31T23:00:00.000Z", "ttl_ms": 86_400_000}],
                         ids=["huge-ttl", "created-at-the-end-of-time"])
async def test_an_entry_that_ends_past_any_timestamp_is_dropped(
    board: RunningBoard, client: BoardClient, tmp_path: Path, ends: dict[str, Any]
) -> None:
    # Its end cannot be written as a timestamp (year 9999 at most): the snapshot that rehydration
    # writes raised ValueError, and rehydration never ended.
    await _one_bad_entry(board, client, tmp_path, {"path": str(tmp_path / "bad.md"), **ends})
