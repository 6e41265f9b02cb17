"""Relations between tasks: add, remove, list (SPEC §4.4, the parent rules of §3).

A relation reads "source <type> target": A blocks B, epic E is the parent of child C, R is a
review_of T. Its activity row hangs off the **target**, so the card that gains a parent, a
blocker or a review hears about it. Every rule is checked here first with a clear code; the
schema's ``relations_parent_rules`` trigger repeats the parent rules as a backstop.
"""

from __future__ import annotations

from typing import Any

from shared import domain, events
from shared.errors import TaskloomError, not_found, validation

from ..conditions import rules
from ..dialect import Row
from ..queries.refs import resolve_prefix
from ..queries.relations import relation_to_dict
from ..queries.tasks import require_task
from ..store import Tx
from .common import load_task, new_id, refuse_archived, written

#: ``related`` has no direction: B related A duplicates A related B.
SYMMETRIC = frozenset({"related"})


def _refuse(code: str, message: str, **details: Any) -> TaskloomError:
    return TaskloomError(code, message, details=details)


def _reaches(tx: Tx, type_: str, start: str, goal: str) -> bool:
    """Whether ``goal`` is reachable from ``start`` following ``type_`` edges source → target."""
    row = tx.one(
        # The seed is read from tasks, not bound bare: its type (and collation) is then the column's.
        "WITH RECURSIVE walk(id) AS (SELECT id FROM tasks WHERE id = ? UNION"
        " SELECT r.target_id FROM relations r JOIN walk w ON r.source_id = w.id WHERE r.type = ?)"
        " SELECT 1 FROM walk WHERE id = ?",
        (start, type_, goal),
    )
    return row is not None


def _waits_for(tx: Tx, start: str, goal: str) -> bool:
    """Whether ``start`` waits, however indirectly, for ``goal`` to finish, through children and
    blockers (``rules.WAITS``, which the state import's check reads too)."""
    return tx.one(rules.WAITS_FOR_SQL, (start, goal)) is not None


def _deadlock(type_: str, source: Row, target: Row) -> TaskloomError:
    """``source <type_> target`` would make two cards wait for each other: neither could finish."""
    first, then = (target, source) if type_ == "parent" else (source, target)
    return _refuse(
        "RELATION_CYCLE",
        f"{first['identifier']} already waits for {then['identifier']} to finish (through its children or its"
        f" blockers); {source['identifier']} {type_} {target['identifier']} would make each wait for the other,"
        " and neither could ever finish",
        type=type_, source=source["identifier"], target=target["identifier"], waits=True,
    )


def _cycle(type_: str, source: Row, target: Row) -> TaskloomError:
    return _refuse(
        "RELATION_CYCLE",
        f"{target['identifier']} already leads to {source['identifier']} through {type_};"
        " this relation would close a cycle",
        type=type_, source=source["identifier"], target=target["identifier"],
    )


def _chain_length(tx: Tx, task_id: str, *, upward: bool) -> int:
    """Tasks on the longest parent chain from ``task_id`` (itself included), up to its roots or
    down to its leaves. Bounded: a chain past the limit is refused before it can grow."""
    near, far = ("target_id", "source_id") if upward else ("source_id", "target_id")
    row = tx.execute(
        f"WITH RECURSIVE chain(id, depth) AS (SELECT id, 1 FROM tasks WHERE id = ? UNION"
        f" SELECT r.{far}, c.depth + 1 FROM relations r JOIN chain c ON r.{near} = c.id"
        f" WHERE r.type = 'parent' AND c.depth <= ?)"
        f" SELECT max(depth) FROM chain",
        (task_id, domain.MAX_PARENT_DEPTH + 1),
    ).fetchone()
    return int(row[0])


def _check_parent(tx: Tx, parent: Row, child: Row) -> None:
    if parent["kind"] != "epic":
        raise _refuse(
            "RELATION_INVALID",
            f"{parent['identifier']} is a {parent['kind']}; only an epic can be a parent",
            source=parent["identifier"], kind=parent["kind"],
        )
    if parent["project_id"] != child["project_id"]:
        raise _refuse(
            "RELATION_INVALID",
            f"{parent['identifier']} and {child['identifier']} are in different projects",
            source_project=parent["project_id"], target_project=child["project_id"],
        )
    if _reaches(tx, "parent", child["id"], parent["id"]):
        raise _cycle("parent", parent, child)
    fan_in = tx.execute(
        "SELECT count(*) FROM relations WHERE type = 'parent' AND target_id = ?", (child["id"],)
    ).fetchone()[0]
    if fan_in >= domain.MAX_PARENT_FAN_IN:
        raise _refuse(
            "RELATION_FAN_IN",
            f"{child['identifier']} already has {fan_in} parents; the limit is {domain.MAX_PARENT_FAN_IN}",
            target=child["identifier"], parents=fan_in, limit=domain.MAX_PARENT_FAN_IN,
        )
    depth = _chain_length(tx, parent["id"], upward=True) + _chain_length(tx, child["id"], upward=False)
    if depth > domain.MAX_PARENT_DEPTH:
        raise _refuse(
            "RELATION_DEPTH",
            f"the parent chain through {parent['identifier']} and {child['identifier']} would be {depth} tasks deep;"
            f" the limit is {domain.MAX_PARENT_DEPTH}",
            depth=depth, limit=domain.MAX_PARENT_DEPTH,
        )


def add_relation(tx: Tx, ref: str, *, type: str, target: str) -> dict[str, Any]:
    """``ref`` <type> ``target``; for ``parent`` the path task is the epic and ``target`` its child."""
    if type not in domain.RELATION_TYPES:
        raise validation(f"type must be one of {', '.join(domain.RELATION_TYPES)}", type=type)
    source = load_task(tx, ref)
    target_row = require_task(tx.conn, target)
    refuse_archived(source)
    refuse_archived(target_row)
    if source["id"] == target_row["id"]:
        raise _refuse("RELATION_INVALID", f"{source['identifier']} cannot be related to itself", source=source["identifier"])

    pairs = [(source["id"], target_row["id"])]
    if type in SYMMETRIC:
        pairs.append((target_row["id"], source["id"]))
    for pair in pairs:
        existing = tx.one("SELECT id FROM relations WHERE type = ? AND source_id = ? AND target_id = ?", (type, *pair))
        if existing is not None:
            raise TaskloomError(
                "RELATION_EXISTS",
                f"{source['identifier']} {type} {target_row['identifier']} already exists",
                details={"relation_id": existing["id"], "type": type},
            )

    # A ring that mixes the two waits as surely as one of either kind: an epic blocking its own
    # child (the child waits for the epic, the epic for the child). The code alone checks this
    # one: the schema's triggers guard each relation type's own rings.
    if type == "parent":
        # Parent rules in the trigger's order, so code and backstop name the same first problem.
        _check_parent(tx, source, target_row)
        if _waits_for(tx, target_row["id"], source["id"]):
            raise _deadlock(type, source, target_row)
    elif type == "blocks" and _waits_for(tx, source["id"], target_row["id"]):
        # One walk for the common case, no ring at all; a ring of blockers alone can never start
        # and is named as the schema's backstop (relations_blocks_acyclic) names it.
        if _reaches(tx, "blocks", target_row["id"], source["id"]):
            raise _cycle(type, source, target_row)
        raise _deadlock(type, source, target_row)

    relation_id = new_id()
    tx.execute(
        "INSERT INTO relations (id, type, source_id, target_id, created_at) VALUES (?, ?, ?, ?, ?)",
        (relation_id, type, source["id"], target_row["id"], tx.now),
    )
    tx.record(
        events.RELATION_ADDED,
        events.relation_added(relation_id=relation_id, type_=type, source=source["id"], target=target_row["id"]),
        task_id=target_row["id"],
        project_id=target_row["project_id"],
    )
    return relation_to_dict(written(tx.one("SELECT * FROM relations WHERE id = ?", (relation_id,))))


def remove_relation(tx: Tx, ref: str, relation_id: str) -> dict[str, Any]:
    """Remove a relation that touches ``ref`` (from either end); the row hangs off the target."""
    task = load_task(tx, ref)
    row = tx.one(
        "SELECT * FROM relations WHERE id = ? AND ? IN (source_id, target_id)", (relation_id, task["id"])
    )
    if row is None and (full_id := resolve_prefix(
        tx.conn, "relation", relation_id, scope="? IN (source_id, target_id)", scope_params=(task["id"],)
    )) is not None:
        row = tx.one("SELECT * FROM relations WHERE id = ?", (full_id,))
    if row is None:
        raise not_found("relation", relation_id)
    relation_id = row["id"]  # a prefix names the full id from here on
    target_row = require_task(tx.conn, row["target_id"])
    tx.execute("DELETE FROM relations WHERE id = ?", (relation_id,))
    tx.record(
        events.RELATION_REMOVED,
        events.relation_removed(relation_id=relation_id, type_=row["type"], source=row["source_id"], target=row["target_id"]),
        task_id=target_row["id"],
        project_id=target_row["project_id"],
    )
    return relation_to_dict(row)
