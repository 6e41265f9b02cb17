"""Labels (list and GC) and the actor dictionary (SPEC §4.4, §5).

Label use counts are a cache kept by the task commands (``common.apply_labels``); the GC recounts
them from the tasks themselves, repairs any that disagree and archives the labels nobody has used
for a while. Archiving is a fact (one ``label_gc`` row, written by the board as ``system``);
repairing a cached count is not, so a GC that archives nothing writes no row.
"""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from typing import Any

import orjson

from shared import events, limits
from shared.errors import validation
from shared.timestamps import format_timestamp, parse_timestamp

from ..queries.projects import require_project
from ..store import SYSTEM_ACTOR, Tx

DEFAULT_TTL_DAYS = 30


def gc_labels(
    tx: Tx,
    *,
    project: str | None = None,
    ttl_days: int = DEFAULT_TTL_DAYS,
    dry_run: bool = False,
) -> dict[str, Any]:
    """Recount every label from live tasks, repair wrong counts, archive the long-unused ones.

    Writes one ``label_gc`` row as ``system`` (the caller is named in its ``reason``) and only when
    something was archived. ``archived`` names each label as ``project/name`` whatever the scope, so
    a board-wide run is unambiguous (a project id never contains '/').
    """
    if ttl_days < 0:
        raise validation("ttl_days must be at least 0", ttl_days=ttl_days)
    if project is not None:
        require_project(tx.conn, project)
    scope, params = ("WHERE project_id = ?", (project,)) if project is not None else ("", ())
    # Counted here rather than in SQL: reading inside a JSON column is spelled differently by each engine.
    real: Counter[tuple[str, str]] = Counter()
    for row in tx.all(
        f"SELECT project_id, labels_json FROM tasks WHERE archived_at IS NULL {'AND project_id = ?' if project is not None else ''}",
        params,
    ):
        real.update((row["project_id"], name) for name in orjson.loads(row["labels_json"]))
    cutoff = format_timestamp(parse_timestamp(tx.now) - timedelta(days=ttl_days))
    mismatched: list[tuple[str, str, int]] = []
    to_archive: list[tuple[str, str]] = []
    kept = 0
    for row in tx.all(f"SELECT * FROM labels {scope} ORDER BY project_id, name", params):
        key = (row["project_id"], row["name"])
        uses = real.get(key, 0)
        if uses != row["use_count"]:
            mismatched.append((*key, uses))
        if row["archived_at"] is not None:
            continue
        if uses == 0 and row["last_used_at"] <= cutoff:
            to_archive.append(key)
        else:
            kept += 1
    # One run archives a bounded batch, so its label_gc row stays within a frame; the next run
    # takes the rest (they are counted as neither archived nor kept).
    to_archive = to_archive[: limits.MAX_LABEL_GC_BATCH]
    names = [f"{project_id}/{name}" for project_id, name in to_archive]
    result: dict[str, Any] = {
        "archived": names,
        "kept": kept,
        "mismatched": len(mismatched),
        "ttl_days": ttl_days,
        "dry_run": dry_run,
        "revision": None,
    }
    if dry_run:
        return result
    for project_id, name, uses in mismatched:
        tx.execute("UPDATE labels SET use_count = ? WHERE project_id = ? AND name = ?", (uses, project_id, name))
    if not to_archive:
        return result
    for project_id, name in to_archive:
        tx.execute("UPDATE labels SET archived_at = ? WHERE project_id = ? AND name = ?", (tx.now, project_id, name))
    result["revision"] = tx.record(
        events.LABEL_GC,
        events.label_gc(
            archived=names,
            kept=kept,
            mismatched=len(mismatched),
            reason=f"requested by {tx.actor.kind}:{tx.actor.id}",
            ttl_days=ttl_days,
        ),
        task_id=None,
        project_id=project,
        actor=SYSTEM_ACTOR,
    )
    return result
