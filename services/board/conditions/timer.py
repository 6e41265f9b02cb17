"""The board's one timer for temporal conditions: a heap of next deadlines (SPEC §12).

Rebuilt from state at start (``instant.rebuild`` in one transaction), adjusted after every commit
from the ``Deadlines`` its transaction computed, and woken by one ``call_at`` for the earliest
deadline, or a second from now if that is sooner, to read the wall clock again after the machine
slept (``WALL_CHECK_SECONDS``) — never a poll per card. Entries are replaced lazily: the heap may hold outdated
entries, which are skipped when they surface (``armed`` is the truth).

Several board processes on one PostgreSQL database: each commit's signals and deadlines are sent
to the others with its COMMIT (``WriterStore.peer_effects``), so a stream on any process hears
every signal, and every process arms every deadline — one that a stopped process had armed still
fires. The fire transaction checks the mark under the write lock, so a deadline armed in two
processes fires once.

A signal reaches the listeners once the board's log reader has fanned out its commit's rows
(``after_log``): a stream hears a card become unblocked after the blocker's ``task_moved``, also
when the commit was another process's, whose word comes by a notification that would otherwise
overtake the read of the rows.
"""

from __future__ import annotations

import asyncio
import functools
import heapq
import itertools
import secrets
import time
from collections.abc import Callable
from typing import Any, Final

import orjson
import structlog

from ..store import PEER_GAP, PEER_NOTE_BYTES, SYSTEM_ACTOR, Tx, WriterStore
from . import instant
from .signals import Deadlines, Signal

log = structlog.get_logger("taskd.conditions")

#: How early a deadline may be fired: never. A wake-up that comes a hair early (the loop's clock
#: resolution) finds nothing due and waits again; the fired condition's ``at`` is never before it.
SLACK_SECONDS: Final = 0.0
#: Most conditions one timer transaction fires; more due at once (a start after downtime) take several.
FIRE_BATCH: Final = 500
#: The longest the timer sleeps before it reads the wall clock again, seconds. Deadlines are
#: wall-clock times, but the loop's timer counts on the monotonic clock, which stands still while
#: the machine sleeps (Linux's CLOCK_MONOTONIC, macOS's mach time): after a laptop's lid was shut
#: for an hour, a claim that went stale meanwhile would fire only once the rest of its wait had
#: passed on the monotonic clock, up to the whole threshold late. The cost is one wake-up a
#: second while anything is armed, and none for a board with nothing armed.
WALL_CHECK_SECONDS: Final = 1.0
#: Seconds before a fire transaction that failed is tried again (a client of a write refused for
#: the same reason is told ``Retry-After: 1``). Its deadlines are past: tried again at once, a
#: database that is away made every board process spin on them, logging each failure.
FIRE_RETRY_S: Final = 1.0

SignalListener = Callable[[Signal], None]
#: ``LogReader.after``: make the call once the fan-out has passed the revision.
AfterLog = Callable[[int, Callable[[], None]], None]


class ConditionsEngine:
    """Instant conditions as the store's command hook, temporal ones on one timer."""

    def __init__(
        self, store: WriterStore, *, claim_fresh_seconds: float, clock: Callable[[], float] = time.time,
        after_log: AfterLog | None = None,
    ) -> None:
        self.store = store
        self._after_log = after_log
        self.claim_fresh_seconds = claim_fresh_seconds
        self.clock = clock
        self._listeners: list[SignalListener] = []
        self._heap: list[tuple[float, int, str, str, str]] = []
        self._seq = itertools.count()
        #: task id → {type: (deadline, episode)}: what is armed now.
        self._armed: dict[str, dict[str, tuple[float, str]]] = {}
        self._armed_count = 0
        self._handle: asyncio.TimerHandle | None = None
        self._handle_at: float | None = None
        self._firing: set[asyncio.Task[None]] = set()
        #: One fire transaction at a time: what comes due while it runs goes into the next one, so
        #: a burst of deadlines costs a few transactions rather than one per deadline.
        self._in_flight = False
        self._running = False
        #: (deadline, fired at) of the last fires, POSIX seconds (bench and tests read it).
        self.fired: list[tuple[float, float]] = []
        self._configs: instant.ConfigCache = {}
        #: task id → the head of the commit whose ``Deadlines`` armed it, for the cards armed now
        #: (board processes sharing a database only): a peer's older word arriving after a newer
        #: commit's must not replace it. A card disarmed or fired is forgotten: an older arming
        #: arriving then is only stale, and its fire transaction finds the state moved on.
        self._armed_at: dict[str, int] = {}
        self._peer_reader = PeerNoteReader()
        store.command_hook = self._hook
        store.add_effects_listener(self._on_effects)
        if store.serves_peers:
            store.peer_effects = peer_notes
            store.add_peer_listener(self._on_peer)

    # -- wiring ---------------------------------------------------------------------------------

    def add_signal_listener(self, listener: SignalListener) -> None:
        self._listeners.append(listener)

    @property
    def armed(self) -> int:
        """Temporal conditions armed now."""
        return self._armed_count

    def _hook(self, tx: Tx) -> None:
        instant.evaluate(tx, claim_fresh_seconds=self.claim_fresh_seconds, cache=self._configs)

    def _on_effects(self, effects: list[Any], head: int) -> None:
        signals = [effect for effect in effects if isinstance(effect, Signal)]
        for effect in effects:
            if isinstance(effect, Deadlines):
                if head < self._armed_at.get(effect.task_id, 0):
                    continue  # a peer's older word: a later commit armed this card since
                self._arm(effect)
                if effect.entries and self.store.serves_peers:
                    self._armed_at[effect.task_id] = head
                else:
                    self._armed_at.pop(effect.task_id, None)
        self._schedule()
        if not signals:
            return
        if self._after_log is None:
            self._tell(signals)
        else:
            self._after_log(head, functools.partial(self._tell, signals))

    def _tell(self, signals: list[Signal]) -> None:
        for signal in signals:
            for listener in tuple(self._listeners):
                try:
                    listener(signal)
                except Exception:
                    log.exception("signal_listener_failed", type=signal.type)

    def _on_peer(self, note: str) -> None:
        """What another board process's commit left: handled as this process's own effects."""
        if note == PEER_GAP:
            self._resync()
            return
        try:
            read = self._peer_reader.read(note)
        except (ValueError, TypeError, KeyError):
            log.warning("peer_note_unreadable", size=len(note))
            return
        if read is not None:
            self._on_effects(read[1], read[0])

    def _resync(self) -> None:
        """The store missed the other processes' notes for a while: their deadlines armed meanwhile
        are derived again from state, as at start (a split note left open is void)."""
        self._peer_reader = PeerNoteReader()
        if not self._running:
            return
        log.info("conditions_resync", reason="peer_notes_missed")
        task = asyncio.get_running_loop().create_task(self._rebuild())
        self._firing.add(task)
        task.add_done_callback(self._firing.discard)

    async def _rebuild(self) -> None:
        try:
            await self._derive_from_state()
        except Exception:  # noqa: BLE001 - the next reconnect or start tries again
            log.exception("conditions_resync_failed")

    async def _derive_from_state(self) -> None:
        """Re-derive the marks and arm every temporal condition, in one transaction."""
        await self.store.command(instant.rebuild, SYSTEM_ACTOR, claim_fresh_seconds=self.claim_fresh_seconds)

    # -- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        """Re-derive the marks and arm every temporal condition; overdue ones fire at once."""
        self._running = True
        await self._derive_from_state()

    async def stop(self) -> None:
        self._running = False
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        for task in list(self._firing):
            task.cancel()
        for task in list(self._firing):
            try:
                await task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - stopping: nothing to report to
                pass

    async def rejected(self, ref: str, to: str, code: str) -> None:
        """A move or claim was refused: ``transition_rejected`` when the project asks for it."""
        try:
            await self.store.command(instant.rejected, SYSTEM_ACTOR, ref, to, code)
        except Exception:  # noqa: BLE001 - the caller's own refusal is what it must hear
            log.exception("transition_rejected_failed", ref=ref)

    # -- the heap -------------------------------------------------------------------------------

    def _arm(self, deadlines: Deadlines) -> None:
        entries = {type_: (deadline, episode) for type_, episode, deadline in deadlines.entries}
        self._armed_count -= len(self._armed.get(deadlines.task_id, ()))
        if entries:
            self._armed[deadlines.task_id] = entries
            self._armed_count += len(entries)
        else:
            self._armed.pop(deadlines.task_id, None)
        for type_, (deadline, episode) in entries.items():
            heapq.heappush(self._heap, (deadline, next(self._seq), deadlines.task_id, type_, episode))
        if len(self._heap) > 2 * self.armed + 1024:
            self._compact()

    def _arm_more(self, deadlines: Deadlines) -> None:
        """Add entries for a card without replacing what else it has armed."""
        entries = self._armed.setdefault(deadlines.task_id, {})
        for type_, episode, deadline in deadlines.entries:
            if type_ not in entries:
                self._armed_count += 1
            entries[type_] = (deadline, episode)
            heapq.heappush(self._heap, (deadline, next(self._seq), deadlines.task_id, type_, episode))

    def _compact(self) -> None:
        self._heap = [
            (deadline, next(self._seq), task_id, type_, episode)
            for task_id, entries in self._armed.items()
            for type_, (deadline, episode) in entries.items()
        ]
        heapq.heapify(self._heap)

    def _valid(self, entry: tuple[float, int, str, str, str]) -> bool:
        deadline, _, task_id, type_, episode = entry
        return self._armed.get(task_id, {}).get(type_) == (deadline, episode)

    def _schedule(self) -> None:
        if not self._running:
            return
        while self._heap and not self._valid(self._heap[0]):
            heapq.heappop(self._heap)
        if not self._heap:
            if self._handle is not None:
                self._handle.cancel()
                self._handle, self._handle_at = None, None
            return
        deadline = self._heap[0][0]
        if self._handle is not None and self._handle_at is not None and self._handle_at <= deadline:
            # An earlier wake-up stands: it finds nothing due and waits again (see ``_due``). Moving
            # it back after every commit whose card held the earliest deadline would cost a timer
            # handle per command.
            return
        if self._handle is not None:
            self._handle.cancel()
        loop = asyncio.get_running_loop()
        now = self.clock()
        self._handle_at = min(deadline, now + WALL_CHECK_SECONDS)
        self._handle = loop.call_at(loop.time() + max(0.0, self._handle_at - now), self._due)

    def _due(self) -> None:
        self._handle, self._handle_at = None, None
        if self._in_flight:
            return  # the running fire calls _due again when it is done
        now = self.clock()
        due: list[tuple[str, str, str]] = []
        deadlines: list[float] = []
        while self._heap and len(due) < FIRE_BATCH:
            entry = self._heap[0]
            if not self._valid(entry):
                heapq.heappop(self._heap)
                continue
            if entry[0] > now + SLACK_SECONDS:
                break
            heapq.heappop(self._heap)
            deadline, _, task_id, type_, episode = entry
            entries = self._armed.get(task_id, {})
            if entries.pop(type_, None) is not None:
                self._armed_count -= 1
            if not entries:
                self._armed.pop(task_id, None)
                self._armed_at.pop(task_id, None)
            due.append((task_id, type_, episode))
            deadlines.append(deadline)
        if due:
            self._in_flight = True
            task = asyncio.get_running_loop().create_task(self._fire(due, deadlines))
            self._firing.add(task)
            task.add_done_callback(self._firing.discard)
            return
        self._schedule()

    async def _fire(self, due: list[tuple[str, str, str]], deadlines: list[float]) -> None:
        again: list[Deadlines] = []
        failed = False
        try:
            again = await self.store.command(
                instant.fire, SYSTEM_ACTOR, due, claim_fresh_seconds=self.claim_fresh_seconds, slack=SLACK_SECONDS
            )
            fired_at = self.clock()
            self.fired.extend((deadline, fired_at) for deadline in deadlines)
            del self.fired[:-20000]
        except asyncio.CancelledError:
            raise
        except Exception:
            # Nothing fired: arm them again, so a passing failure (a busy file) delays, never loses.
            log.exception("condition_fire_failed", count=len(due))
            failed = True
            again = [Deadlines(task_id, ((type_, episode, deadline),))
                     for (task_id, type_, episode), deadline in zip(due, deadlines, strict=True)]
        finally:
            self._in_flight = False
        for deadlines_again in again:
            self._arm_more(deadlines_again)
        if not self._running:
            return
        if failed:
            self._retry_later()
        else:
            self._due()

    def _retry_later(self) -> None:
        """After a failed fire, wake again in ``FIRE_RETRY_S``. A commit that arms a card meanwhile
        (so the database answers again) may bring the wake-up forward (``_schedule``)."""
        if self._handle is not None:
            self._handle.cancel()
        self._handle_at = self.clock() + FIRE_RETRY_S
        self._handle = asyncio.get_running_loop().call_later(FIRE_RETRY_S, self._due)


# -- what travels to the other board processes ---------------------------------------------------


#: The mark of a note that is one part of an effect too large for a notification of its own:
#: ``~<key> <index> <count> <text>``, the parts' texts joined being an ordinary note. A commit's
#: notifications are delivered together and in order, so the parts of one arrive one after another.
PART_MARK: Final = "~"
#: The most parts one effect may take (about 2 MB: a card with tens of thousands of open
#: blockers); a larger one is left out and logged, and ``/breaches`` still has it.
MAX_PARTS: Final = 256
#: Split effects a process holds while their parts arrive. Delivered in order, a commit leaves
#: one open at a time; another means the listener lost its connection halfway through one.
OPEN_SPLITS: Final = 4


def peer_notes(effects: list[Any], head: int) -> list[str]:
    """A batch's signals and deadlines as notification payloads of at most ``PEER_NOTE_BYTES``.

    A card whose deadlines are now none is not sent: another process that still has it armed
    fires a transaction that finds the state moved on and fires nothing, so on a board without
    temporal conditions a commit sends nothing at all. An effect too large for a notification by
    itself (a card with hundreds of open blockers) goes as a note of its own in parts
    (``PeerNoteReader`` joins them), in its place among the others."""
    notes: list[str] = []
    items: list[bytes] = []
    size = 0
    prefix = b'{"h":%d,"e":[' % head
    for effect in effects:
        if isinstance(effect, Signal):
            item = orjson.dumps(["s", effect.type, effect.project_id, effect.task_id, effect.changes, effect.at])
        elif isinstance(effect, Deadlines) and effect.entries:
            item = orjson.dumps(["d", effect.task_id, effect.entries])
        else:
            continue
        alone = len(prefix) + len(item) + 2 > PEER_NOTE_BYTES
        if items and (alone or len(prefix) + size + len(item) + len(items) + 2 > PEER_NOTE_BYTES):
            notes.append((prefix + b",".join(items) + b"]}").decode())
            items, size = [], 0
        if alone:
            parts = _parts(prefix + item + b"]}")
            if parts is None:
                log.warning("peer_note_too_large", size=len(item))
            notes.extend(parts or ())
            continue
        items.append(item)
        size += len(item)
    if items:
        notes.append((prefix + b",".join(items) + b"]}").decode())
    return notes


def _parts(note: bytes) -> list[str] | None:
    """``note`` as parts that each fit a notification (None: more than ``MAX_PARTS``), cut only
    between characters."""
    key = secrets.token_hex(4)  # parts of two processes' effects can never be taken for each other's
    room = PEER_NOTE_BYTES - len(f"{PART_MARK}{key} {MAX_PARTS} {MAX_PARTS} ")
    texts: list[str] = []
    start = 0
    while start < len(note):
        end = min(start + room, len(note))
        while end < len(note) and note[end] & 0xC0 == 0x80:  # a UTF-8 continuation byte: back off
            end -= 1
        texts.append(note[start:end].decode())
        start = end
    if len(texts) > MAX_PARTS:
        return None
    return [f"{PART_MARK}{key} {index} {len(texts)} {text}" for index, text in enumerate(texts)]


class PeerNoteReader:
    """What another board process's notes carry: the head and effects of each whole note, as the
    last part of a split one arrives."""

    def __init__(self) -> None:
        self._open: dict[str, list[str]] = {}

    def read(self, note: str) -> tuple[int, list[Any]] | None:
        """The note's head and effects; None while a split note still waits for parts. ValueError
        for a note that is not one, or a part out of order (its note is dropped)."""
        if not note.startswith(PART_MARK):
            return read_peer_note(note)
        key, index_text, count_text, text = note[len(PART_MARK):].split(" ", 3)
        index, count = int(index_text), int(count_text)
        if index == 0:
            while len(self._open) >= OPEN_SPLITS:  # left open by a lost connection: the oldest goes
                self._open.pop(next(iter(self._open)))
            self._open[key] = []
        parts = self._open.get(key)
        if parts is None or len(parts) != index or not index < count <= MAX_PARTS:
            self._open.pop(key, None)
            raise ValueError(f"part {index} of {count} of split note {key} out of order")
        parts.append(text)
        if len(parts) < count:
            return None
        del self._open[key]
        return read_peer_note("".join(parts))


def read_peer_note(note: str) -> tuple[int, list[Any]]:
    """The head and the effects a whole ``peer_notes`` payload carries."""
    data = orjson.loads(note)
    effects: list[Any] = []
    for item in data["e"]:
        if item[0] == "s":
            effects.append(Signal(str(item[1]), str(item[2]), item[3], dict(item[4]), str(item[5])))
        elif item[0] == "d":
            effects.append(Deadlines(str(item[1]), tuple((str(t), str(e), float(d)) for t, e, d in item[2])))
    return int(data["h"]), effects
