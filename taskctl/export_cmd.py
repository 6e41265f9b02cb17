"""``taskctl export``: card briefs as markdown files (SPEC §8).

``export md`` asks the board to render every card (``POST /api/v1/export``) and writes each to
``<DIR>/<IDENTIFIER>.md`` atomically, leaving files that are already up to date alone;
``--check`` writes nothing and exits 3 when a file is missing or differs. Files in DIR that name
no current card (an archived card, say) are never deleted: the directory may hold other things.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

import click

from .command import command, current, drop_none
from .context import TaskctlError, paginate

#: Where ``export md`` writes when ``--out`` is not given (relative to the working directory).
DEFAULT_OUT = "taskloom-export"
#: SPEC §10: ``--check`` found a missing or different file.
EXIT_DIFFERENCES = 3
#: Tasks per ``GET /api/v1/tasks`` page (the API's maximum).
PAGE_LIMIT = 1000
#: What a card identifier looks like; anything else could name a path outside DIR.
_IDENTIFIER = re.compile(r"[A-Z0-9][A-Z0-9-]*-[0-9]+")


def brief_path(out_dir: Path, identifier: str) -> Path:
    """``<DIR>/<IDENTIFIER>.md``; an identifier that could leave the directory is refused."""
    if not _IDENTIFIER.fullmatch(identifier):
        raise TaskctlError("VALIDATION_FAILED", f"unexpected card identifier {identifier!r}",
                           details={"identifier": identifier})
    return out_dir / f"{identifier}.md"


def write_atomically(path: Path, data: bytes) -> None:
    """Temp file in the same directory, fsync, rename: a reader sees the old file or the new one."""
    temp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    if hasattr(os, "O_DIRECTORY"):  # make the rename itself durable (POSIX)
        dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


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


@click.group()
def export() -> None:
    """Card briefs as markdown: the brief an agent reads to work (or resume) a card."""


@command(export, "md")
@click.option(
    "--out", "out_dir", default=DEFAULT_OUT, show_default=True, metavar="DIR",
    type=click.Path(file_okay=False, path_type=Path), help="Directory for the <IDENTIFIER>.md files.",
)
@click.option("--project", metavar="ID", help="Only this project's cards.")
@click.option("--check", is_flag=True, help="Write nothing; exit 3 when a file is missing or differs.")
def md(out_dir: Path, project: str | None, check: bool) -> None:
    """Write every card's brief to DIR/<IDENTIFIER>.md.

    Archived cards are left out. Each file is written atomically, and only when its content
    changed. With --check nothing is written: exit 0 when every file matches, 3 when one is
    missing or differs (each is named on stdout).
    """
    inv = current()
    http = inv.http()
    query = drop_none({"limit": PAGE_LIMIT, "project": project})
    cards = list(paginate(http, "/api/v1/tasks", query))
    result = export_cards(
        cards,
        lambda task_id: http.call("POST", "/api/v1/export", {"ref": task_id}),
        out_dir,
        check=check,
        progress=not inv.out.json and sys.stderr.isatty(),
    )
    stale = result["missing"] + result["differs"]

    def human(data: dict[str, Any]) -> None:
        if check:
            for path in data["missing"]:
                inv.out.echo(f"missing  {path}")
            for path in data["differs"]:
                inv.out.echo(f"differs  {path}")
            count = data["cards"]
            verdict = f"{len(stale)} of {count} briefs are stale" if stale else f"all {count} briefs match"
            inv.out.note(f"{verdict} in {data['dir']}")
        else:
            inv.out.note(
                f"exported {data['cards']} cards to {data['dir']}: "
                f"{len(data['written'])} written, {data['unchanged']} unchanged"
            )

    inv.out.result(result, human)
    if check and stale:
        click.get_current_context().exit(EXIT_DIFFERENCES)
