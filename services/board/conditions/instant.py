"""Judging conditions inside a transaction, from the state it leaves behind (SPEC §12).

``evaluate`` is the store's command hook: after a command returned, still inside its
transaction, it looks where the command wrote (the projects and cards of the rows it appended —
never what the rows say), re-derives the conditions there from state, compares them with
``condition_marks`` and emits a signal for every crossing and every clearing. Refused commands
roll back their marks with them; the signals leave only after COMMIT.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from shared import conditions, domain, events
from shared.errors import TaskloomError

from ..dialect import Row
from ..queries.tasks import find_task
from ..store import Tx
from . import card, marks, persist, rules, temporal
from . import config as settings
from .marks import Mark
from .signals import Deadlines, Signal

_TERMINAL = tuple(sorted(domain.TERMINAL))
_COLUMN_TYPES = (events.WIP_EXCEEDED, events.LANE_DRAINED)


def project_config(conn: Any, project_id: str) -> settings.ProjectConditions:
    row = conn.execute("SELECT settings_json FROM projects WHERE id = ?", (project_id,)).fetchone()
    return settings.NONE if row is None else settings.from_json(row[0])


def emit(tx: Tx, config: settings.ProjectConditions, type_: str, project_id: str, task_id: str | None,
         changes: dict[str, Any]) -> Signal:
    """One condition crossed or cleared: a signal after COMMIT, and a row when the project keeps it."""
    signal = Signal(type_, project_id, task_id, changes, tx.now)
    tx.effects.append(signal)
    if type_ in config.persist:
        persist.record(tx, signal)
    return signal


#: A project's condition settings, cached by the engine between commands: re-read whenever a
#: command writes a project-wide row (its settings may have changed), and all of them whenever
#: another board process may have committed since this one last did (``Tx.others_committed``).
ConfigCache = dict[str, settings.ProjectConditions]


def evaluate(tx: Tx, *, claim_fresh_seconds: float, cache: ConfigCache | None = None) -> None:
    """The command hook: judge the conditions where this command wrote."""
    if tx.others_committed and cache:
        cache.clear()
    if not tx.scopes:
        return
    if any(event == events.IMPORT_COMPLETED for _, _, event in tx.scopes):
        # A whole board arrived in one row that names no card: judge everything, as a start does.
        if cache is not None:
            cache.clear()
        rebuild(tx, claim_fresh_seconds=claim_fresh_seconds)
        return
    scopes = list(tx.scopes)
    projects: set[str] = set()
    touched: set[str] = set()
    active: set[str] = set()  # cards this command wrote a row for that is activity (not a condition)
    wide: set[str] = set()
    for project_id, task_id, event in scopes:
        if project_id is None:
            continue
        projects.add(project_id)
        if task_id is None:
            wide.add(project_id)
        else:
            touched.add(task_id)
            if event not in conditions.CONDITION_SET:
                active.add(task_id)
    shared = cache if cache is not None else {}
    for project_id in wide:
        shared.pop(project_id, None)
    local: ConfigCache = {}

    def config_of(project_id: str) -> settings.ProjectConditions:
        config = local.get(project_id) or shared.get(project_id)
        if config is None:
            config = project_config(tx.conn, project_id)
            # A project this command changed is judged on its new settings but not cached: the
            # command may still roll back. The next command caches what committed.
            (local if project_id in wide else shared)[project_id] = config
        return config

    watched = [
        (project_id, config) for project_id in sorted(projects)
        if (config := config_of(project_id)).wip_limits or config.lanes or project_id in wide
    ]
    # The cards the command's own update returned (``Tx.cards``) need no read: the common command
    # writes one card and reads nothing more here.
    rows: dict[str, Row] = {task_id: row for task_id in touched if (row := tx.cards.get(task_id)) is not None}
    if len(watched) == 1 and len(touched) == 1 and not rows:
        # One statement for the card and its project's columns. Reading both before judging
        # either is what reading them in turn would see: the column judgement writes only marks
        # without a card, and the card's read looks only at marks of that card.
        (project_id, config), (task_id,) = watched[0], touched
        statuses = config.column_statuses
        # The select list's terms bind the project, then the WHERE binds the card.
        terms = (project_id,) * (len(statuses) + 1)
        row = tx.conn.execute(_card_with_columns_sql(statuses), (*terms, task_id)).fetchone()
        if row is not None:
            rows[task_id] = row
            columns(tx, project_id, config, _column_state(row, card.WIDTH, statuses))
        else:
            columns(tx, project_id, config)
    else:
        for project_id, config in watched:
            columns(tx, project_id, config)
        rows.update((task_id, row) for task_id in touched - rows.keys() if (row := _card(tx.conn, task_id)) is not None)
    dependents = _dependents(tx, {task_id for task_id, row in rows.items() if row[card.BLOCKS_SOME]}) - touched
    rearm: set[str] = set()
    for project_id in wide:  # a project's settings changed: every deadline of it may have moved
        rearm.update(row[0] for row in tx.conn.execute(
            f"SELECT id FROM tasks WHERE project_id = ? AND archived_at IS NULL"
            f" AND status NOT IN ({', '.join('?' for _ in _TERMINAL)})",
            (project_id, *_TERMINAL),
        ))
    for task_id in sorted(touched | dependents | rearm):
        task = rows[task_id] if task_id in rows else _card(tx.conn, task_id)
        if task is None:
            tx.effects.append(Deadlines(task_id, ()))
            continue
        held = marks.of_task(tx.conn, task_id) if task[card.MARKED] else {}
        blocked_mark = held.get(events.CARD_BLOCKED)
        # Nothing points ``blocks`` at it and it holds no such mark: nothing to judge.
        if (task_id in touched or task_id in dependents) and (blocked_mark is not None or task[rules.POINTED_AT]):
            _blocked(tx, task, blocked_mark, config_of)
        if task_id in touched or task_id in rearm:
            _deadlines(tx, task, held, config_of(task["project_id"]), claim_fresh_seconds=claim_fresh_seconds,
                       active_at=tx.now if task_id in active else None)


def columns(
    tx: Tx, project_id: str, config: settings.ProjectConditions, state: tuple[dict[str, int], int] | None = None,
) -> None:
    """WIP limits and monitored lanes of one project, against the marks that hold. ``state``: the
    project's column counts and how many column marks it holds, when the caller read them with
    the card (``_column_state``); else they are read here."""
    wanted = config.column_statuses
    if state is None:
        state = _column_state(tx.conn.execute(f"SELECT {_column_sql(wanted)}", (project_id,) * (len(wanted) + 1))
                              .fetchone(), 0, wanted)
    counts, marked = state
    held = {
        (mark.type, mark.subject): mark
        for mark in map(marks.from_row, tx.conn.execute(_COLUMN_MARKS_SQL, (project_id,)).fetchall())
    } if marked else {}
    if not wanted and not held:
        return
    extra = sorted({status for _, status in held} - counts.keys()) if held else None
    if extra:  # a mark left on a column the settings no longer watch: its count says it clears
        counts.update(dict.fromkeys(extra, 0))
        for status, number in tx.conn.execute(
            f"SELECT status, count(*) FROM tasks WHERE project_id = ? AND archived_at IS NULL"
            f" AND status IN ({', '.join('?' for _ in extra)}) GROUP BY status",
            (project_id, *extra),
        ):
            counts[status] = int(number)

    for status in _judged(config.wip_statuses, held, events.WIP_EXCEEDED):
        mark = held.get((events.WIP_EXCEEDED, status))
        limit = config.wip_limits.get(status)
        count = counts[status]
        if limit is not None and count > limit:
            changes = events.wip_exceeded(status=status, count=count, limit=limit)
            if mark is None:
                emit(tx, config, events.WIP_EXCEEDED, project_id, None, changes)
            if mark is None or mark.changes != changes:
                marks.put(tx.conn, Mark(events.WIP_EXCEEDED, project_id, status, None, status, changes,
                                        mark.since if mark else tx.now))
        elif mark is not None:
            marks.drop(tx.conn, events.WIP_EXCEEDED, project_id, status)
            old_limit = limit if limit is not None else int(mark.changes.get("limit", 0))
            emit(tx, config, events.WIP_CLEARED, project_id, None,
                 events.wip_cleared(status=status, count=count, limit=old_limit))
    for status in _judged(config.lane_statuses, held, events.LANE_DRAINED):
        mark = held.get((events.LANE_DRAINED, status))
        count = counts[status]
        empty = status in config.lanes and count == 0
        if empty and mark is None:
            changes = events.lane_drained(status=status, count=0)
            emit(tx, config, events.LANE_DRAINED, project_id, None, changes)
            marks.put(tx.conn, Mark(events.LANE_DRAINED, project_id, status, None, status, changes, tx.now))
        elif not empty and mark is not None:
            marks.drop(tx.conn, events.LANE_DRAINED, project_id, status)
            emit(tx, config, events.LANE_REFILLED, project_id, None, events.lane_refilled(status=status, count=count))


def _judged(configured: tuple[str, ...], held: dict[tuple[str, str], Mark], type_: str) -> Sequence[str]:
    """The columns to judge for one condition: those configured and those holding its mark, sorted."""
    if not held:
        return configured
    return sorted(set(configured) | {status for held_type, status in held if held_type == type_})


_COLUMN_MARKS_SQL = (
    f"SELECT {marks.COLUMNS} FROM condition_marks WHERE project_id = ? AND task_id IS NULL"
    " AND type IN (" + ", ".join(f"'{type_}'" for type_ in _COLUMN_TYPES) + ")"
)


@functools.lru_cache(maxsize=256)
def _column_sql(statuses: tuple[str, ...]) -> str:
    """Select-list terms: how many live cards each of ``statuses`` holds, then how many column
    marks the project holds (the marks themselves are read only when there are some). One ``?``
    per term, each the project. The statuses are validated names, spelled as literals."""
    for status in statuses:
        if status not in domain.STATUSES:
            raise ValueError(f"not a status: {status!r}")
    return ", ".join([
        *(f"(SELECT count(*) FROM tasks c WHERE c.project_id = ? AND c.status = '{status}'"
          " AND c.archived_at IS NULL)" for status in statuses),
        "(SELECT count(*) FROM condition_marks m WHERE m.project_id = ? AND m.task_id IS NULL"
        " AND m.type IN (" + ", ".join(f"'{type_}'" for type_ in _COLUMN_TYPES) + "))",
    ])


def _column_state(row: Row, offset: int, statuses: tuple[str, ...]) -> tuple[dict[str, int], int]:
    """The counts and the number of column marks that ``_column_sql`` put at ``offset`` of ``row``."""
    counts = {status: int(row[offset + n]) for n, status in enumerate(statuses)}
    return counts, int(row[offset + len(statuses)])


def _dependents(tx: Tx, task_ids: set[str]) -> set[str]:
    """The cards written to and the cards they block: a blocker's status decides theirs."""
    if not task_ids:
        return set()
    ids = sorted(task_ids)
    found = set(ids)
    for start in range(0, len(ids), 500):
        chunk = ids[start:start + 500]
        found.update(row[0] for row in tx.conn.execute(
            f"SELECT target_id FROM relations WHERE type = 'blocks' AND source_id IN ({', '.join('?' for _ in chunk)})",
            chunk,
        ))
    return found


def _card(conn: Any, task_id: str) -> Row | None:
    row: Row | None = conn.execute(card.SQL, (task_id,)).fetchone()
    return row


@functools.lru_cache(maxsize=256)
def _card_with_columns_sql(statuses: tuple[str, ...]) -> str:
    """The card's read and a project's column state in one statement (the common command: one
    card, in a project that watches its columns)."""
    return card.SQL.replace(" FROM tasks WHERE id = ?", f", {_column_sql(statuses)} FROM tasks WHERE id = ?")


def cards(tx: Tx, task_ids: set[str], config_of: Any) -> None:
    """``card_blocked`` / ``card_unblocked`` for each card, from its open blockers now."""
    for task_id in sorted(task_ids):
        task = _card(tx.conn, task_id)
        if task is not None:
            _blocked(tx, task, marks.get(tx.conn, events.CARD_BLOCKED, task["project_id"], task_id), config_of)


def _blocked(tx: Tx, task: Row, mark: Mark | None, config_of: Any) -> None:
    """The condition holds for a live (non-terminal, unarchived) card with an open blocker. A card
    that becomes terminal or archived while blocked stops holding it, and says so like any other
    clearing: a consumer folding the signals must end where ``/breaches`` is."""
    task_id, project_id = task["id"], task["project_id"]
    live = task["archived_at"] is None and task["status"] not in domain.TERMINAL
    blockers = rules.open_blockers(tx.conn, task_id) if live and task[rules.POINTED_AT] else []
    if blockers:
        changes = events.card_blocked(blockers=blockers)
        if mark is None or mark.changes != changes:
            # Sent again when the open blockers change while the card stays blocked: the blocker's
            # rows hang off the blocker, so without it a brief's or a page's "waiting on" would
            # name a finished card until this one's next event.
            emit(tx, config_of(project_id), events.CARD_BLOCKED, project_id, task_id, changes)
            marks.put(tx.conn, Mark(events.CARD_BLOCKED, project_id, task_id, task_id, task_id, changes,
                                    mark.since if mark else tx.now))
    elif mark is not None:
        marks.drop(tx.conn, events.CARD_BLOCKED, project_id, task_id)
        emit(tx, config_of(project_id), events.CARD_UNBLOCKED, project_id, task_id,
             events.card_unblocked(blockers=mark.changes.get("blockers", [])))


def deadlines(tx: Tx, task_id: str, config_of: Any, *, claim_fresh_seconds: float) -> None:
    """Drop the card's temporal marks its state has moved past; tell the timer what is armed now."""
    task = _card(tx.conn, task_id)
    if task is None:
        tx.effects.append(Deadlines(task_id, ()))
        return
    _deadlines(tx, task, marks.of_task(tx.conn, task_id), config_of(task["project_id"]),
               claim_fresh_seconds=claim_fresh_seconds)


def _still_holds(mark: Mark, episode: temporal.Episode | None) -> bool:
    """Whether a fired temporal mark still holds: its card is in the state it fired on, and that
    state was past its deadline when it fired under today's threshold too. A threshold raised
    beyond the time the card had spent there makes the condition false (the new deadline is armed
    instead); one lowered keeps it. Judged against the moment it fired, not the clock now, so a
    clock stepped back cannot make it fire twice."""
    return episode is not None and episode.key == mark.episode and episode.deadline <= temporal.posix(mark.since)


def _deadlines(
    tx: Tx, task: Row, held_all: dict[str, Mark], config: settings.ProjectConditions, *,
    claim_fresh_seconds: float, active_at: str | None = None,
) -> None:
    idle = held_all.get(events.CARD_IDLE)
    found = temporal.episodes(tx.conn, task, config, claim_fresh_seconds=claim_fresh_seconds, active_at=active_at,
                              idle_fired=idle.episode if idle is not None else None)
    current = {episode.type: episode for episode in found}
    held = {}
    for type_, mark in held_all.items():
        if type_ not in conditions.TEMPORAL:
            continue
        if _still_holds(mark, current.get(type_)):
            held[type_] = mark
        else:
            marks.drop(tx.conn, type_, mark.project_id, mark.subject)
    armed = tuple([
        (episode.type, episode.key, episode.deadline)
        for episode in found
        if not (episode.type in held and held[episode.type].episode == episode.key)
    ])
    tx.effects.append(Deadlines(task["id"], armed))


def fire(tx: Tx, due: list[tuple[str, str, str]], *, claim_fresh_seconds: float, slack: float) -> list[Deadlines]:
    """The timer's own transaction: fire each (task, type, episode) whose deadline has come and
    whose state is still the one it was armed on; returns what must be armed again (too early)."""
    now = temporal.posix(tx.now)
    configs: dict[str, settings.ProjectConditions] = {}
    again: list[Deadlines] = []
    for task_id, type_, episode in due:
        task = _card(tx.conn, task_id)
        if task is None:
            continue
        project_id = task["project_id"]
        config = configs.setdefault(project_id, project_config(tx.conn, project_id))
        held_all = marks.of_task(tx.conn, task_id)
        idle = held_all.get(events.CARD_IDLE)
        match = next(
            (found for found in temporal.episodes(tx.conn, task, config, claim_fresh_seconds=claim_fresh_seconds,
                                                  idle_fired=idle.episode if idle is not None else None)
             if found.type == type_ and found.key == episode),
            None,
        )
        if match is None:
            continue  # the card moved on since it was armed; its commit re-armed it
        held = held_all.get(type_)
        if held is not None and held.episode == episode:
            continue  # fired already
        if match.deadline > now + slack:
            again.append(Deadlines(task_id, ((type_, episode, match.deadline),)))
            continue
        changes = match.changes
        marks.put(tx.conn, Mark(type_, project_id, task_id, task_id, episode, changes, tx.now))
        emit(tx, config, type_, project_id, task_id, changes)
    return again


def rejected(tx: Tx, ref: str, to: str, code: str) -> None:
    """``transition_rejected``: in a transaction of its own, since the refused command rolled back."""
    try:
        task = find_task(tx.conn, ref)  # the refused command's own lookup: a uuid prefix names it too
    except TaskloomError:
        return  # several cards start so (AMBIGUOUS_REF): the refusal named no one card
    if task is None:
        return
    config = project_config(tx.conn, task["project_id"])
    if config.emit_rejections:
        emit(tx, config, events.TRANSITION_REJECTED, task["project_id"], task["id"],
             events.transition_rejected(from_=task["status"], to=to, code=code))


def rebuild(tx: Tx, *, claim_fresh_seconds: float) -> None:
    """At start: re-derive every mark from state (signals for what changed while the board was
    down) and arm every temporal condition that has not fired."""
    projects = [row[0] for row in tx.conn.execute("SELECT id FROM projects ORDER BY id")]
    configs = {project_id: project_config(tx.conn, project_id) for project_id in projects}
    for project_id in projects:
        columns(tx, project_id, configs[project_id])
    candidates = {row[0] for row in tx.conn.execute("SELECT DISTINCT target_id FROM relations WHERE type = 'blocks'")}
    candidates.update(row[0] for row in tx.conn.execute(
        "SELECT subject FROM condition_marks WHERE type = ?", (events.CARD_BLOCKED,)))
    cards(tx, candidates, configs.__getitem__)
    temporal_projects = [p for p in projects if configs[p].max_time_in_status or configs[p].idle_after is not None]
    live = {row[0] for row in tx.conn.execute("SELECT id FROM tasks WHERE status = 'in_progress' AND archived_at IS NULL")}
    for project_id in temporal_projects:
        live.update(row[0] for row in tx.conn.execute(
            f"SELECT id FROM tasks WHERE project_id = ? AND archived_at IS NULL"
            f" AND status NOT IN ({', '.join('?' for _ in _TERMINAL)})", (project_id, *_TERMINAL)))
    live.update(row[0] for row in tx.conn.execute("SELECT DISTINCT task_id FROM condition_marks WHERE task_id IS NOT NULL"))
    for task_id in sorted(live):
        deadlines(tx, task_id, configs.__getitem__, claim_fresh_seconds=claim_fresh_seconds)
