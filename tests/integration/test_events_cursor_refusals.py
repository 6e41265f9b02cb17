"""Cursors the stream must refuse rather than resolve (SPEC §6.2): a cursor the board cannot place
exactly in its own history is an error the client acts on, never a position it guesses.

Raw HTTP/1.0 sockets, so nothing between the test and the board folds or rewrites headers.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from services.board.keys import STREAMS
from services.board.queries.paging import encode_cursor
from shared import events
from shared.sse import SSEMessage, SSEParser
from tests.support.board import API, BoardClient, RunningBoard, board_running, make_task
from tests.support.waiting import async_wait_until

pytestmark = pytest.mark.asyncio

READ_TIMEOUT = 10.0


def host_port(url: str) -> tuple[str, int]:
    host, _, port = url.removeprefix("http://").rpartition(":")
    return host, int(port)


async def streamable_revisions(board: RunningBoard) -> list[int]:
    noise = tuple(events.WIRE_NOISE)
    marks = ",".join("?" * len(noise))
    return await board.store.query(
        lambda conn: [
            row[0]
            for row in conn.execute(
                f"SELECT revision FROM task_activities WHERE revision IS NOT NULL AND event NOT IN ({marks})"
                " ORDER BY revision",
                noise,
            )
        ]
    )


async def raw_events(
    board: RunningBoard, query: str, header_lines: list[str]
) -> tuple[int, Any, asyncio.StreamReader, asyncio.StreamWriter]:
    """Send GET /api/v1/events by hand; the status, the JSON body of a refusal, and the socket pair."""
    reader, writer = await asyncio.open_connection(*host_port(board.url))
    lines = [
        f"GET /api/v1/events{query} HTTP/1.0",
        f"Host: {board.url.removeprefix('http://')}",
        f"Authorization: Bearer {board.token}",
        "Accept: text/event-stream",
        *header_lines,
    ]
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
    async with asyncio.timeout(READ_TIMEOUT):
        head = await reader.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        body: Any = None
        if status != 200:
            body = json.loads(await reader.read())
    return status, body, reader, writer


async def data_ids_until(reader: asyncio.StreamReader, revision: int) -> list[int]:
    """The ids of the activity frames the stream sends until its cursor reaches ``revision``."""
    parser = SSEParser()
    pending: list[Any] = []
    ids: list[int] = []
    cursor = 0
    async with asyncio.timeout(READ_TIMEOUT):
        while cursor < revision:
            if not pending:
                chunk = await reader.read(65536)
                assert chunk, "the board ended the stream early"
                pending.extend(parser.feed(chunk))
                continue
            item = pending.pop(0)
            if isinstance(item, SSEMessage) and item.id:
                cursor = int(item.id)
                if item.data is not None and item.event is None:
                    ids.append(cursor)
    return ids


async def test_two_last_event_id_headers_are_refused_naming_both(board: RunningBoard, client: BoardClient) -> None:
    """A request carrying ``Last-Event-ID`` twice names two positions. Taking either one can resume
    past rows the client never had (with the later first, every row between the two is skipped),
    so it is ``400 VALIDATION_FAILED`` with both values in ``details``, as the same two values
    folded into one header and a repeated ``?after=`` are; no stream is opened."""
    for n in range(5):
        await make_task(client, title=f"t{n}")
    revisions = await streamable_revisions(board)
    high, low = revisions[3], revisions[1]

    folded, folded_body, _, writer = await raw_events(board, "", [f"Last-Event-ID: {high}, {low}"])
    writer.close()
    assert folded == 400 and folded_body["error"]["code"] == "VALIDATION_FAILED", folded_body

    status, body, reader, writer = await raw_events(board, "", [f"Last-Event-ID: {high}", f"Last-Event-ID: {low}"])
    try:
        if status == 200:
            got = await data_ids_until(reader, revisions[-1])
            skipped = [r for r in revisions if low < r <= high and r not in got]
            pytest.fail(f"two Last-Event-ID headers ({high}, then {low}) were answered 200 and resumed after "
                        f"{high}: revisions {skipped} were skipped")
        assert status == 400 and body["error"]["code"] == "VALIDATION_FAILED", body
        assert body["error"]["details"]["last_event_id"] == [str(high), str(low)], body
    finally:
        writer.close()

    # One header is still a cursor: the stream resumes after it and sends every later row.
    status, body, reader, writer = await raw_events(board, "", [f"Last-Event-ID: {low}"])
    try:
        assert status == 200, body
        assert await data_ids_until(reader, revisions[-1]) == [r for r in revisions if r > low]
    finally:
        writer.close()

    async def no_stream_open() -> bool:
        return len(board.app[STREAMS]) == 0

    await async_wait_until(no_stream_open, what="no stream left open")


@pytest.mark.sqlite_only  # taskd restore is the SQLite file's; a PostgreSQL board is restored with pg_restore
async def test_a_cursor_from_the_history_a_restore_replaced_is_refused(tmp_path: Path) -> None:
    """SPEC §6.2: "a board restored from an older backup must not silently skip". A restore to
    revision R replaces a history that went on to H; a client that followed it holds a cursor in
    (R, H] and state the restore undid. The restored board's counter moves past H, so its new rows
    never reuse a revision of the lost history, and such a cursor is ``410 CURSOR_EXPIRED``
    naming the restore (on the stream and on ``/activities``), before and after the restored board
    writes past it: it is never taken as a position in the new history. A cursor at or below R is
    the same position in both histories and resumes."""
    data_dir = tmp_path / "data"
    backup_file = tmp_path / "board.backup"
    async with aiohttp.ClientSession() as session:
        async with board_running(data_dir) as board:
            client = BoardClient(board.url, board.token, session)
            task = await make_task(client, title="kept")
            taken = await client.post(f"{API}/admin/backup", {"path": str(backup_file)})
            assert taken.status == 200, taken.body
            restored_at = taken.body["revision"]
            for n in range(5):  # the future the restore will lose
                assert (await client.post(f"{API}/tasks/{task['id']}/comments", {"body": f"lost {n}"})).status == 201
            cursor = (await streamable_revisions(board))[-1]  # a client that had seen all of it
            old = (await client.get(f"{API}/meta")).body

        async with board_running(data_dir, restored_from=backup_file) as board:
            client = BoardClient(board.url, board.token, session)
            meta = (await client.get(f"{API}/meta")).body
            assert meta["board_id"] != old["board_id"]
            assert meta["revision"] == old["revision"] + 1, "the restored board's counter is past the lost future"
            expected_details = {"after": cursor, "floor": 0, "reason": "restored",
                                "restored_revision": restored_at, "replaced_head": old["revision"]}

            async def refused() -> None:
                status, body, _, writer = await raw_events(board, "", [f"Last-Event-ID: {cursor}"])
                writer.close()
                assert status == 410 and body["error"]["code"] == "CURSOR_EXPIRED", (status, body)
                assert body["error"]["details"] == expected_details, body
                listed = await client.get(f"{API}/activities?after={cursor}")
                assert listed.status == 410 and listed.body["error"]["details"] == expected_details, listed.body

            await refused()
            # The restored head, where a follower that reset starts (/meta), is no refused cursor.
            status, body, _, writer = await raw_events(board, f"?after={meta['revision']}", [])
            writer.close()
            assert status == 200, body
            for n in range(8):  # the new history, written past the old cursor
                assert (await client.post(f"{API}/tasks/{task['id']}/comments", {"body": f"new {n}"})).status == 201
            revisions = await streamable_revisions(board)
            new = [r for r in revisions if r > restored_at]
            assert len(new) == 8 and min(new) > old["revision"], "no new row reuses a revision of the lost history"
            await refused()

            # The backup's own revision is a position in both histories: every new row follows it.
            status, body, reader, writer = await raw_events(board, f"?after={restored_at}", [])
            try:
                assert status == 200, body
                assert await data_ids_until(reader, revisions[-1]) == new
            finally:
                writer.close()


@pytest.mark.sqlite_only  # taskd restore is the SQLite file's; a PostgreSQL board is restored with pg_restore
async def test_an_activities_page_cursor_from_the_history_a_restore_replaced_is_refused(tmp_path: Path) -> None:
    """Row ids are the log's own numbering, and a restored board numbers its new rows on from the
    backup's last id: the lost history's ids come again, meaning other rows. A client paging
    ``/activities`` that held a cursor late in the lost history used to resume after that id and
    never see the new rows below it. The page cursor names the board that issued it; one from
    before the restore is ``410 CURSOR_EXPIRED`` (reason ``restored``), and a page from the start
    of the restored board shows every row."""
    data_dir = tmp_path / "data"
    backup_file = tmp_path / "board.backup"
    async with aiohttp.ClientSession() as session:
        async with board_running(data_dir) as board:
            client = BoardClient(board.url, board.token, session)
            task = await make_task(client, title="kept")
            assert (await client.post(f"{API}/admin/backup", {"path": str(backup_file)})).status == 200
            for n in range(6):  # the future the restore will lose
                assert (await client.post(f"{API}/tasks/{task['id']}/comments", {"body": f"lost {n}"})).status == 201
            listed = await client.get(f"{API}/activities?limit=1&order=desc")
            assert listed.status == 200, listed.body
            late_cursor = listed.body["next_cursor"]  # just below the newest row of the lost history
            old = (await client.get(f"{API}/meta")).body

        async with board_running(data_dir, restored_from=backup_file) as board:
            client = BoardClient(board.url, board.token, session)
            for n in range(8):  # the new history: its rows take the lost history's ids again
                assert (await client.post(f"{API}/tasks/{task['id']}/comments", {"body": f"new {n}"})).status == 201
            meta = (await client.get(f"{API}/meta")).body
            for order in ("asc", "desc"):
                before = (await client.get(f"{API}/meta")).body["revision"]
                refused = await client.get(f"{API}/activities?cursor={late_cursor}&order={order}")
                assert refused.status == 410 and refused.body["error"]["code"] == "CURSOR_EXPIRED", refused.body
                assert refused.body["error"]["details"] == {
                    "reason": "restored", "cursor_board_id": old["board_id"], "board_id": meta["board_id"]}
                assert (await client.get(f"{API}/meta")).body["revision"] == before  # a refusal writes nothing
            # A cursor the restored board issued pages on through every new row.
            first = await client.get(f"{API}/activities?limit=2")
            assert first.status == 200, first.body
            rest = await client.get(f"{API}/activities?cursor={first.body['next_cursor']}&limit=500")
            assert rest.status == 200, rest.body
            rows = [*first.body["items"], *rest.body["items"]]
            assert [row["event"] for row in rows].count(events.COMMENT_ADDED) == 8, rows


async def test_activities_page_cursors_name_their_board(board: RunningBoard, client: BoardClient) -> None:
    task = await make_task(client)
    for n in range(3):
        assert (await client.post(f"{API}/tasks/{task['id']}/comments", {"body": f"c{n}"})).status == 201
    board_id = (await client.get(f"{API}/meta")).body["board_id"]
    first = await client.get(f"{API}/activities?limit=1")
    rest = (await client.get(f"{API}/activities?cursor={first.body['next_cursor']}&limit=100")).body["items"]
    # A cursor of the older shape (the id alone, issued before cursors named their board) pages on.
    older = await client.get(f"{API}/activities?cursor={encode_cursor(first.body['items'][0]['id'])}&limit=100")
    assert older.status == 200 and older.body["items"] == rest
    foreign = await client.get(f"{API}/activities?cursor={encode_cursor(('brd_0123456789abcdef', '1'))}")
    assert foreign.status == 410 and foreign.error == "CURSOR_EXPIRED", foreign.body
    assert foreign.body["error"]["details"] == {
        "reason": "another_board", "cursor_board_id": "brd_0123456789abcdef", "board_id": board_id}
    for position in ("x1", "-1", "²", ""):
        bad = await client.get(f"{API}/activities?cursor={encode_cursor((board_id, position))}")
        assert (bad.status, bad.error) == (400, "VALIDATION_FAILED"), (position, bad.body)
