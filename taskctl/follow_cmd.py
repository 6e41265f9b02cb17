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

import asyncio
import json as jsonlib
import os
import sys
from pathlib import Path
from typing import IO, Any

import click

from shared import hub_protocol as hp
from shared.paths import runtime_dir

from .command import current, global_options
from .context import TaskctlError, current_token, redact, resolve_board


def _printer(stream: IO[str]) -> Any:
    def emit(record: dict[str, Any]) -> None:
        stream.write(jsonlib.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n")
        stream.flush()

    return emit


def _run(coro: Any) -> Any:
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


@click.command("follow")
@click.option("--after", type=click.IntRange(min=0), help="Replay from this revision (the hub's ring covers the recent past).")
@click.option("--idle", type=click.FloatRange(min=0), default=hp.DEFAULT_IDLE_MS / 1000, show_default=True,
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
        raise TaskctlError("UNAUTHORIZED", "no board token", hint="set TASKLOOM_TOKEN or pass --token")
    emit = _printer(sys.stdout)

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

    raise click.exceptions.Exit(_run(stream()))


@click.command("hub")
@click.option("--stop", is_flag=True, help="Stop the hub (SIGTERM to the pid its pointer and lock both name).")
@click.option("--all", "every", is_flag=True, help="With --stop: every hub in the runtime directory, whatever its board.")
@global_options
def hub(stop: bool, every: bool) -> None:
    """Show this board's hub (pointer, pid, port, whether it answers), or stop it."""
    from services.hub import client
    from services.hub.pointer import pid_alive, read_pointer

    inv = current()
    if every:
        if not stop:
            raise click.UsageError("--all goes with --stop")
        runtime = runtime_dir(os.environ, Path.home())
        results = [_run(client.stop_hub(files)) for files in client.all_hub_files(runtime)]
        data = [{"key": r.key, "pid": r.pid, "stopped": r.stopped, "message": r.message} for r in results]
        inv.out.result(data, "\n".join(r.message for r in results) or "no hub is running")
        return
    # Never autostart a board here: stopping a hub must work with the board down.
    board = resolve_board(inv.url, inv.token, autostart=False, announce=inv.out.note)
    runtime = runtime_dir(os.environ, Path.home())
    # Every hub of this board, whatever token it holds (a rotation leaves one keyed by the old one).
    found = client.board_hub_files(runtime, board.url, board.token)
    if stop:
        if not found:
            key = client.hub_files(board.url, board.token).key if board.token else None
            inv.out.result({"key": key, "pid": None, "stopped": False, "message": "no hub is running for this board"},
                           "no hub is running for this board")
            return
        results = [_run(client.stop_hub(files)) for files in found]
        rows = [{"key": r.key, "pid": r.pid, "stopped": r.stopped, "message": r.message} for r in results]
        data = dict(rows[0])
        if len(rows) > 1:
            data.update(stopped=all(r.stopped for r in results), message="; ".join(r.message for r in results), hubs=rows)
        inv.out.result(data, data["message"])
        return
    if not board.token:
        raise TaskctlError("UNAUTHORIZED", "no board token: the hub's key needs it",
                           hint="set TASKLOOM_TOKEN or pass --token")
    files = client.hub_files(board.url, board.token)
    record = read_pointer(files)
    data: dict[str, Any] = {"key": files.key, "board": board.url, "pointer": str(files.pointer), "running": False}
    # Hubs of this board keyed by another token: left over from a rotation, deaf until they exit.
    others = [(f, r) for f in found if f.key != files.key and (r := read_pointer(f)) is not None]
    if others:
        data["stale"] = [{"key": f.key, "pid": r["pid"], "alive": pid_alive(r["pid"])} for f, r in others]
    if record is not None:
        address = client.HubAddress(port=record["port"], token=str(record.get("token", "")), pid=record["pid"], key=files.key)
        pong = _run(client.ping(address)) if record.get("protocol") == hp.HUB_PROTOCOL else None
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
