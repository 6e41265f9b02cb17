"""Card-brief files on disk: where they go, what may be written there, and writing them atomically.

Shared by the hub's registrations and ``taskctl export watch --standalone``. The board renders a
brief (``POST /api/v1/export``); only these functions put one on disk.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Final

from shared import events

from .files import write_atomic

#: ``--dir DIR`` writes ``DIR/.taskloom/<IDENTIFIER>/card.md`` (SPEC §8).
DIR_LAYOUT: Final = (".taskloom", "card.md")
#: What a card identifier looks like; anything else could name a path outside DIR.
IDENTIFIER: Final = re.compile(r"[A-Z0-9][A-Z0-9-]*-[0-9]+")
_RELATION_EVENTS: Final = frozenset({events.RELATION_ADDED, events.RELATION_REMOVED})
#: Conditions that change a brief with no row of its card: its open blockers (``blocked_by``)
#: moved because a blocker reached done/canceled or reopened, whose rows hang off the blocker.
_BLOCKER_SIGNALS: Final = frozenset({events.CARD_BLOCKED, events.CARD_UNBLOCKED})


def dir_target(directory: str, identifier: str) -> str:
    """The brief of ``identifier`` under ``directory``; an identifier that could leave it is refused."""
    if not IDENTIFIER.fullmatch(identifier):
        raise ValueError(f"unexpected card identifier {identifier!r}")
    return os.path.join(directory, DIR_LAYOUT[0], identifier, DIR_LAYOUT[1])


def path_problem(path: str, *, directory: bool = False) -> str | None:
    """Why ``path`` cannot be a brief file (or, with ``directory``, hold briefs); None if it can.

    A directory where a file is meant is refused, and so is a file where a directory must be
    (an ancestor): the write would fail later, after other cards were written.
    """
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as exc:
        return f"{path}: {exc.strerror}"
    if mode is not None:
        if directory and not stat.S_ISDIR(mode):
            return f"{path} exists and is not a directory"
        if not directory and stat.S_ISDIR(mode):
            return f"{path} is a directory; a brief is a file"
        if not directory and not stat.S_ISREG(mode):
            return f"{path} exists and is not a regular file"
        return None
    parent = os.path.dirname(path)
    while parent and parent != os.path.dirname(parent):
        try:
            mode = os.stat(parent).st_mode
        except FileNotFoundError:
            parent = os.path.dirname(parent)
            continue
        except OSError as exc:
            return f"{parent}: {exc.strerror}"
        return None if stat.S_ISDIR(mode) else f"{parent} is not a directory"
    return None


def protected_problem(path: str, protected: Iterable[str]) -> str | None:
    """Why ``path`` may not hold a brief: it lies inside a directory of Taskloom's own state (the
    hub's runtime directory, the board's data directory), where a brief would replace a pointer,
    a token or the registrations file. Symlinks and ``..`` are resolved first."""
    real = os.path.realpath(path)
    for directory in protected:
        root = os.path.realpath(directory)
        if real == root or real.startswith(root.rstrip(os.sep) + os.sep):
            return f"{path} is inside {directory}, which holds Taskloom's own files; write briefs elsewhere"
    return None


def tasks_named(activity: dict[str, Any]) -> set[str] | None:
    """The task ids whose briefs an activity row may change; None for a task-less row (refresh all).

    A relation's row hangs off its target, but the source card's brief lists the relation too.
    """
    task_id = activity.get("task_id")
    if not task_id:
        return None
    named = {str(task_id)}
    if activity.get("event") in _RELATION_EVENTS:
        changes = activity.get("changes") or {}
        named.update(str(changes[end]) for end in ("source", "target") if changes.get(end))
    return named


def tasks_signalled(signal: dict[str, Any]) -> set[str]:
    """The task ids whose briefs a condition signal says have changed; empty for the conditions a
    brief does not show (those that are kept as rows mark their card through ``tasks_named``)."""
    task_id = signal.get("task_id")
    if signal.get("type") in _BLOCKER_SIGNALS and task_id:
        return {str(task_id)}
    return set()


def write_brief(path: str, data: bytes) -> bool:
    """Write ``data`` to ``path`` atomically, owner-only; False (and nothing written) when it already holds it.

    A reader sees the old brief or the new one, never a part, and a crash leaves one of the two
    (``files.write_atomic``).
    """
    try:
        with open(path, "rb") as handle:
            if handle.read(len(data) + 1) == data:
                return False
    except FileNotFoundError:
        pass
    write_atomic(Path(path), data)
    return True
