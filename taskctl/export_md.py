"""``taskctl export md``: every card's brief written to ``<DIR>/<IDENTIFIER>.md`` (SPEC §8).

Each file is written atomically, and only when its content changed; ``--check`` writes nothing
and names the missing and differing files. Files in DIR that name no current card (an archived
card, say) are never deleted: the directory may hold other things.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import click

from shared import limits

from .errors import TaskctlError

#: Where ``export md`` writes when ``--out`` is not given (relative to the working directory).
DEFAULT_OUT = "taskloom-export"
#: SPEC §10: ``--check`` found a missing or different file.
EXIT_DIFFERENCES = 3
#: Tasks per ``GET /api/v1/tasks`` page (the API's maximum).
PAGE_LIMIT = limits.PAGE_LIMIT_MAX
#: What a card identifier looks like; anything else could name a path outside DIR.
_IDENTIFIER = re.compile(r"[A-Z0-9][A-Z0-9-]*-[0-9]+")


def brief_path(out_dir: Path, identifier: str) -> Path:
    """``<DIR>/<IDENTIFIER>.md``; an identifier that could leave the directory is refused."""
    if not _IDENTIFIER.fullmatch(identifier):
        raise TaskctlError("VALIDATION_FAILED", f"unexpected card identifier {identifier!r}",
                           details={"identifier": identifier})
    return out_dir / f"{identifier}.md"


def write_atomically(path: Path, data: bytes) -> None:
    """Owner-only, through the hub's writer: a reader sees the old file or the new one."""
    from services.hub.files import write_atomic

    write_atomic(path, data)


def _read(path: Path) -> bytes | None:
    """The brief at ``path`` as it is, None when there is none; something there that is not a
    brief file (a directory, a FIFO that would block the read for ever) is refused, naming it."""
    from services.hub.briefs import path_problem

    problem = path_problem(str(path))
    if problem is not None:
        raise TaskctlError("VALIDATION_FAILED", problem, details={"path": str(path)},
                           hint="move it away, or export into another directory")
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise TaskctlError("VALIDATION_FAILED", f"cannot read {path}: {exc.strerror}", details={"path": str(path)}) from None


class _NoProgress:
    def __enter__(self) -> _NoProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def update(self, steps: int) -> None:
        return None


def export_cards(
    cards: list[dict[str, Any]],
    render: Any,
    out_dir: Path,
    *,
    check: bool,
    progress: bool,
) -> dict[str, Any]:
    """Render each card with ``render(task_id)``; write the changed ones, or (``check``) only compare."""
    result: dict[str, Any] = {
        "dir": str(out_dir), "cards": len(cards), "written": [], "unchanged": 0, "missing": [], "differs": [],
    }
    if not check and cards:
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise TaskctlError("VALIDATION_FAILED", f"cannot create {out_dir}: {exc.strerror}",
                               details={"out": str(out_dir)}) from None
    bar: Any = (
        click.progressbar(length=len(cards), label="checking" if check else "exporting", file=sys.stderr)
        if progress and cards
        else _NoProgress()
    )
    with bar:
        for card in cards:
            answer = render(card["id"])
            path = brief_path(out_dir, answer["task"]["identifier"])
            wanted = answer["markdown"].encode("utf-8")
            current_bytes = _read(path)
            if current_bytes == wanted:
                result["unchanged"] += 1
            elif check:
                result["missing" if current_bytes is None else "differs"].append(str(path))
            else:
                try:
                    write_atomically(path, wanted)
                except OSError as exc:
                    raise TaskctlError("VALIDATION_FAILED", f"cannot write {path}: {exc.strerror}",
                                       details={"path": str(path)}) from None
                result["written"].append(str(path))
            bar.update(1)
    return result
