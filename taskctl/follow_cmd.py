"""``taskctl events follow`` and ``taskctl events hub``: the board's stream through the local hub.

``follow`` finds or starts the hub for this board and prints every record as one NDJSON line
(``open``, ``event``, ``heartbeat``, ``reset``, ``shutdown``, ``idle``, ``error``; see
docs/hub-protocol.md). It survives hub restarts on its own 1 s → 30 s ladder, resuming with the
last revision it saw, with the board token re-read before every reconnect: after a
``token rotate`` it finds or starts the hub keyed by the new token. Exit 0 after ``idle``, 1
after an ``error`` (an ``UNAUTHORIZED`` one only when the re-read token is still the refused one).

``hub`` shows the hub's pointer and whether it answers; ``hub --stop`` signals the pid that the
pointer and the owner lock both name (it never speaks the socket protocol, so it stops a hub of
any generation), for every hub of this board whatever token it holds: pointers name their board
in clear. With the board down, pass ``--url`` so resolving the board cannot start one.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

import click

from shared import hub_protocol as hp
from shared.knobs import Seconds
from shared.paths import runtime_dir

from .command import current, global_options, run_async
from .discovery import current_token, resolve_board
from .errors import TaskctlError, redact
from .events_cmd import ndjson_printer

if TYPE_CHECKING:
    from services.hub.client import StopResult


class StoppedHub(TypedDict):
    """One hub ``events hub --stop`` signalled (or found none), as its JSON record says it."""

    key: str | None
    pid: int | None
    stopped: bool
    message: str


class StoppedHubs(StoppedHub, total=False):
    """Several hubs of one board stopped: the first one's record, the overall outcome, each hub's."""

    hubs: list[StoppedHub]


def _stopped(result: StopResult) -> StoppedHub:
    return {"key": result.key, "pid": result.pid, "stopped": result.stopped, "message": result.message}


@click.command("follow")
@click.option("--after", type=click.IntRange(min=0), help="Replay from this revision (the hub's ring covers the recent past).")
@click.option("--idle", type=Seconds(min=0), default=hp.DEFAULT_IDLE_MS / 1000, show_default=True,
              help="End (exit 0) after this many seconds without an event; 0 never.")
@global_options
def follow(after: int | None, idle: float) -> None:
    """Print the board's events through the local hub as NDJSON, one record a line.

    \b
    Starts the hub when none runs. Reconnects to the hub on its own (1 s doubling to 30 s),
    resuming after the last revision printed. A `reset` record means the hub could not replay
    the gap (its ring is 4096 events): rescan board state. Exit 0 on `idle`, 1 on `error`.
    """
    from services.hub import client

    inv = current()
    board = inv.board()
    if not board.token:
        raise TaskctlError("UNAUTHORIZED", "no board token", hint="set TASKLOOM_TOKEN or pass --token-file FILE")
    emit = ndjson_printer(sys.stdout)

    def problem(text: str) -> None:
        inv.out.note(f"hub: {text}")

    async def stream() -> int:
        last: dict[str, Any] = {}
        try:
            async for record in client.follow(
                board.url, lambda: current_token(board), after=after, idle_ms=round(idle * 1000), on_problem=problem
            ):
                emit(record)
                last = record
        except client.HubError as exc:
            if last.get("type") != "error":
                # Refused before any record (a hub started with a refused token exits at once).
                emit({"type": "error", "code": exc.code, "message": redact(exc.message)})
            return 1
        return 0

    raise click.exceptions.Exit(run_async(stream()))


@click.command("hub")
@click.option("--stop", is_flag=True, help="Stop the hub (SIGTERM to the pid its pointer and lock both name).")
@click.option("--all", "every", is_flag=True, help="With --stop: every hub in the runtime directory, whatever its board.")
@global_options
def hub(stop: bool, every: bool) -> None:
    """Show this board's hub (pointer, pid, port, whether it answers), or stop it."""
    from services.hub import client
    from services.hub.pointer import read_pointer
    from services.hub.process import pid_alive

    inv = current()
    if every:
        if not stop:
            raise click.UsageError("--all goes with --stop")
        runtime = runtime_dir(os.environ, Path.home())
        results = [run_async(client.stop_hub(files)) for files in client.all_hub_files(runtime)]
        inv.out.result([_stopped(r) for r in results], "\n".join(r.message for r in results) or "no hub is running")
        return
    # Never autostart a board here: stopping a hub must work with the board down.
    board = resolve_board(inv.url, inv.token, autostart=False, announce=inv.out.note, token_path=inv.token_path)
    runtime = runtime_dir(os.environ, Path.home())
    # Every hub of this board, whatever token it holds (a rotation leaves one keyed by the old one).
    found = client.board_hub_files(runtime, board.url, board.token)
    if stop:
        if not found:
            key = client.hub_files(board.url, board.token).key if board.token else None
            none: StoppedHub = {"key": key, "pid": None, "stopped": False, "message": "no hub is running for this board"}
            inv.out.result(none, none["message"])
            return
        results = [run_async(client.stop_hub(files)) for files in found]
        rows = [_stopped(r) for r in results]
        summary: StoppedHub | StoppedHubs = rows[0]
        if len(rows) > 1:
            summary = {"key": rows[0]["key"], "pid": rows[0]["pid"], "stopped": all(r.stopped for r in results),
                       "message": "; ".join(r.message for r in results), "hubs": rows}
        inv.out.result(summary, summary["message"])
        return
    if not board.token:
        raise TaskctlError("UNAUTHORIZED", "no board token: the hub's key needs it",
                           hint="set TASKLOOM_TOKEN or pass --token-file FILE")
    files = client.hub_files(board.url, board.token)
    record = read_pointer(files)
    data: dict[str, Any] = {"key": files.key, "board": board.url, "pointer": str(files.pointer), "running": False}
    # Hubs of this board keyed by another token: left over from a rotation, deaf until they exit.
    others = [(f, r) for f in found if f.key != files.key and (r := read_pointer(f)) is not None]
    if others:
        data["stale"] = [{"key": f.key, "pid": r["pid"], "alive": pid_alive(r["pid"])} for f, r in others]
    if record is not None:
        address = client.HubAddress(port=record["port"], token=str(record.get("token", "")), pid=record["pid"], key=files.key)
        pong = run_async(client.ping(address)) if record.get("protocol") == hp.HUB_PROTOCOL else None
        data.update(
            pid=record["pid"],
            port=record["port"],
            protocol=record.get("protocol"),
            started_at=record.get("started_at"),
            log=record.get("log"),
            alive=pid_alive(record["pid"]),
            running=pong is not None,
            pong=pong,
        )

    def human(info: dict[str, Any]) -> None:
        for stale in info.get("stale", []):
            inv.out.note(f"a hub (pid {stale['pid']}) holds an older token of this board: "
                         "stop it with `taskctl events hub --stop`")
        if "pid" not in info:
            inv.out.echo(f"no hub for {info['board']} (it starts with `taskctl events follow`)")
            return
        state = "answering" if info["running"] else ("not answering" if info["alive"] else "not running (stale pointer)")
        inv.out.fields(
            [
                ("hub", f"pid {info['pid']}, 127.0.0.1:{info['port']}, protocol {info['protocol']}: {state}"),
                ("board", info["board"]),
                ("clients", (info.get("pong") or {}).get("clients")),
                ("revision", (info.get("pong") or {}).get("revision")),
                ("started", info.get("started_at")),
                ("log", info.get("log")),
            ]
        )

    inv.out.result(data, human)
