"""``taskctl token rotate``, ``taskctl open`` and ``taskctl board status``."""

from __future__ import annotations

import os
from typing import Any

import click

from .command import command, current, global_options
from .errors import TaskctlError


@click.group()
def token() -> None:
    """The board token (never printed; it lives in the board's token file)."""


@command(token, "rotate")
def rotate() -> None:
    """Replace the board token; the new one is written to the token file, never printed.

    Browser sessions and anything holding the old token (TASKLOOM_TOKEN, a running hub) stop
    working: re-read the file, and stop the hub with `taskctl events hub --stop`.
    """
    inv = current()
    result = inv.call("POST", "/token/rotate", {})

    def human(r: dict[str, Any]) -> None:
        inv.out.echo(f"rotated the board token; the new one is in {r['token_file']}")
        if os.environ.get("TASKLOOM_TOKEN") and not inv.token:
            inv.out.note("TASKLOOM_TOKEN still holds the old token: update or unset it")

    inv.out.result(result, human)


@click.command("open")
@click.option("--print", "print_only", is_flag=True, help="Print the login link instead of opening a browser.")
@global_options
def open_board(print_only: bool) -> None:
    """Open the board in a browser with a one-time login link (printed when no browser)."""
    inv = current()
    link = inv.call("POST", "/login-links", {})["url"]
    opened = False
    if not print_only and not inv.out.json:
        import webbrowser

        try:
            opened = webbrowser.open(link)
        except webbrowser.Error:
            opened = False

    def human(data: dict[str, Any]) -> None:
        if opened:
            inv.out.note(f"opened {data['url']} in your browser (the link works once, for 10 minutes)")
        else:
            inv.out.echo(data["url"])

    inv.out.result({"url": link, "opened": opened}, human)


@click.group()
def board() -> None:
    """The board this taskctl talks to."""


@command(board, "status")
def status() -> None:
    """Where the board runs: url, board id, revision, pid, data directory.

    A diagnostic: it never starts a board (every other command would).
    """
    inv = current()
    found = inv.board(autostart=False)
    try:
        remote = inv.call("GET", "/board/status")
    except TaskctlError as error:
        if error.code != "NOT_FOUND":
            raise
        remote = inv.call("GET", "/meta")  # an older board without the status route
    data = {
        "url": found.url,
        "found_by": found.source,
        "board_id": remote.get("board_id"),
        "revision": remote.get("revision"),
        "version": remote.get("version"),
        "pid": remote.get("pid", found.pid),
        "data_dir": remote.get("data_dir", found.data_dir),
        "token_file": remote.get("token_file") or (str(found.token_file) if found.token_file else None),
        "uptime_seconds": remote.get("uptime_seconds"),
        # The activity log: how much is kept, and below which revision readers must reload.
        "durability": remote.get("durability"),
        "log_rows": remote.get("log_rows"),
        "log_bytes": remote.get("log_bytes"),
        "floor": remote.get("floor"),
        "oldest_revision": remote.get("oldest_revision"),
        "event_retention_days": remote.get("event_retention_days"),
    }
    inv.out.result(data, lambda d: inv.out.fields(list(d.items())))
