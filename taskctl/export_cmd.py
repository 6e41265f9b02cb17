"""``taskctl export``: card briefs as markdown files (SPEC §8); the group and its commands.

``export md`` asks the board to render every card (``POST /api/v1/export``) and writes each to
``<DIR>/<IDENTIFIER>.md`` atomically, leaving files that are already up to date alone;
``--check`` writes nothing and exits 3 when a file is missing or differs (``export_md.py``).

``export watch`` keeps named briefs fresh (SPEC §7.4): through the hub by default (a
registration; ``--detach`` leaves it to the hub and exits; ``export_watch.py``), or
``--standalone`` on the board's own stream, in this process, with no hub
(``export_standalone.py``). Both print NDJSON records, one a line.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from shared.knobs import Seconds

from .command import REF, command, current, drop_none, run_async
from .errors import TaskctlError
from .export_md import DEFAULT_OUT, EXIT_DIFFERENCES, PAGE_LIMIT, export_cards
from .export_standalone import cadence_from_env, standalone_watch
from .export_watch import (
    hub_call,
    ndjson_printer,
    print_registered,
    raise_refusal,
    status_or_stop,
    watch_foreground,
    watch_message,
)
from .http import paginate


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


@command(export, "watch")
@click.argument("refs", nargs=-1, type=REF)
@click.option("--out", "out_file", metavar="FILE", help="Keep one card's brief in FILE.")
@click.option("--dir", "out_dir", metavar="DIR", help="Keep each card's brief in DIR/.taskloom/<IDENTIFIER>/card.md.")
@click.option("--cards-json", metavar="FILE", help='A JSON list of {"ref": …, "out": …} (- for stdin).')
@click.option("--ttl", type=Seconds(min=0, unit="minutes"), metavar="MIN",
              help="End after this many minutes (default 120; 0 = until every card is done or canceled).")
@click.option("--detach", is_flag=True, help="Register with the hub, print the registration id, exit.")
@click.option("--standalone", is_flag=True, help="Follow the board's stream directly, in this process, without the hub.")
@click.option("--after", type=click.IntRange(min=0), help="With --standalone: resume the stream after this revision.")
@click.option("--status", is_flag=True, help="List the hub's registrations.")
@click.option("--stop", "stop_id", metavar="ID", help="End the registration ID.")
def watch(
    refs: tuple[str, ...],
    out_file: str | None,
    out_dir: str | None,
    cards_json: str | None,
    ttl: float | None,
    detach: bool,
    standalone: bool,
    after: int | None,
    status: bool,
    stop_id: str | None,
) -> None:
    """Keep card briefs fresh on disk while the cards change.

    \b
    Through the local hub by default (started when none runs): the first briefs are written
    before the command says `registered`, then each change to a card re-renders its brief
    (atomically: a reader sees the old file or the new one). A card that reaches done or
    canceled is written once more and dropped.

    \b
    Foreground: prints NDJSON records (registered, refresh, heartbeat, done, ttl, shutdown,
    error); exit 0 on done, ttl or shutdown, 1 on error. The registration ends with this process.
    --detach: the hub keeps the briefs (across hub restarts) until the cards are done or the
    TTL passes; prints the registration id and exits 0.
    --standalone: no hub; exit 0 on done/ttl/shutdown/eof, 1 on a stream error, whose record
    names the revision to resume from with --after.

    \b
    --status lists the hub's registrations; --stop ID ends one.
    """
    inv = current()
    if status or stop_id:
        if refs or out_file or out_dir or cards_json or detach or standalone or after is not None or (status and stop_id):
            raise click.UsageError("--status and --stop ID take no other option")
        status_or_stop(inv, stop_id)
        return
    if after is not None and not standalone:
        raise click.UsageError("--after goes with --standalone (the hub keeps its own cursor)")
    if detach and standalone:
        raise click.UsageError("--detach leaves the briefs to the hub; --standalone runs without one")
    message = watch_message(refs, out_file, out_dir, cards_json, ttl, detach)
    board = inv.board()
    if standalone:
        code = standalone_watch(inv.http(), board, message, after=after, emit=ndjson_printer(), cadence=cadence_from_env())
        raise click.exceptions.Exit(code)
    if not board.token:
        raise TaskctlError("UNAUTHORIZED", "no board token: the hub needs it", hint="set TASKLOOM_TOKEN or pass --token-file FILE")
    from services.hub import client

    if detach:
        answer = hub_call(lambda: client.request_once(board.url, board.token or "", message))
        raise_refusal(answer)
        print_registered(inv, answer)
        return
    raise click.exceptions.Exit(run_async(watch_foreground(inv, board, message)))
