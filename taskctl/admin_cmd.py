"""``taskctl token rotate``, ``taskctl open`` and ``taskctl board status``."""

from __future__ import annotations

import html
import os
from pathlib import Path
from typing import Any

import click

from shared.paths import runtime_dir

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
    browse = not print_only and not inv.out.json
    # Before any code is minted: the page that carries it goes only into a directory of ours.
    pages = _login_page_dir() if browse else None
    link = inv.call("POST", "/login-links", {})["url"]
    opened = False
    if pages is not None:
        import webbrowser

        try:
            # Never the link itself: a browser's argv is readable by every local user (``ps``),
            # who would redeem the code first. The browser gets an owner-only page that sends it on.
            opened = webbrowser.open(_login_page(pages, link).as_uri())
        except (webbrowser.Error, OSError):
            opened = False

    def human(data: dict[str, Any]) -> None:
        if opened:
            inv.out.note(f"opened {data['url']} in your browser (the link works once, for 10 minutes)")
        else:
            inv.out.echo(data["url"])

    inv.out.result({"url": link, "opened": opened}, human)


#: The page ``taskctl open`` hands the browser, in the runtime directory: one per user, replaced
#: by each ``open`` (the code in it works once, for 10 minutes).
LOGIN_PAGE = "login.html"


def _login_page_dir() -> Path:
    """The runtime directory, created 0700 or tightened, for the login page; refused when
    another user owns it: whoever owns a directory may read a page of theirs we write into (or
    swap ours before the browser loads it), and another user may create ``/tmp/x`` before it is
    named ``TASKLOOM_RUNTIME_DIR`` (docs/security.md)."""
    from services.board.files import NotOwned, ensure_private_dir

    directory = runtime_dir(os.environ, Path.home()).expanduser().absolute()
    try:
        ensure_private_dir(directory)
    except NotOwned as exc:
        raise TaskctlError("VALIDATION_FAILED", str(exc), details={"runtime_dir": str(directory)},
                           hint="name a runtime directory of your own (TASKLOOM_RUNTIME_DIR), or pass --print") from None
    return directory


def _login_page(directory: Path, link: str) -> Path:
    """An owner-only page in ``directory`` (:func:`_login_page_dir`) that takes the browser to
    ``link`` at once; its path is no secret."""
    path = directory / LOGIN_PAGE
    quoted = html.escape(link, quote=True)
    page = (
        '<!doctype html><meta charset="utf-8"><meta name="referrer" content="no-referrer">'
        f'<meta http-equiv="refresh" content="0;url={quoted}"><title>Taskloom</title>'
        f'<p><a href="{quoted}">Open the board</a></p>\n'
    )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as file:
        os.fchmod(file.fileno(), 0o600)  # a file left by an older taskctl keeps no wider mode
        file.write(page)
    return path


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
