"""The hub over real TCP on loopback in front of a real board: protocol, fan-out, ring, resets."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import orjson
import pytest

from services.hub.server import Hub
from shared import hub_protocol as hp
from tests.support.board import BoardClient, RunningBoard, start_board
from tests.support.waiting import async_wait_until

from .conftest import RawClient, activity_count, hub_caught_up, last_revision, make_task, start_board_on, start_hub, write_rows

pytestmark = pytest.mark.asyncio


async def test_hello_welcome_ping(hub: Hub, board: RunningBoard, client: BoardClient) -> None:
    meta = (await client.get("/api/v1/meta")).body
    raw = await RawClient.connect(hub.port)
    await raw.send(hp.hello(hub.token))
    welcome = await raw.recv()
    assert welcome == {
        "type": "welcome",
        "protocol": hp.HUB_PROTOCOL,
        "board": {"url": hp.resolve_board_url(board.url), "board_id": meta["board_id"]},
        "revision": meta["revision"],
    }
    await raw.send({"type": "ping"})
    assert await raw.recv() == {"type": "pong", "revision": meta["revision"], "clients": 1, "registrations": 0}
    await raw.close()


async def test_follow_live_delivers_every_event_in_order(hub: Hub, board: RunningBoard, client: BoardClient) -> None:
    task = await make_task(client)
    await hub_caught_up(hub, board)
    followers = [await RawClient.greeted(hub) for _ in range(3)]
    for raw in followers:
        await raw.send(hp.follow())
        assert await raw.recv() == {"type": "open", "revision": hub.revision, "replay": "live"}
    revisions = await write_rows(board, task, 50)
    comment = await client.post(f"/api/v1/tasks/{task['id']}/comments", {"body": "through the hub"})
    assert comment.status == 201
    for raw in followers:
        got = await raw.events(51)
        assert [m["revision"] for m in got[:50]] == revisions
        last = got[-1]["activity"]
        assert last["event"] == "comment_added" and last["task_id"] == task["id"]
        assert set(last) == {
            "id", "revision", "task_id", "project_id", "actor_kind", "actor_id", "event", "changes", "created_at",
        }
        await raw.close()


async def test_heartbeat_carries_the_revision(board: RunningBoard, client: BoardClient) -> None:
    hub = await start_hub(board.url, board.token, heartbeat_interval=0.1)
    try:
        task = await make_task(client)
        await hub_caught_up(hub, board)
        raw = await RawClient.greeted(hub)
        await raw.send(hp.follow())
        await raw.recv_type("open")
        # The heartbeat records the head even when only noise moved it (a task_heartbeat row is never sent).
        worker = client.as_actor("claude", "w1")
        assert (await worker.post(f"/api/v1/tasks/{task['id']}/claim")).status == 200
        claimed = await raw.recv_type("event")
        assert claimed["activity"]["event"] == "task_claimed"
        assert (await worker.post(f"/api/v1/tasks/{task['id']}/heartbeat")).status == 200
        revision = await last_revision(board)
        assert revision > claimed["revision"]
        while (message := await raw.recv())["type"] != "heartbeat" or message["revision"] < revision:
            assert message["type"] == "heartbeat", "a task_heartbeat row must not be forwarded"
        assert message == {"type": "heartbeat", "revision": revision}
        await raw.close()
    finally:
        await hub.stop()


async def test_ring_replays_a_recent_cursor(hub: Hub, board: RunningBoard, client: BoardClient) -> None:
    task = await make_task(client)
    revisions = await write_rows(board, task, 20)
    await async_wait_until(lambda: _true(hub.revision == revisions[-1]), what="the hub to catch up")
    raw = await RawClient.greeted(hub)
    await raw.send(hp.follow(after=revisions[4]))
    assert await raw.recv() == {"type": "open", "revision": revisions[-1], "replay": "ring"}
    assert [m["revision"] for m in await raw.events(15)] == revisions[5:]
    later = await write_rows(board, task, 3)
    assert [m["revision"] for m in await raw.events(3)] == later
    await raw.close()


async def test_a_cursor_older_than_the_ring_is_reset_then_live(board: RunningBoard, client: BoardClient) -> None:
    hub = await start_hub(board.url, board.token, ring_size=8)
    try:
        task = await make_task(client)
        revisions = await write_rows(board, task, 20)
        await async_wait_until(lambda: _true(hub.revision == revisions[-1]), what="the hub to catch up")
        raw = await RawClient.greeted(hub)
        await raw.send(hp.follow(after=revisions[2]))
        assert await raw.recv() == {"type": "open", "revision": revisions[-1], "replay": "live"}
        assert await raw.recv() == {"type": "reset", "reason": hp.RESET_RING, "revision": revisions[-1]}
        later = await write_rows(board, task, 2)
        assert [m["revision"] for m in await raw.events(2)] == later
        # The ring (8 frames: revisions[-6:] + later) is complete after revisions[-7], and no further back.
        edge = await RawClient.greeted(hub)
        await edge.send(hp.follow(after=revisions[-7]))
        assert (await edge.recv())["replay"] == "ring"
        assert [m["revision"] for m in await edge.events(8)] == [*revisions[-6:], *later]
        beyond = await RawClient.greeted(hub)
        await beyond.send(hp.follow(after=revisions[-8]))
        assert (await beyond.recv())["replay"] == "live"
        assert (await beyond.recv())["type"] == "reset"
        await beyond.close()
        await raw.close()
        await edge.close()
    finally:
        await hub.stop()


async def test_a_cursor_ahead_of_the_hub_is_reset(hub: Hub, board: RunningBoard, client: BoardClient) -> None:
    await make_task(client)
    await hub_caught_up(hub, board)
    raw = await RawClient.greeted(hub)
    await raw.send(hp.follow(after=hub.revision + 100))
    assert (await raw.recv())["type"] == "open"
    assert await raw.recv() == {"type": "reset", "reason": hp.RESET_CURSOR_AHEAD, "revision": hub.revision}
    await raw.close()


async def test_idle_ends_the_stream(hub: Hub, board: RunningBoard) -> None:
    raw = await RawClient.greeted(hub)
    await raw.send(hp.follow(idle_ms=150))
    assert (await raw.recv())["type"] == "open"
    assert await raw.recv() == {"type": "idle", "idle_ms": 150}
    assert await raw.closed()


async def test_ping_answers_while_following(hub: Hub, board: RunningBoard) -> None:
    raw = await RawClient.following(hub)
    await raw.send(hp.ping())
    pong = await raw.recv_type("pong")
    assert pong["clients"] == 1
    await raw.close()


async def test_half_closed_peer_gets_eof_unless_following(hub: Hub, board: RunningBoard) -> None:
    raw = await RawClient.greeted(hub)
    await raw.send(hp.ping())
    raw.writer.write_eof()
    assert (await raw.recv())["type"] == "pong"
    assert await raw.recv() == {"type": "eof"}
    assert await raw.closed()
    streaming = await RawClient.greeted(hub)
    await streaming.send(hp.follow(idle_ms=200))
    streaming.writer.write_eof()
    assert (await streaming.recv())["type"] == "open"
    assert (await streaming.recv())["type"] == "idle"  # the stream outlived our half-close


async def test_a_last_request_without_a_newline_is_answered_at_the_half_close(hub: Hub, board: RunningBoard) -> None:
    """``printf '{"type":"ping"}' | nc -N``: no newline after the last request, then the end of
    input. It used to be dropped, and ``eof`` claimed everything asked had been answered."""
    raw = await RawClient.greeted(hub)
    await raw.send(orjson.dumps(hp.ping()))
    raw.writer.write_eof()
    assert (await raw.recv())["type"] == "pong"
    assert await raw.recv() == {"type": "eof"}
    assert await raw.closed()


# -- bad input: a clear error, the session closed or kept as documented, others unaffected ------


async def _still_serves(hub: Hub) -> None:
    other = await RawClient.greeted(hub)
    await other.send(hp.ping())
    assert (await other.recv())["type"] == "pong"
    await other.close()


@pytest.mark.parametrize(
    ("payload", "code"),
    [
        (hp.hello("th_not_the_token"), hp.UNAUTHORIZED),
        ({"type": "hello", "protocol": hp.HUB_PROTOCOL + 1, "token": "?"}, hp.PROTOCOL_MISMATCH),
        (b"GET / HTTP/1.1\r\n", hp.MALFORMED_LINE),
        ({"type": "ping"}, hp.HELLO_REQUIRED),
    ],
)
async def test_fatal_greetings_close_the_session(hub: Hub, board: RunningBoard, payload: object, code: str) -> None:
    before = await activity_count(board)
    raw = await RawClient.connect(hub.port)
    await raw.send(payload)
    message = await raw.recv()
    assert message["type"] == "error" and message["code"] == code, message
    assert await raw.closed()
    await _still_serves(hub)
    assert await activity_count(board) == before


async def test_wrong_generation_with_the_right_token(hub: Hub, board: RunningBoard) -> None:
    raw = await RawClient.connect(hub.port)
    await raw.send(hp.hello(hub.token, protocol=hp.HUB_PROTOCOL + 1))
    message = await raw.recv()
    assert message["code"] == hp.PROTOCOL_MISMATCH
    assert message["details"] == {"expected": hp.HUB_PROTOCOL, "got": hp.HUB_PROTOCOL + 1}
    assert await raw.closed()
    await _still_serves(hub)


async def test_no_hello_is_closed_after_the_timeout(hub: Hub, board: RunningBoard) -> None:
    before = await activity_count(board)
    silent = await RawClient.connect(hub.port)
    loop = asyncio.get_running_loop()
    started = loop.time()
    message = await silent.recv(timeout=5)
    assert message["code"] == hp.HELLO_TIMEOUT_CODE
    assert await silent.closed()
    assert loop.time() - started >= hub.settings.hello_timeout * 0.9
    await _still_serves(hub)
    assert await activity_count(board) == before


async def test_non_json_after_hello_closes(hub: Hub, board: RunningBoard) -> None:
    raw = await RawClient.greeted(hub)
    await raw.send(b"ping\n")
    assert (await raw.recv())["code"] == hp.MALFORMED_LINE
    assert await raw.closed()
    await _still_serves(hub)


async def test_unknown_type_keeps_the_session(hub: Hub, board: RunningBoard) -> None:
    before = await activity_count(board)
    raw = await RawClient.greeted(hub)
    await raw.send({"type": "move-task", "ref": "DEMO-0001"})
    assert await raw.recv() == {
        "type": "error", "code": hp.UNKNOWN_TYPE, "message": "unknown message type 'move-task'", "details": {"type": "move-task"},
    }
    await raw.send({"type": "follow", "after": "yesterday"})
    assert (await raw.recv())["code"] == hp.VALIDATION_FAILED
    await raw.send(hp.ping())
    assert (await raw.recv())["type"] == "pong"
    await raw.close()
    await _still_serves(hub)
    assert await activity_count(board) == before


async def test_a_two_mib_line_closes_the_session(hub: Hub, board: RunningBoard) -> None:
    before = await activity_count(board)
    raw = await RawClient.greeted(hub)
    try:
        await raw.send(b'{"type":"ping","pad":"' + b"x" * (2 << 20) + b'"}\n')
    except (ConnectionError, OSError):
        pass  # the hub may close before it has read it all
    message = await raw.recv()
    assert message["code"] == hp.PAYLOAD_TOO_LARGE
    assert await raw.closed()
    await _still_serves(hub)
    assert await activity_count(board) == before


async def parked_follower(hub: Hub) -> RawClient:
    """The hub's only follower, once its writer has sent everything and waits for more."""
    raw = await RawClient.following(hub)
    (connection,) = hub.followers
    await async_wait_until(lambda: _true(connection._writer_parked), what="the writer to park")  # noqa: SLF001
    return raw


async def test_a_line_already_queued_leaves_before_a_live_event(hub: Hub, board: RunningBoard, client: BoardClient) -> None:
    """The fan-out's direct write must not overtake what the follower's writer has not sent yet
    (a pong, a heartbeat, a reset queued in the same loop turn)."""
    task = await make_task(client)
    await hub_caught_up(hub, board)
    raw = await parked_follower(hub)
    revision = (hub.revision or 0) + 1
    activity = {"id": revision, "revision": revision, "task_id": task["id"], "event": "comment_added"}
    # One synchronous turn, as when a ping's answer and a board frame meet in one loop iteration.
    (connection,) = hub.followers
    connection.send(hub.pong())
    hub.board_event(revision, activity)
    hub.board_flush()
    assert (await raw.recv())["type"] == "pong"
    assert (await raw.recv())["revision"] == revision
    await raw.close()


async def test_the_events_of_one_board_read_reach_each_follower_in_one_fan_out(
    hub: Hub, board: RunningBoard, client: BoardClient
) -> None:
    """A board that commits a batch sends its frames together; the last of them must not wait for
    the fan-out of the ones before it. A signal between them keeps its place in the stream."""
    task = await make_task(client)
    await hub_caught_up(hub, board)
    followers = [await RawClient.greeted(hub) for _ in range(3)]
    for raw in followers:
        await raw.send(hp.follow(idle_ms=0))
        await raw.recv_type("open")
    first = (hub.revision or 0) + 1
    activities = [{"id": r, "revision": r, "task_id": task["id"], "event": "comment_added"} for r in range(first, first + 3)]
    signal = {"type": "card_unblocked", "project_id": "demo", "task_id": task["id"], "changes": {}, "at": "now"}
    before = hub.fanouts
    # One read from the board, as the link hands it on: two events, a signal, an event.
    hub.board_event(first, activities[0])
    hub.board_event(first + 1, activities[1])
    hub.board_signal(signal)
    hub.board_event(first + 2, activities[2])
    hub.board_flush()
    assert hub.fanouts == before + 2  # the two events before the signal, then the one after it
    for raw in followers:
        got = [await raw.recv() for _ in range(4)]
        assert [(m["type"], m.get("revision")) for m in got] == [
            ("event", first), ("event", first + 1), ("signal", None), ("event", first + 2)]
        await raw.close()


async def test_one_board_read_larger_than_the_outbox_is_caught_up_from_the_ring(
    board: RunningBoard, client: BoardClient
) -> None:
    """A read from the board may hold more events than a follower's outbox takes, while its writer
    is parked with nothing to do: it goes to the ring for them, and nothing is lost."""
    hub = await start_hub(board.url, board.token, max_pending=4)
    try:
        task = await make_task(client)
        await hub_caught_up(hub, board)
        raw = await parked_follower(hub)
        first = (hub.revision or 0) + 1
        revisions = list(range(first, first + 6))
        for revision in revisions:  # one read from the board, as the link hands it on
            hub.board_event(revision, {"id": revision, "revision": revision, "task_id": task["id"], "event": "x"})
        hub.board_flush()
        assert [m["revision"] for m in await raw.events(6)] == revisions
        await raw.close()
    finally:
        await hub.stop()


# -- slow followers never hold up the others ------------------------------------------------------


async def test_a_slow_follower_catches_up_from_the_ring(board: RunningBoard, client: BoardClient) -> None:
    hub = await start_hub(board.url, board.token, max_pending=256)
    try:
        task = await make_task(client)
        await hub_caught_up(hub, board)
        slow = await RawClient.greeted(hub, rcvbuf=16384)
        slow.throttle_on(hub)
        fast = await RawClient.greeted(hub)
        for raw in (slow, fast):
            await raw.send(hp.follow(idle_ms=0))
            await raw.recv_type("open")
        revisions: list[int] = []
        for _ in range(10):
            revisions += await write_rows(board, task, 100, size=1000)
        # The fast follower gets everything while the slow one reads nothing.
        assert [m["revision"] for m in await fast.events(len(revisions))] == revisions
        lagging = [c for c in hub.followers if c.lagging]
        assert len(lagging) == 1, "the silent follower should have left the live fan-out"
        # Then it reads: every event, in order, no reset (the ring still covers it).
        assert [m["revision"] for m in await slow.events(len(revisions))] == revisions
        later = await write_rows(board, task, 2)
        assert [m["revision"] for m in await slow.events(2)] == later
        assert not any(c.lagging for c in hub.followers)
        await slow.close()
        await fast.close()
    finally:
        await hub.stop()


async def test_a_follower_left_behind_the_ring_is_reset(board: RunningBoard, client: BoardClient) -> None:
    hub = await start_hub(board.url, board.token, max_pending=256, ring_size=64)
    try:
        task = await make_task(client)
        await hub_caught_up(hub, board)
        slow = await RawClient.greeted(hub, rcvbuf=16384)
        slow.throttle_on(hub)
        await slow.send(hp.follow(idle_ms=0))
        await slow.recv_type("open")
        revisions = []
        for _ in range(10):
            revisions += await write_rows(board, task, 100, size=1000)
        await async_wait_until(lambda: _true(hub.revision == revisions[-1]), what="the hub")
        seen = []
        while (message := await slow.recv())["type"] == "event":
            seen.append(message["revision"])
        assert message == {"type": "reset", "reason": hp.RESET_RING, "revision": revisions[-1]}
        assert seen == revisions[: len(seen)]  # what it got before the gap was in order
        later = await write_rows(board, task, 1)
        assert [m["revision"] for m in await slow.events(1)] == later
        await slow.close()
    finally:
        await hub.stop()


# -- the board behind the hub ---------------------------------------------------------------------


async def test_a_different_board_behind_the_same_url_is_a_reset(tmp_path: Path) -> None:
    first = await start_board(tmp_path / "a")
    port = int(first.url.rsplit(":", 1)[1])
    hub = await start_hub(first.url, first.token)
    try:
        raw = await RawClient.following(hub)
        old_id = hub.board_id
        await first.runner.cleanup()
        # Another board file, same address and token: the hub must not trust its cursor there.
        (tmp_path / "b").mkdir()
        shutil.copy(tmp_path / "a" / "token", tmp_path / "b" / "token")
        runner, _ = await start_board_on(tmp_path / "b", port)
        try:
            reset = await raw.recv_type("reset")
            assert reset["reason"] == hp.RESET_BOARD_CHANGED and hub.board_id != old_id
            async with __import__("aiohttp").ClientSession() as session:
                second = BoardClient(first.url, first.token, session)
                task = await make_task(second)
                got = await raw.events(2)  # project_created, task_created on the new board
                assert [m["activity"]["event"] for m in got] == ["project_created", "task_created"]
                assert got[-1]["activity"]["task_id"] == task["id"]
            await raw.close()
        finally:
            await runner.cleanup()
    finally:
        await hub.stop()


@pytest.mark.sqlite_only  # restored by copying the data directory back: the SQLite file's backup, not a database's
async def test_a_board_restored_to_an_older_revision_is_a_reset(tmp_path: Path) -> None:
    first = await start_board(tmp_path / "a")
    port = int(first.url.rsplit(":", 1)[1])
    async with __import__("aiohttp").ClientSession() as session:
        client = BoardClient(first.url, first.token, session)
        await make_task(client)
        await first.runner.cleanup()
        backup = tmp_path / "backup"
        shutil.copytree(tmp_path / "a", backup)
        runner, _ = await start_board_on(tmp_path / "a", port)
        hub = await start_hub(first.url, first.token)
        try:
            task = await make_task(client)
            await write_rows_http(client, task, 3)
            head = (await client.get("/api/v1/meta")).body["revision"]
            await async_wait_until(lambda: _true(hub.revision is not None and hub.revision >= head), what="the hub")
            raw = await RawClient.following(hub)
            await runner.cleanup()
            # The same board_id comes back from a backup: the hub's cursor is ahead of its head.
            shutil.rmtree(tmp_path / "a")
            shutil.copytree(backup, tmp_path / "a")
            runner, _ = await start_board_on(tmp_path / "a", port)
            reset = await raw.recv_type("reset")
            assert reset["reason"] == hp.RESET_BOARD_CURSOR_AHEAD
            await raw.close()
        finally:
            await hub.stop()
            await runner.cleanup()


async def write_rows_http(client: BoardClient, task: dict, count: int) -> None:
    for n in range(count):
        assert (await client.post(f"/api/v1/tasks/{task['id']}/comments", {"body": f"note {n}"})).status == 201


async def _true(value: bool) -> bool:
    return value


async def test_a_cursor_the_board_has_compacted_is_a_reset(tmp_path: Path) -> None:
    from services.board.sqlite_store import SqliteStore

    from .conftest import WRITER, bulk_rows

    first = await start_board(tmp_path / "a")
    port = int(first.url.rsplit(":", 1)[1])
    hub = await start_hub(first.url, first.token)
    try:
        async with __import__("aiohttp").ClientSession() as session:
            client = BoardClient(first.url, first.token, session)
            task = await make_task(client)
            await hub_caught_up(hub, first)
            raw = await RawClient.following(hub)
            await first.runner.cleanup()
            # While the board is away, rows are written and retention compacts past the hub's cursor.
            store = SqliteStore(tmp_path / "a" / "board.sqlite")
            store.open()
            try:
                written = await store.command(bulk_rows, WRITER, task["id"], task["project_id"], 3)

                def set_floor(tx: object) -> None:
                    tx.execute("UPDATE board_meta SET value = ? WHERE key = 'floor'", (str(written[-1]),))

                await store.command(set_floor, WRITER)
            finally:
                store.close()
            runner, _ = await start_board_on(tmp_path / "a", port)
            try:
                assert await raw.recv_type("reset") == {
                    "type": "reset", "reason": hp.RESET_BOARD_CURSOR_EXPIRED, "revision": written[-1],
                }
                reply = await client.post(f"/api/v1/tasks/{task['id']}/comments", {"body": "after compaction"})
                assert reply.status == 201
                (event,) = await raw.events(1)
                assert event["activity"]["event"] == "comment_added" and event["revision"] > written[-1]
                await raw.close()
            finally:
                await runner.cleanup()
    finally:
        await hub.stop()


class FreezingProxy:
    """A TCP relay that can stop relaying on the connections it holds: a network that goes silent."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.live: list[asyncio.Event] = []
        self.sockets: list[asyncio.StreamWriter] = []
        self.gates: list[asyncio.Event] = []
        self.connections = 0

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    def freeze(self) -> None:
        for gate in self.live:
            gate.clear()
        self.live = []

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        gate = asyncio.Event()
        gate.set()
        self.live.append(gate)
        self.gates.append(gate)
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        self.sockets += [writer, up_writer]

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    await gate.wait()  # frozen: hold the bytes, keep the sockets open
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                dst.close()

        await asyncio.gather(pump(reader, up_writer), pump(up_reader, writer))

    async def close(self) -> None:
        self.server.close()
        for sock in self.sockets:
            sock.transport.abort()
        for gate in self.gates:
            gate.set()


async def test_a_board_connection_gone_silent_is_replaced(board: RunningBoard, client: BoardClient) -> None:
    proxy = FreezingProxy(int(board.url.rsplit(":", 1)[1]))
    port = await proxy.start()
    hub = await start_hub(f"http://127.0.0.1:{port}", board.token, board_read_timeout=0.5)
    try:
        task = await make_task(client)
        await hub_caught_up(hub, board)
        raw = await RawClient.following(hub)
        streams = hub._link.connects  # noqa: SLF001 - how many times the link opened a stream
        proxy.freeze()  # no FIN, no RST, no pings: only a watchdog notices
        written = await write_rows(board, task, 3)
        assert [m["revision"] for m in await raw.events(3)] == written
        assert hub._link.connects == streams + 1  # noqa: SLF001
        await raw.close()
    finally:
        await hub.stop()
        await proxy.close()


async def test_the_reconnect_ladder_doubles_to_its_cap_and_restarts_after_a_stream(
    board: RunningBoard, client: BoardClient
) -> None:
    import structlog

    port = int(board.url.rsplit(":", 1)[1])
    await board.runner.cleanup()  # nothing listens there now
    with structlog.testing.capture_logs() as logs:
        hub = await start_hub(board.url, board.token, reconnect_min=0.02, reconnect_max=0.08)
        try:
            async def waits() -> list[float]:
                found = [entry["seconds"] for entry in logs if entry["event"] == "board_reconnect_in"]
                return found if len(found) >= 5 else []

            assert (await async_wait_until(waits, what="five reconnect waits"))[:5] == [0.02, 0.04, 0.08, 0.08, 0.08]
            assert hub.board_id is None and hub.revision is None
            # A follower may ask before the board ever answered; it is told the truth once it does.
            raw = await RawClient.greeted(hub)
            await raw.send(hp.follow(after=3, idle_ms=0))
            assert await raw.recv() == {"type": "open", "revision": None, "replay": "live"}
            runner, app = await start_board_on(board.data_dir, port)
            try:
                reset = await raw.recv_type("reset")
                assert reset == {"type": "reset", "reason": hp.RESET_CURSOR_AHEAD, "revision": 0}
                logs.clear()
                await runner.cleanup()  # the stream that opened ends: the ladder starts again at the bottom

                async def restarted() -> list[float]:
                    found = [entry["seconds"] for entry in logs if entry["event"] == "board_reconnect_in"]
                    return found if len(found) >= 2 else []

                assert (await async_wait_until(restarted, what="the ladder to restart"))[:2] == [0.02, 0.04]
            finally:
                await runner.cleanup()
            await raw.close()
        finally:
            await hub.stop()
