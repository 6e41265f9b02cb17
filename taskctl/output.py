"""What taskctl prints: aligned tables for people, ``{"ok": …}`` envelopes for scripts.

Colour only on a TTY and never when ``NO_COLOR`` is set (https://no-color.org). Every string
written goes through :func:`taskctl.errors.redact`, so the token cannot leak through here.
"""

from __future__ import annotations

import json as jsonlib
import os
import shutil
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any

import click

from .errors import TaskctlError, redact

STATUS_COLOURS = {
    "backlog": "bright_black",
    "todo": "blue",
    "in_progress": "yellow",
    "awaiting": "magenta",
    "blocked": "red",
    "in_review": "cyan",
    "done": "green",
    "canceled": "bright_black",
}
PRIORITY_COLOURS = {"urgent": "red", "high": "yellow", "medium": None, "low": "bright_black"}


def colour_wanted(stream: IO[str], environ: Mapping[str, str] | None = None) -> bool:
    env = os.environ if environ is None else environ
    if env.get("NO_COLOR"):
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


@dataclass(frozen=True)
class Column:
    """One table column: its header, how to read a cell from a row, and an optional colour."""

    header: str
    get: Callable[[Mapping[str, Any]], Any]
    colour: Callable[[str], str | None] | None = None
    #: The one column that gives way when the table is wider than the terminal.
    elastic: bool = False


def cell_text(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (list, tuple)):
        return ",".join(str(item) for item in value) or "-"
    if isinstance(value, dict):
        return jsonlib.dumps(value, ensure_ascii=False, sort_keys=True)
    return " ".join(str(value).split()) if "\n" in str(value) else str(value)


class Output:
    """One invocation's printer: JSON envelopes with ``--json``, tables and lines otherwise."""

    def __init__(self, *, json: bool = False, stdout: IO[str] | None = None, stderr: IO[str] | None = None) -> None:
        self.json = json
        self.stdout = stdout or sys.stdout
        self.stderr = stderr or sys.stderr
        self.colour = colour_wanted(self.stdout)
        self.colour_err = colour_wanted(self.stderr)

    # -- primitives ------------------------------------------------------------------------

    def echo(self, text: str = "", *, err: bool = False, nl: bool = True) -> None:
        click.echo(redact(text), file=self.stderr if err else self.stdout, nl=nl, color=True)

    def style(self, text: str, *, err: bool = False, **styles: Any) -> str:
        if not (self.colour_err if err else self.colour) or not any(styles.values()):
            return text
        return click.style(text, **styles)

    def note(self, text: str) -> None:
        """Progress and side remarks for people: always stderr, so stdout stays clean."""
        self.echo(self.style(text, err=True, dim=True), err=True)

    # -- results ---------------------------------------------------------------------------

    def result(self, data: Any, human: Callable[[Any], None] | str | None = None) -> None:
        """The command's answer: an envelope with ``--json``, else the human rendering."""
        if self.json:
            self.echo(jsonlib.dumps({"ok": True, "data": data}, ensure_ascii=False, indent=None))
            return
        if human is None:
            self.echo(jsonlib.dumps(data, ensure_ascii=False, indent=2))
        elif isinstance(human, str):
            self.echo(human)
        else:
            human(data)

    def failure(self, error: TaskctlError) -> None:
        if self.json:
            self.echo(jsonlib.dumps({"ok": False, "error": error.body()}, ensure_ascii=False))
            return
        code = self.style(error.code, err=True, fg="red", bold=True)
        self.echo(f"error: {code}: {error.message}", err=True)
        for key, value in error.details.items():
            if key == "tail":
                continue
            if isinstance(value, list) and value and all(isinstance(item, str) for item in value):
                self.echo(f"  {key}:", err=True)
                for item in value:
                    self.echo(f"    - {item}", err=True)
            else:
                self.echo(f"  {key}: {cell_text(value)}", err=True)
        if error.details.get("tail"):
            self.echo("  last log lines:", err=True)
            for line in str(error.details["tail"]).splitlines():
                self.echo(f"    {line}", err=True)
        if error.hint:
            self.echo(f"  hint: {error.hint}", err=True)

    # -- tables ----------------------------------------------------------------------------

    def table(self, rows: Sequence[Mapping[str, Any]], columns: Sequence[Column], *, empty: str = "nothing to show") -> None:
        if not rows:
            self.note(empty)
            return
        cells = [[cell_text(column.get(row)) for column in columns] for row in rows]
        headers = [column.header for column in columns]
        widths = [max(len(headers[i]), *(len(line[i]) for line in cells)) for i in range(len(columns))]
        widths = self._fit(widths, columns)
        gap = "  "
        self.echo(gap.join(self.style(h.ljust(w), bold=True) for h, w in zip(headers, widths)).rstrip())
        for line in cells:
            parts = []
            for i, (text, column) in enumerate(zip(line, columns)):
                text = _clip(text, widths[i])
                padded = text.ljust(widths[i]) if i < len(columns) - 1 else text
                colour = column.colour(text) if column.colour else None
                parts.append(self.style(padded, fg=colour) if colour else padded)
            self.echo(gap.join(parts).rstrip())

    def _fit(self, widths: list[int], columns: Sequence[Column]) -> list[int]:
        """On a terminal, narrow the elastic column so a row fits on one line."""
        if not self.colour and not _isatty(self.stdout):
            return widths
        total = shutil.get_terminal_size((120, 24)).columns
        used = sum(widths) + 2 * (len(widths) - 1)
        for i, column in enumerate(columns):
            if column.elastic and used > total:
                widths[i] = max(12, widths[i] - (used - total))
        return widths

    def fields(self, pairs: Iterable[tuple[str, Any]]) -> None:
        """``name  value`` lines, aligned; None values are left out."""
        shown = [(name, value) for name, value in pairs if value is not None and value != "" and value != []]
        if not shown:
            return
        width = max(len(name) for name, _ in shown)
        for name, value in shown:
            text = cell_text(value)
            if name == "status":
                text = self.style(text, fg=STATUS_COLOURS.get(text))
            self.echo(f"{self.style(name.ljust(width), bold=True)}  {text}")


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"


def _isatty(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def status_colour(text: str) -> str | None:
    return STATUS_COLOURS.get(text)


def priority_colour(text: str) -> str | None:
    return PRIORITY_COLOURS.get(text)
