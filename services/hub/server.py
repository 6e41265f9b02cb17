"""The hub: one board link fanned out to local NDJSON sessions on 127.0.0.1 (SPEC §7.2–7.3).

``Hub`` owns the listening socket, the board link, the replay ring and the open connections.
``Connection`` is the thin I/O shell around a ``protocol.Session``: it reads bytes, feeds them
to the session and carries out the actions; its writer task writes what is queued, and the
fan-out writes live events itself only while that task is parked with nothing queued.

Latency: the board link parses the board's bytes in the callback that received them and calls
``board_event`` for each frame, then ``board_flush``; the flush writes the events of that read
to every follower as one buffer, straight to the transport while it is under
``WRITE_HIGH_WATER``. No task or queue stands between the board's socket and the followers'.
What can wait does: the ring and the card briefs take the events after the writes.

Slow followers: each follower's outbox is bounded (``max_pending`` lines). A follower whose
outbox is full leaves the live fan-out; once it has written what it holds, it catches up from
the ring by its own cursor and rejoins, so it loses nothing while the ring still covers it. If
the ring has moved past its cursor it gets ``reset {reason: "ring"}`` and continues live. Other
followers never wait for it.

Signals: the board's condition frames are forwarded as ``signal`` records, encoded once for all
followers. They are not in the ring and carry no revision, so nothing replays them: a follower
that was away, or whose outbox was full, misses them, as a browser that was away does, and reads
``GET /api/v1/breaches`` for what holds now (docs/conditions.md).

Dead peers: a peer that is gone must leave ``clients`` at once, not at the second heartbeat. A
reset or a failed write ends the session as soon as the transport notices; a follower that
closed its sending side (or whose process died, which looks the same: a FIN) is probed with a
heartbeat every ``HALF_CLOSED_PROBE`` seconds, so a vanished one is answered with RST and dropped
on the next write. Accepted sockets carry TCP keepalive with short timers for peers whose host
stops answering altogether.

A board that answers 401 ends the hub: every session is told ``error UNAUTHORIZED`` and the hub
stops, so clients holding the current token start the hub that is keyed by it (SPEC §7.1).
"""

from __future__ import annotations

import asyncio
import secrets
import socket
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from shared import hub_protocol as hp
from shared.ndjson import encode_line

from .board_link import BoardLink
from .histories import ReplacedHistories
from .protocol import Close, Request, Send, Session
from .registrations import Refused, Registrations, Watcher, WatchSettings
from .ring import Ring
from .settings import MAX_PENDING as MAX_PENDING  # re-exported: long imported from here
from .settings import HubSettings

log = structlog.get_logger("taskhub")

#: Bytes asked of the socket per read.
READ_CHUNK = 64 * 1024
#: Lines the catch-up copies from the ring per step, so one follower cannot hog the loop.
CATCH_UP_BATCH = 512
#: How long a closing session may take to hand its last lines to the peer, seconds.
SHUTDOWN_GRACE = 2.0
#: After a fatal error: how long, and how many bytes, the hub drains from a peer before closing.
LINGER = 1.0
LINGER_BYTES = 4 << 20
#: Bytes a transport may hold before live events go through the outbox and ``drain()``.
WRITE_HIGH_WATER = 64 * 1024
#: TCP keepalive on accepted sockets: first probe after this many idle seconds, then one every
#: interval; after ``KEEPALIVE_COUNT`` unanswered probes the kernel resets the connection.
KEEPALIVE_IDLE = 5
KEEPALIVE_INTERVAL = 1
KEEPALIVE_COUNT = 3
#: At most one ``connections_dropped_before_hello`` log line per this many seconds.
DROP_LOG_INTERVAL = 5.0
#: Heartbeat interval once a follower has half-closed, seconds: a write is the only way to learn
#: whether the peer is still there (data after a close is answered with RST, RFC 1122 §4.2.2.13).
HALF_CLOSED_PROBE = 1.0

#: ``hp.event`` as orjson writes it, around the activity's own JSON.
_EVENT_HEAD = b'{"type":"event","revision":'
_EVENT_ACTIVITY = b',"activity":'


def event_line(revision: int, activity: dict[str, Any], data: str | None = None) -> bytes:
    """The ``event`` line for one board frame.

    With ``data`` (the frame's JSON text, which parsed as ``activity``) its bytes are spliced in
    rather than decoded and encoded again: for the board's own frames (orjson's compact output)
    the line is the very bytes ``encode_line(hp.event(...))`` gives. A data field that spans
    several SSE lines would break the line, so it is encoded again instead.
    """
    if data is None or "\n" in data or "\r" in data:
        return encode_line(hp.event(revision=revision, activity=activity))
    return b"%b%d%b%b}\n" % (_EVENT_HEAD, revision, _EVENT_ACTIVITY, data.encode())


class Hub:
    def __init__(self, settings: HubSettings, *, token: str | None = None) -> None:
        self.settings = settings
        #: The loop the hub runs on, looked up once: ``asyncio.get_running_loop()`` costs a
        #: ``getpid()`` system call, which the fan-out would pay before its first write.
        self._loop = asyncio.get_running_loop()
        self.board_url = hp.resolve_board_url(settings.board_url)
        #: The hub's own per-process token, published in the pointer (never the board token).
        self.token = token or "th_" + secrets.token_hex(24)
        self.ring = Ring(settings.ring_size)
        #: Revision ranges of histories the board replaced (restores): never replayed across.
        self.histories = ReplacedHistories()
        self.board_id: str | None = None
        #: The newest board revision seen; None until the board first answers.
        self.revision: int | None = None
        #: Event lines encoded since start: one per board event, however many followers.
        self.lines_encoded = 0
        #: Fan-outs since start: one per read from the board that carried events, however many.
        self.fanouts = 0
        #: The events of the current read from the board as (revision, line, activity): the lines
        #: go to the followers at ``board_flush``, then to the ring and the card briefs.
        self._batch: list[tuple[int, bytes, dict[str, Any]]] = []
        self.registrations = Registrations(
            self.board_url,
            settings.board_token,
            settings=WatchSettings(
                debounce=settings.refresh_debounce,
                max_wait=settings.refresh_max_wait,
                floor=settings.refresh_floor,
                path=settings.registrations_path,
                protected=settings.protected_dirs,
            ),
            revision=lambda: self.revision,
            on_change=self._arm_idle_exit,
        )
        self.connections: set[Connection] = set()
        self.followers: set[Connection] = set()
        #: Connections that have not said hello yet, oldest first (a dict keeps insertion order).
        self._awaiting_hello: dict[Connection, None] = {}
        #: Connections closed unheard because too many others were waiting for their hello.
        self.dropped_before_hello = 0
        self._drop_logged_at = float("-inf")
        self.port = 0
        self.started_at = time.time()
        self.stopped = asyncio.Event()
        self._stopping = False
        self._stop_requested = asyncio.Event()
        self._stop_task: asyncio.Task[None] | None = None
        self._server: asyncio.Server | None = None
        self._link = BoardLink(
            settings.board_url,
            settings.board_token,
            self,
            reconnect_min=settings.reconnect_min,
            reconnect_max=settings.reconnect_max,
            read_timeout=settings.board_read_timeout,
        )
        self._link_task: asyncio.Task[None] | None = None
        self._idle_timer: asyncio.TimerHandle | None = None
        #: The ``error`` the hub ended with when the board refused its token; None otherwise.
        self.failure: dict[str, Any] | None = None

    @property
    def clients(self) -> int:
        """Sessions that said hello (what ``pong.clients`` counts)."""
        return sum(1 for connection in self.connections if connection.session.greeted)

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> int:
        """Listen, reach for the board, and return the port."""
        self._server = await asyncio.start_server(
            self._accept, self.settings.host, self.settings.port, limit=self.settings.max_line + 2
        )
        self.port = self._server.sockets[0].getsockname()[1]
        self._link_task = asyncio.create_task(self._link.run(), name="board-link")
        self._link_task.add_done_callback(self._link_ended)
        try:
            await asyncio.wait_for(self._link.first_attempt.wait(), self.settings.first_contact_timeout)
        except TimeoutError:
            pass  # serve anyway: followers wait for the board with us
        if self.failure is not None:
            return self.port  # the board refused the token at once: the hub is already stopping
        await self.registrations.start()
        self._arm_idle_exit()
        log.info("hub_listening", port=self.port, board=self.board_url, board_id=self.board_id, revision=self.revision)
        return self.port

    def request_stop(self, reason: str = "hub_stopping", *, farewell: dict[str, Any] | None = None) -> None:
        """Begin stopping (a signal, the idle exit, a dead link) from synchronous code.

        The shutdown runs as one task the hub keeps; ``stop`` and ``wait_stopped`` await it, so
        nothing on the shutdown path is left without an owner.
        """
        if self._stop_task is None:
            self._stopping = True
            self._stop_requested.set()
            self._stop_task = self._loop.create_task(
                self._shutdown(reason, farewell=farewell), name="hub-stop"
            )

    async def stop(self, reason: str = "hub_stopping", *, farewell: dict[str, Any] | None = None) -> None:
        """Say ``shutdown`` (or ``farewell``, an ``error``) to every session, close them, and let go of the board."""
        self.request_stop(reason, farewell=farewell)
        await self.wait_stopped()

    async def wait_stopped(self) -> None:
        """Until a stop was requested and has finished; its failure is raised here."""
        await self._stop_requested.wait()
        assert self._stop_task is not None
        await asyncio.shield(self._stop_task)

    def close_listener(self) -> None:
        """Stop accepting: the listening socket closes now (the forced path calls this too)."""
        if self._server is not None:
            self._server.close()

    async def _shutdown(self, reason: str, *, farewell: dict[str, Any] | None) -> None:
        log.info("hub_stopping", reason=reason, clients=len(self.connections))
        if self._idle_timer is not None:
            self._idle_timer.cancel()
        self.close_listener()
        for connection in list(self.connections):
            connection.shutdown(reason, farewell=farewell)
        tasks = [c.task for c in self.connections if c.task is not None]
        if tasks:
            done, pending = await asyncio.wait(tasks, timeout=SHUTDOWN_GRACE)
            for connection in list(self.connections):
                connection.abort()
            if pending:
                await asyncio.wait(pending, timeout=SHUTDOWN_GRACE)
        # After the sessions: foreground registrations ended with them; detached ones stay on disk.
        await self.registrations.stop()
        if self._link_task is not None:
            self._link_task.cancel()
            await asyncio.gather(self._link_task, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
        self.stopped.set()
        log.info("hub_stopped")

    def _link_ended(self, task: asyncio.Task[None]) -> None:
        """The link loop never returns on its own; if it does, the hub is deaf, so it stops loudly."""
        if self._stopping or task.cancelled() or self.failure is not None:
            return
        log.error("board_link_ended", error=repr(task.exception()))
        self.request_stop("board_link_ended")

    def _arm_idle_exit(self) -> None:
        """Exit after ``idle_exit`` seconds with no connection and no registration (SPEC §7.1)."""
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
        if self.settings.idle_exit <= 0 or self._stopping or self.connections or self.registrations.count():
            return
        self._idle_timer = self._loop.call_later(self.settings.idle_exit, self._idle_exit)

    def _idle_exit(self) -> None:
        self._idle_timer = None
        if not self.connections and not self.registrations.count() and not self._stopping:
            log.info("hub_idle_exit", idle_exit=self.settings.idle_exit)
            self.request_stop("idle")

    # -- sessions -----------------------------------------------------------------------------

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._stopping:
            writer.close()
            return
        enable_keepalive(writer.get_extra_info("socket"))
        connection = Connection(self, reader, writer)
        self._admit(connection)
        self.connections.add(connection)
        self._arm_idle_exit()
        try:
            await connection.run()
        finally:
            self._awaiting_hello.pop(connection, None)
            self.connections.discard(connection)
            self.followers.discard(connection)
            if connection.watcher is not None:
                self.registrations.session_closed(connection.watcher)
            self._arm_idle_exit()

    def _admit(self, connection: Connection) -> None:
        """Hold ``connection`` until its hello, dropping the oldest unheard ones past the cap.

        Any local user can connect without a token, and each connection costs a descriptor for
        up to ``hello_timeout``; bounded, they can never take the descriptors the owner's own
        sessions need. The owner's hello comes with its connect, so it is read before it ages.
        """
        awaiting = self._awaiting_hello
        dropped = 0
        while len(awaiting) >= self.settings.max_awaiting_hello:
            oldest = next(iter(awaiting))
            del awaiting[oldest]
            oldest.abort()
            dropped += 1
        awaiting[connection] = None
        if dropped:
            self.dropped_before_hello += dropped
            now = self._loop.time()
            if now - self._drop_logged_at >= DROP_LOG_INTERVAL:
                self._drop_logged_at = now
                log.warning("connections_dropped_before_hello", dropped_total=self.dropped_before_hello,
                            awaiting=len(awaiting), limit=self.settings.max_awaiting_hello)

    def welcome(self, connection: Connection, proof: str | None = None) -> dict[str, Any]:
        self._awaiting_hello.pop(connection, None)
        return hp.welcome(board_url=self.board_url, board_id=self.board_id, revision=self.revision, proof=proof)

    def pong(self) -> dict[str, Any]:
        return hp.pong(revision=self.revision, clients=self.clients, registrations=self.registrations.count())

    def start_follow(
        self, connection: Connection, after: int | None, idle_ms: int, *, signals: bool = True,
        board_id: str | None = None,
    ) -> None:
        """Open a follow stream: replay from the ring when it covers ``after`` (of this board's
        current history), else live."""
        connection.begin_follow(idle_ms)
        connection.wants_signals = signals
        connection.cursor_board_id = board_id if after is not None else None
        head = self.revision
        if after is None or head is None:
            # Live; before the board first answers, ``after`` is checked at first contact.
            connection.cursor = after if head is None else head
            connection.send(hp.open_(revision=head, replay="live"))
        elif (void := self._other_history(after, board_id)) is not None:
            connection.send(hp.open_(revision=head, replay="live"))
            connection.send(hp.reset(reason=void, revision=head))
            connection.cursor = head
        elif after > head:
            connection.send(hp.open_(revision=head, replay="live"))
            connection.send(hp.reset(reason=hp.RESET_CURSOR_AHEAD, revision=head))
            connection.cursor = head
        elif self.ring.covers(after):
            connection.send(hp.open_(revision=head, replay="ring"))
            connection.cursor = after
            connection.lagging = True  # the writer copies the ring, then joins the live fan-out
        else:
            connection.send(hp.open_(revision=head, replay="live"))
            connection.send(hp.reset(reason=hp.RESET_RING, revision=head))
            connection.cursor = head
        self.followers.add(connection)

    def _other_history(self, after: int, board_id: str | None) -> str | None:
        """The reset reason when ``after`` is not a revision of the board's current history."""
        if board_id is not None and board_id != self.board_id:
            return hp.RESET_BOARD_CHANGED
        return self.histories.reset_reason(after, board_id)

    # -- the board link's sink ----------------------------------------------------------------

    def board_contact(self, board_id: str, head: int) -> None:
        self.board_flush()
        self.board_id, self.revision = board_id, head
        self.ring.restart(head)
        for connection in self.followers:
            cursor = connection.cursor
            if connection.cursor_board_id not in (None, board_id):
                connection.push_reset(hp.RESET_BOARD_CHANGED, head)  # a cursor of another board
            elif cursor is not None and cursor != head:
                # Followers that asked before the board answered: a gap we cannot replay.
                reason = hp.RESET_CURSOR_AHEAD if cursor > head else hp.RESET_RING
                connection.push_reset(reason, head)
            connection.cursor = head

    def board_reset(self, reason: str, board_id: str, head: int) -> None:
        self.board_flush()
        if reason in (hp.RESET_BOARD_CHANGED, hp.RESET_BOARD_CURSOR_AHEAD):
            # A restore: the old history's revisions above ``head`` will name other rows now.
            self.histories.replaced(base=head, upto=self.revision, board_id=self.board_id, reason=reason)
        self.board_id, self.revision = board_id, head
        self.ring.restart(head)
        for connection in self.followers:
            connection.push_reset(reason, head)
        self.registrations.mark_all()

    def board_event(self, revision: int, activity: dict[str, Any], data: str | None = None) -> None:
        # One line per event, encoded once and written as the same bytes to every follower.
        line = event_line(revision, activity, data)
        self.lines_encoded += 1
        if len(line) - 1 > self.settings.max_line:
            # shared/limits.py makes this impossible for frames our SSE parser accepts; a board
            # that is not ours still must not make followers close on LineTooLong. Events are
            # signals: forward that something changed, without the changes.
            log.warning("board_event_too_large", revision=revision, size=len(line))
            line = encode_line(hp.event(revision=revision, activity={**activity, "changes": {"omitted": True}}))
        self.revision = revision
        self._batch.append((revision, line, activity))

    def board_flush(self) -> None:
        """Send the events of one board read: one write per follower, however many events the
        board's chunk held (a writer that commits a batch sends its frames together), so the
        last of them does not wait for the fan-out of the ones before it.

        The writes come first; the ring and the card briefs take the events after them, in the
        same callback, so nothing can run in between: a follower that leaves the live fan-out
        here finds the lines in the ring when its writer task next runs."""
        batch = self._batch
        if not batch:
            return
        self._batch = []
        self.fanouts += 1
        revision = self.revision
        assert revision is not None  # set by the events in the batch
        lines = [line for _, line, _ in batch]
        joined = lines[0] if len(lines) == 1 else b"".join(lines)
        now = self._loop.time()  # one clock read per fan-out, not two per follower
        try:
            for connection in self.followers:
                connection.push_events(revision, lines, joined, now)
        finally:
            append, registrations = self.ring.append, self.registrations
            for event_revision, line, activity in batch:
                append(event_revision, line)
                registrations.board_event(activity)

    def board_signal(self, signal: dict[str, Any]) -> None:
        self.board_flush()  # the events before it in the stream go first
        # A blocker finishing or reopening changes the blocked card's brief with no row of its own.
        self.registrations.board_signal(signal)
        line = encode_line(hp.signal(signal=signal))
        if len(line) - 1 > self.settings.max_line:
            # A condition's changes are a handful of fields; one this large is not our board's.
            log.warning("board_signal_too_large", type=signal.get("type"), size=len(line))
            return
        for connection in self.followers:
            connection.push_signal(line)

    def board_cursor(self, revision: int) -> None:
        self.revision = revision

    def board_streaming(self, connects: int) -> None:
        # Every open, the first included: a card may have changed while the board was away (or
        # before this hub could reach it at start), and the replay only names what it replays.
        self.registrations.mark_all()
        if connects > 1:
            # The link was down: the replay brings back the rows, never the signals the board sent
            # meanwhile, nor those its restart fired before any stream was open. Say so to
            # whoever follows (a loop subscriber wakes its supervisor, which reads /breaches).
            line = encode_line(hp.signals_missed())
            for connection in self.followers:
                connection.push_signal(line)

    def board_unauthorized(self, message: str) -> None:
        """The board refused our token (rotated): tell every session, then stop for good.

        Retrying with the token we hold cannot succeed, and a hub that stayed up would keep
        answering ``open`` to clients that can never hear an event. Its clients re-read the
        token and start the hub keyed by the new one.
        """
        if self.failure is not None:
            return
        self.failure = hp.error(
            hp.UNAUTHORIZED,
            "the board refused the hub's token (401); it was probably rotated: reconnect with the current token",
            board=self.board_url,
            reason=message,
        )
        log.error("hub_board_unauthorized", board=self.board_url, reason=message, clients=self.clients,
                  registrations=self.registrations.count())
        self.request_stop("board_unauthorized", farewell=self.failure)  # one task the hub owns and awaits


def enable_keepalive(sock: Any) -> None:
    """SO_KEEPALIVE with short timers where the platform has them (Linux: TCP_KEEPIDLE/INTVL/CNT;
    macOS names the idle option TCP_KEEPALIVE). Best effort: a refused option leaves the defaults."""
    if sock is None:
        return
    idle = getattr(socket, "TCP_KEEPIDLE", None) or getattr(socket, "TCP_KEEPALIVE", None)
    options = [(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)]
    for option, value in (
        (idle, KEEPALIVE_IDLE),
        (getattr(socket, "TCP_KEEPINTVL", None), KEEPALIVE_INTERVAL),
        (getattr(socket, "TCP_KEEPCNT", None), KEEPALIVE_COUNT),
    ):
        if option is not None:
            options.append((socket.IPPROTO_TCP, option, value))
    for level, option, value in options:
        try:
            sock.setsockopt(level, option, value)
        except OSError:
            pass


class Connection:
    """One local session: a reader task feeds the protocol; a writer task owns the socket.

    The writer ends every session: after a fatal error, ``idle``, ``shutdown``, the peer's
    ``eof``, or a failed write. The reader only feeds the protocol; a follow stream outlives the
    peer's half-close (``nc -N``).
    """

    def __init__(self, hub: Hub, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.hub = hub
        self.reader = reader
        self.writer = writer
        self.session = Session(hub.token, max_line=hub.settings.max_line)
        #: Looked up once: the fan-out reads both for every follower on every event.
        self.transport = writer.transport
        self._max_pending = hub.settings.max_pending
        self.outbox: deque[bytes] = deque()
        self.wake = asyncio.Event()
        #: Set whenever the writer has handed what it held to the socket (and at close): the reader
        #: waits on it while the answers it made are still unsent (``_until_answers_taken``).
        self._wrote = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.closing = False
        self._linger = False
        self._loop = asyncio.get_running_loop()
        self._timer: asyncio.TimerHandle | None = None
        self._close_deadline: asyncio.TimerHandle | None = None
        self._writer_parked = False
        #: The peer closed its sending side: heartbeats become probes (``HALF_CLOSED_PROBE``).
        self.peer_eof = False
        # Follow state.
        self.following = False
        self.cursor: int | None = None
        #: The board the follower said its cursor belongs to (``follow.board_id``), if it did.
        self.cursor_board_id: str | None = None
        self.lagging = False
        #: Whether this follow stream carries ``signal`` records (``follow {signals: false}`` opts out).
        self.wants_signals = True
        self.idle_ms = 0
        self.last_event_at = self._loop.time()
        self.last_write_at = self._loop.time()
        #: The foreground card-brief watch this session carries, if any.
        self.watcher: Watcher | None = None
        #: ``refresh`` records are being dropped because the outbox is full (``push_refresh``).
        self._shedding_refreshes = False
        self._dispatch: dict[str, Callable[[dict[str, Any]], None]] = {
            "hello": lambda fields: self.send(hub.welcome(self, fields["proof"])),
            "ping": lambda fields: self.send(hub.pong()),
            "follow": lambda fields: hub.start_follow(self, fields["after"], fields["idle_ms"],
                                                      signals=fields["signals"], board_id=fields["board_id"]),
        }
        # Served in order: the reader waits for each, so answers keep the order of the requests.
        self._async_dispatch: dict[str, Callable[[dict[str, Any]], Awaitable[None]]] = {
            "watch": self._watch,
            "watch-stop": self._watch_stop,
            "watch-status": self._watch_status,
        }

    async def run(self) -> None:
        self.task = asyncio.current_task()
        reader_task = asyncio.create_task(self._read_loop())
        watch_task = asyncio.create_task(self._watch_transport())
        try:
            await self._write_loop()
        finally:
            for task in (reader_task, watch_task):
                if not task.done():
                    task.cancel()
            await asyncio.gather(reader_task, watch_task, return_exceptions=True)
            for timer in (self._timer, self._close_deadline):
                if timer is not None:
                    timer.cancel()
            if self._linger and not self.writer.transport.is_closing():
                await self._lingering_close()
            self.writer.close()

    async def _watch_transport(self) -> None:
        """A transport that is gone (a reset, a write that failed on the fast path) ends the
        session now, so ``clients`` stops counting it; the writer may be parked with nothing to do."""
        try:
            await self.writer.wait_closed()
        except (ConnectionError, OSError):
            pass
        if not self.closing:
            self.abort()

    async def _lingering_close(self) -> None:
        """After a fatal error, half-close and drain what the peer still sends before closing.

        Closing with unread input makes the kernel answer with RST, which can destroy the error
        line we just wrote before the peer reads it (RFC 9112 §9.6 describes the same for HTTP).
        """
        try:
            if self.writer.can_write_eof():
                self.writer.write_eof()
            async with asyncio.timeout(LINGER):
                drained = 0
                while drained < LINGER_BYTES and (chunk := await self.reader.read(READ_CHUNK)):
                    drained += len(chunk)
        except (TimeoutError, ConnectionError, OSError):
            pass

    async def _read_loop(self) -> None:
        hello_deadline = self._loop.time() + self.hub.settings.hello_timeout
        try:
            while not self.session.closed:
                timeout = None if self.session.greeted else max(0.0, hello_deadline - self._loop.time())
                try:
                    chunk = await asyncio.wait_for(self.reader.read(READ_CHUNK), timeout)
                except TimeoutError:
                    await self._act(self.session.hello_timed_out())
                    continue
                if not chunk:
                    await self._act(self.session.feed_eof())
                    self._peer_closed_sending()
                    return  # a follow stream goes on until idle, shutdown or a failed write
                await self._act(self.session.feed(chunk))
                # A peer that sends requests and does not read the answers is read no further
                # until it has taken them: without this its answers pile up here without bound.
                await self._until_answers_taken()
        except (ConnectionError, OSError):
            self.abort()
        except Exception:
            # A request the hub failed to answer: the session ends, never lingers without its reader.
            log.exception("session_failed")
            self.abort()

    async def _until_answers_taken(self) -> None:
        """Wait while more waits for the peer than one follower's outbox may hold, or than the
        socket's buffer takes (its own high-water mark: ``drain`` waits only past it)."""
        while not (self.closing or self.session.closed):
            if len(self.outbox) >= self._max_pending:
                self._wrote.clear()
                await self._wrote.wait()
                continue
            await self.writer.drain()
            return

    async def _act(self, actions: list[Send | Request | Close]) -> None:
        for action in actions:
            if isinstance(action, Send):
                self.send(action.message)
            elif isinstance(action, Request):
                serve = self._async_dispatch.get(action.type)
                if serve is not None:
                    await serve(action.fields)
                else:
                    self._dispatch[action.type](action.fields)
            else:
                self._linger = action.reason in hp.FATAL_ERRORS
                self.close_after_flush()

    async def _watch(self, fields: dict[str, Any]) -> None:
        try:
            watcher = await self.hub.registrations.watch(fields, self)
        except Refused as refused:
            self.send(refused.message_line("watch"))
            if not fields["detach"]:
                self.session.watch_refused()
            return
        if watcher is not None:
            self.watcher = watcher
            self.begin_stream(0)

    async def _watch_status(self, fields: dict[str, Any]) -> None:
        self.send(await self.hub.registrations.status())

    async def _watch_stop(self, fields: dict[str, Any]) -> None:
        try:
            self.send(await self.hub.registrations.stop_registration(fields["registration_id"]))
        except Refused as refused:
            self.send(refused.message_line("watch-stop"))

    # -- the writer side ----------------------------------------------------------------------

    def send(self, message: dict[str, Any]) -> None:
        self._queue(encode_line(message))

    def _queue(self, line: bytes) -> None:
        if self.closing:
            return
        self.outbox.append(line)
        self.wake.set()

    def close_after_flush(self) -> None:
        """Write what is queued, then close; a peer that will not take it is cut off after a grace."""
        if self._close_deadline is None and not self.writer.transport.is_closing():
            self._close_deadline = self._loop.call_later(SHUTDOWN_GRACE, self.abort)
        self.closing = True
        self.wake.set()
        self._wrote.set()

    def abort(self) -> None:
        """Drop the connection now (a peer that is gone or will not read)."""
        self.closing = True
        self._linger = False
        self.outbox.clear()
        self.lagging = False
        self.writer.transport.abort()
        self.wake.set()
        self._wrote.set()

    def shutdown(self, reason: str, *, farewell: dict[str, Any] | None = None) -> None:
        """The hub is stopping: say ``shutdown`` (or ``farewell``, an ``error``), then close."""
        if self.session.greeted and not self.closing:
            # Unsent events are moot: the follower resumes by its cursor from the next hub.
            self.outbox.clear()
            self.lagging = False
            self.send(farewell if farewell is not None else hp.shutdown(reason=reason))
        self.close_after_flush()

    def _peer_closed_sending(self) -> None:
        """EOF from the peer on a stream that goes on: a half-close (``nc -N``) or a dead process.

        Only a write tells them apart, so heartbeats become frequent probes from now on.
        """
        if self.closing or self.session.closed:
            return
        self.peer_eof = True
        if self._timer is not None:
            self._arm_timer()

    def begin_follow(self, idle_ms: int) -> None:
        self.following = True
        self.begin_stream(idle_ms)

    def begin_stream(self, idle_ms: int) -> None:
        """Heartbeats (and, for a follow, the idle bound) for a stream on this session."""
        self.idle_ms = idle_ms
        self.last_event_at = self._loop.time()
        self._arm_timer()

    def push_events(self, revision: int, lines: list[bytes], joined: bytes, now: float) -> None:
        """Live events from the fan-out, ``revision`` the last of them (``joined``: ``lines`` as one
        buffer; ``now``: the loop's clock); a full outbox makes this follower catch up from the ring."""
        if self.closing:
            return
        self.last_event_at = now  # a record is coming, now or through the ring
        if self.lagging:
            return
        outbox = self.outbox
        if len(outbox) + len(lines) > self._max_pending:
            # The ring holds these lines, after the cursor this follower keeps. A read from the
            # board may carry more lines than the outbox takes while the writer is parked: wake
            # it, or nothing would start the catch-up.
            self.lagging = True
            log.info("follower_lagging", cursor=self.cursor, pending=len(outbox))
            self.wake.set()
            return
        self.cursor = revision
        transport = self.transport
        if (self._writer_parked and not outbox and transport.get_write_buffer_size() < WRITE_HIGH_WATER
                and not transport.is_closing()):
            # Fast path: the writer task is parked with nothing queued and the socket keeps up,
            # so this synchronous write is the only one in flight and comes after every line
            # already queued (no task wake-up per follower per event). Anything else goes
            # through the outbox and drain().
            transport.write(joined)
            self.last_write_at = now
            return
        outbox.extend(lines)
        self.wake.set()

    def push_signal(self, line: bytes) -> None:
        """A live signal line, shared by every follower.

        A signal is news about now, so a follower still catching up from the ring gets it at
        once, between replayed events (the board itself sends a signal when its transaction
        commits, which may be before the row that caused it). Only a full outbox drops one:
        signals are never replayed (SPEC §1.7), and the follower reads /breaches.
        """
        if self.closing or not self.wants_signals:
            return
        if len(self.outbox) >= self.hub.settings.max_pending:
            log.info("follower_signal_dropped", cursor=self.cursor, pending=len(self.outbox))
            return
        self.last_event_at = self._loop.time()  # a record the follower asked for: not idle
        transport = self.writer.transport
        if (self._writer_parked and not self.lagging and not self.outbox
                and transport.get_write_buffer_size() < WRITE_HIGH_WATER and not transport.is_closing()):
            transport.write(line)  # the same fast path as push_event, for the same reason
            self.last_write_at = self._loop.time()
            return
        self._queue(line)

    def push_refresh(self, message: dict[str, Any]) -> None:
        """A ``refresh`` of this session's watch stream.

        The brief it reports is on disk already, so, like a signal, it is news a session whose
        outbox is full misses: a watcher that reads nothing (a ``taskctl export watch`` suspended
        with Ctrl-Z) costs at most one outbox, not one record per card per batch for the
        registration's life. The records that end the stream (``done``, ``ttl``, ``shutdown``)
        always go through ``send``.
        """
        if len(self.outbox) >= self._max_pending:
            if not self._shedding_refreshes:
                self._shedding_refreshes = True  # one log line per stretch, not one per record
                log.info("watcher_refreshes_dropped", pending=len(self.outbox))
            return
        self._shedding_refreshes = False
        self.send(message)

    def push_reset(self, reason: str, revision: int) -> None:
        """The cursor is void: tell the follower, continue live from ``revision``.

        Events already queued stay: they are real and come before the reset in the stream.
        """
        if self.closing:
            return
        self.lagging = False
        self.cursor = revision
        self.send(hp.reset(reason=reason, revision=revision))

    def _catch_up(self) -> None:
        """Refill the outbox from the ring by this follower's cursor, or rejoin the live fan-out."""
        frames = self.hub.ring.since(self.cursor, CATCH_UP_BATCH) if self.cursor is not None else None
        if frames is None:
            self.lagging = False
            head = self.hub.revision
            log.info("follower_reset", reason=hp.RESET_RING, cursor=self.cursor, revision=head)
            self.cursor = head
            self.send(hp.reset(reason=hp.RESET_RING, revision=head))
        elif not frames:
            self.lagging = False  # caught up: from now on the fan-out feeds the outbox
            self._arm_timer()  # the idle bound counts again, from the last event sent
        else:
            self.cursor = frames[-1][0]
            self.outbox.extend(line for _, line in frames)
            self.last_event_at = self._loop.time()  # records are being sent: not idle

    async def _write_loop(self) -> None:
        try:
            await self._write_until_closed()
        except (ConnectionError, OSError):
            self.abort()
        finally:
            self.hub.followers.discard(self)

    async def _write_until_closed(self) -> None:
        writer = self.writer
        while True:
            if self.lagging and not self.outbox and not self.closing:
                self._catch_up()
            if self.outbox:
                lines = list(self.outbox)
                self.outbox.clear()
                writer.writelines(lines)
                self.last_write_at = self._loop.time()
                await writer.drain()
                self._wrote.set()
                continue
            if self.closing:
                if not writer.transport.is_closing():
                    await writer.drain()
                return
            if self.lagging:
                continue
            self._wrote.set()
            self.wake.clear()
            self._writer_parked = True
            try:
                await self.wake.wait()
            finally:
                self._writer_parked = False

    # -- heartbeat and idle: one lazy timer, re-armed when it fires, O(1) per event ------------

    def _heartbeat_interval(self) -> float:
        interval = self.hub.settings.heartbeat_interval
        return min(interval, HALF_CLOSED_PROBE) if self.peer_eof else interval

    def _arm_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        now = self._loop.time()
        interval = self._heartbeat_interval()
        heartbeat_due = self.last_write_at + interval
        if heartbeat_due <= now:
            # A heartbeat was due but the writer was busy or blocked: look again one interval on.
            heartbeat_due = now + interval
        due = heartbeat_due
        if self.idle_ms and not self.lagging:
            due = min(due, self.last_event_at + self.idle_ms / 1000)
        self._timer = self._loop.call_at(due, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        if self.closing:
            return
        now = self._loop.time()
        # A follower still catching up from the ring has records coming: it is not idle, however
        # long it takes to read them.
        if self.idle_ms and not self.lagging and now >= self.last_event_at + self.idle_ms / 1000:
            self.send(hp.idle(idle_ms=self.idle_ms))
            self.close_after_flush()
            return
        if now >= self.last_write_at + self._heartbeat_interval() and not self.outbox and not self.lagging:
            # Nothing queued and not lagging: every event up to the hub's revision is written.
            if self.hub.revision is not None:
                self.cursor = self.hub.revision
            self.send(hp.heartbeat(revision=self.cursor))
            self.last_write_at = now  # the line is queued; do not heartbeat again before it leaves
        self._arm_timer()
