"""Agent sessions working a card: register (or resume), close, list (SPEC §4.4).

A session's id is derived from the task, the owner and the segment number, so an agent that
resumes after a crash registers the same id again instead of leaving a ghost behind. Registering
an open session again is a phase update when the phase changed and nothing at all when it did not.
"""

from __future__ import annotations

import hashlib
from typing import Any

from shared import domain, events, limits
from shared.errors import TaskloomError, not_found, validation

from ..queries.refs import resolve_prefix
from ..queries.sessions import session_to_dict
from ..store import Tx
from .common import check_actor, load_task, refuse_archived, written

CLOSE_STATUSES = ("completed", "failed", "abandoned")
PHASE_MAX_CHARS = limits.PHASE_MAX_CHARS


def session_id(task_id: str, owner_kind: str, owner_id: str, seg: int) -> str:
    """Deterministic: the same task, owner and segment always name the same session."""
    digest = hashlib.sha256(f"{task_id}\0{owner_kind}\0{owner_id}\0{seg}".encode()).hexdigest()
    return f"ses_{digest[:24]}"


def register_session(
    tx: Tx,
    ref: str,
    *,
    seg: int,
    phase: str,
    owner_kind: str | None = None,
    owner_id: str | None = None,
) -> tuple[dict[str, Any], bool]:
    """Open a session or move an open one to a new phase; returns (session, created)."""
    task = load_task(tx, ref)
    refuse_archived(task)
    if seg < 0:
        raise validation("seg must be at least 0", seg=seg)
    phase = phase.strip()
    if not phase or len(phase) > PHASE_MAX_CHARS:
        raise validation(f"phase must be 1–{PHASE_MAX_CHARS} characters", phase=phase)
    if (owner_kind is None) != (owner_id is None):
        raise validation("owner_kind and owner_id go together", owner_kind=owner_kind, owner_id=owner_id)
    if owner_kind is None or owner_id is None:
        owner_kind, owner_id = tx.actor.kind, tx.actor.id
    check_actor(owner_kind, owner_id, "owner")
    if not owner_kind.strip() or not owner_id.strip():
        raise validation("owner_kind and owner_id must not be empty", owner_kind=owner_kind, owner_id=owner_id)
    domain.check_actor_kind(owner_kind, "owner_kind")

    sid = session_id(task["id"], owner_kind, owner_id, seg)
    existing = tx.one("SELECT * FROM agent_sessions WHERE id = ?", (sid,))
    if existing is not None:
        if existing["status"] != "open":
            raise TaskloomError(
                "CONFLICT",
                f"session {sid} is {existing['status']}; a closed session is not resumed",
                details={"session_id": sid, "status": existing["status"]},
                hint="register the next segment (seg + 1) to start a new session",
            )
        if existing["phase"] == phase:
            return session_to_dict(existing), False  # a resume in the same phase is not a new fact
        tx.execute("UPDATE agent_sessions SET phase = ?, updated_at = ? WHERE id = ?", (phase, tx.now, sid))
        created = False
    else:
        tx.execute(
            "INSERT INTO agent_sessions (id, task_id, owner_kind, owner_id, seg, phase, status, created_at, updated_at)"
            " VALUES (?, ?, ?, ?, ?, ?, 'open', ?, ?)",
            (sid, task["id"], owner_kind, owner_id, seg, phase, tx.now, tx.now),
        )
        created = True
    tx.record(
        events.SESSION_REGISTERED,
        events.session_registered(session_id=sid, seg=seg, owner_kind=owner_kind, phase=phase),
        task_id=task["id"],
        project_id=task["project_id"],
    )
    return session_to_dict(written(tx.one("SELECT * FROM agent_sessions WHERE id = ?", (sid,)))), created


def close_session(tx: Tx, ref: str, sid: str, *, status: str) -> dict[str, Any]:
    task = load_task(tx, ref)
    if status not in CLOSE_STATUSES:
        raise validation(f"status must be one of {', '.join(CLOSE_STATUSES)}", status=status)
    row = tx.one("SELECT * FROM agent_sessions WHERE id = ? AND task_id = ?", (sid, task["id"]))
    if row is None and (full_id := resolve_prefix(tx.conn, "session", sid, scope="task_id = ?", scope_params=(task["id"],))):
        row = tx.one("SELECT * FROM agent_sessions WHERE id = ?", (full_id,))
    if row is None:
        raise not_found("session", sid)
    sid = row["id"]  # a prefix names the full id from here on
    if row["status"] != "open":
        raise TaskloomError(
            "CONFLICT",
            f"session {sid} is already {row['status']}",
            details={"session_id": sid, "status": row["status"]},
        )
    tx.execute(
        "UPDATE agent_sessions SET status = ?, closed_at = ?, updated_at = ? WHERE id = ?",
        (status, tx.now, tx.now, sid),
    )
    tx.record(
        events.SESSION_CLOSED,
        events.session_closed(session_id=sid, status=status),
        task_id=task["id"],
        project_id=task["project_id"],
    )
    return session_to_dict(written(tx.one("SELECT * FROM agent_sessions WHERE id = ?", (sid,))))
