"""``taskhub``: run the hub for one board (normally started on demand by ``taskctl``).

Phases: take the owner lock → listen and reach the board → publish the pointer → serve until a
signal or the idle exit → say ``shutdown`` to every session → remove the pointer if it is still
ours → let go of the lock. The board token comes from the environment or a token file, never
from ``argv`` (``ps`` shows argv to every user).

A board that answers 401 ends the hub with ``EXIT_UNAUTHORIZED`` (every session is told
``error UNAUTHORIZED`` first); refused at start, it never publishes a pointer at all. A hub that
starts under a new key takes over the detached registrations a hub of the same board left under
an older key (a rotated token), once no process holds that key's lock.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import time
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any, TextIO

import click
import structlog

from shared import hub_protocol as hp
from shared.paths import BOARD_POINTER, data_dir, runtime_dir

from .files import NotOwned, restrict_umask
from .client import EXIT_UNAUTHORIZED
from .pointer import (
    HubFiles,
    OwnerLock,
    ensure_private_dir,
    open_private,
    read_json,
    read_lock_pid,
    remove_pointer_if_mine,
    write_json_atomic,
)
from .server import Hub, HubSettings

#: The signals that stop the hub gracefully; a second one forces exit.
HANDLED_SIGNALS = (signal.SIGINT, signal.SIGTERM)
#: Where a spawning client puts the board token (SPEC §7.1: environment, never argv).
TOKEN_ENV = "TASKLOOM_TOKEN"

log = structlog.get_logger("taskhub")


def resolve_token(board_url: str, token_file: Path | None, environ: MutableMapping[str, str]) -> str:
    """The board token: ``$TASKLOOM_TOKEN`` → ``--token-file`` → the running board's pointer → the data dir.

    The variable is removed once read, so nothing this process starts inherits it.
    """
    token = environ.pop(TOKEN_ENV, None)
    if token:
        return token.strip()
    candidates: list[Path] = []
    if token_file is not None:
        candidates.append(token_file)
    board = read_json(runtime_dir(os.environ, Path.home()) / BOARD_POINTER)
    if board and isinstance(board.get("token_file"), str) and isinstance(board.get("url"), str):
        try:
            if hp.resolve_board_url(board["url"]) == hp.resolve_board_url(board_url):
                candidates.append(Path(board["token_file"]))
        except ValueError:
            pass
    candidates.append(data_dir(os.environ, Path.home(), platform=sys.platform) / "token")
    for path in candidates:
        try:
            return path.read_text(encoding="utf-8").strip()
        except OSError:
            if path is token_file:
                raise click.ClickException(f"cannot read the board token from {path}") from None
    raise click.ClickException(f"no board token: set {TOKEN_ENV} or pass --token-file")


def open_log(files: HubFiles, *, to_stderr: bool | None, stderr: TextIO) -> tuple[TextIO, Path | None]:
    """Where the log lines go, and the file the pointer names (``None``: only the hub's stderr).

    Under a supervisor stderr is the journal (systemd) or the agent's log file (launchd), which
    also catch a traceback the logger never sees, so lines go there and ``hub-<key>.log`` is not
    written: one copy, rotated by the supervisor. In a terminal they go to the file, as they do for
    a hub a client starts (its stderr *is* that file, so either way it gets one copy).
    """
    if to_stderr is None:
        to_stderr = not stderr.isatty()
    if not to_stderr:
        return os.fdopen(open_private(files.log, os.O_WRONLY | os.O_APPEND), "a", buffering=1, encoding="utf-8"), files.log
    try:
        ours, theirs = os.fstat(stderr.fileno()), os.stat(files.log)
        same = (ours.st_dev, ours.st_ino) == (theirs.st_dev, theirs.st_ino)
    except (OSError, ValueError):
        same = False
    return stderr, files.log if same else None


def protected_dirs(board_url: str, runtime: Path) -> tuple[Path, ...]:
    """Where no brief may be written: the runtime directory, this board's data directory as its
    pointer names it, and the default data directory (the board also reports its own)."""
    dirs = [runtime, data_dir(os.environ, Path.home(), platform=sys.platform)]
    board = read_json(runtime / BOARD_POINTER)
    if board and isinstance(board.get("data_dir"), str) and isinstance(board.get("url"), str):
        try:
            if hp.resolve_board_url(board["url"]) == hp.resolve_board_url(board_url):
                dirs.append(Path(board["data_dir"]))
        except ValueError:
            pass
    return tuple(dirs)


def adopt_registrations(files: HubFiles, board_url: str) -> Path | None:
    """Move the detached registrations of this board's hub under an older token to our key.

    After ``token rotate`` the hub key changes (it hides a token fingerprint), so without this
    the card briefs a user detached would silently stop refreshing. Only a file whose key's
    owner lock is free is taken (no hub of that key runs), and only when we have none yet.
    """
    if files.registrations.exists():
        return None
    for path in sorted(files.runtime.glob("hub-*.registrations.json")):
        key = path.name[len("hub-"):-len(".registrations.json")]
        record = read_json(path)
        if key == files.key or record is None or not isinstance(record.get("board"), str):
            continue
        try:
            if hp.resolve_board_url(record["board"]) != board_url:
                continue
        except ValueError:
            continue
        other = OwnerLock.try_acquire(HubFiles(files.runtime, key), role="adopter")
        if other is None:
            continue  # that hub is alive: its registrations are its own
        try:
            os.replace(path, files.registrations)
        except OSError:
            continue
        finally:
            other.release()
        return path
    return None


def configure_logging(stream: TextIO, *, secret: str) -> None:
    """structlog JSON lines; the board token is scrubbed from every line as a last line of defence."""

    def scrub(_: Any, __: str, line: str) -> str:
        return line.replace(secret, "[redacted]") if secret else line

    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(),
            scrub,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.INFO),
        logger_factory=structlog.PrintLoggerFactory(stream),
        cache_logger_on_first_use=False,
    )


async def run(settings: HubSettings, files: HubFiles, lock: OwnerLock, *, log_file: Path | None) -> int:
    """Serve until stopped; the exit status (0, or ``EXIT_UNAUTHORIZED`` when the board refused us)."""
    hub = Hub(settings)
    await hub.start()
    if hub.failure is not None:
        # Refused before anyone could find us: no pointer, so no client ever trusts this hub.
        await hub.stopped.wait()
        lock.release()
        log.info("hub_exited", pid=os.getpid(), status=EXIT_UNAUTHORIZED)
        return EXIT_UNAUTHORIZED
    # Handlers before the pointer: a SIGTERM from whoever just read it must still remove it.
    loop = asyncio.get_running_loop()
    signals_seen = 0

    def on_signal() -> None:
        nonlocal signals_seen
        signals_seen += 1
        if signals_seen > 1:
            os._exit(130)
        asyncio.ensure_future(hub.stop("hub_stopping"))

    for sig in HANDLED_SIGNALS:
        loop.add_signal_handler(sig, on_signal)
    write_json_atomic(
        files.pointer,
        {
            "version": hp.POINTER_VERSION,
            "protocol": hp.HUB_PROTOCOL,
            "key": files.key,
            # In clear beside the key, which hides the token: `events hub --stop` finds the hubs
            # of a board whatever token they hold (a rotation leaves one keyed by the old token).
            "board": hub.board_url,
            "board_id": hub.board_id,
            "pid": os.getpid(),
            "port": hub.port,
            "token": hub.token,
            "log": str(log_file) if log_file is not None else None,
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(hub.started_at)),
        },
    )
    log.info("hub_pointer_written", pointer=str(files.pointer), pid=os.getpid(), port=hub.port)

    try:
        await hub.stopped.wait()
    finally:
        remove_pointer_if_mine(files, os.getpid())
        lock.release()
    status = EXIT_UNAUTHORIZED if hub.failure is not None else 0
    log.info("hub_exited", pid=os.getpid(), status=status)
    return status


@click.group(context_settings={"auto_envvar_prefix": "TASKLOOM", "help_option_names": ["-h", "--help"]})
def main() -> None:
    """Taskloom hub: one board stream fanned out to local NDJSON clients on 127.0.0.1."""


@main.command("serve")
@click.option("--board", "board_url", required=True, envvar="TASKLOOM_URL", help="The board's URL.")
@click.option("--token-file", type=click.Path(dir_okay=False, path_type=Path),
              help=f"Read the board token here (default: ${TOKEN_ENV}, then the board's token file).")
@click.option("--port", default=0, show_default=True, type=click.IntRange(0, 65535), help="Local port; 0 picks one.")
@click.option("--idle-exit", default=hp.IDLE_EXIT, show_default=True, type=click.FloatRange(min=0),
              envvar="TASKLOOM_HUB_IDLE_EXIT", help="Exit after this many seconds without clients; 0 never.")
@click.option("--hello-timeout", default=hp.HELLO_TIMEOUT, type=click.FloatRange(min=0.01), hidden=True,
              envvar="TASKLOOM_HUB_HELLO_TIMEOUT")
@click.option("--heartbeat", default=hp.HEARTBEAT_INTERVAL, type=click.FloatRange(min=0.01), hidden=True,
              envvar="TASKLOOM_HUB_HEARTBEAT")
@click.option("--reconnect-min", default=hp.RECONNECT_MIN, type=click.FloatRange(min=0.01), hidden=True,
              envvar="TASKLOOM_HUB_RECONNECT_MIN")
@click.option("--reconnect-max", default=hp.RECONNECT_MAX, type=click.FloatRange(min=0.01), hidden=True,
              envvar="TASKLOOM_HUB_RECONNECT_MAX")
@click.option("--ring-size", default=hp.RING_SIZE, type=click.IntRange(min=1), hidden=True,
              envvar="TASKLOOM_HUB_RING_SIZE")
@click.option("--refresh-debounce", default=hp.REFRESH_DEBOUNCE, type=click.FloatRange(min=0), hidden=True,
              envvar="TASKLOOM_HUB_REFRESH_DEBOUNCE")
@click.option("--refresh-max-wait", default=hp.REFRESH_MAX_WAIT, type=click.FloatRange(min=0), hidden=True,
              envvar="TASKLOOM_HUB_REFRESH_MAX_WAIT")
@click.option("--refresh-floor", default=hp.REFRESH_FLOOR, type=click.FloatRange(min=0), hidden=True,
              envvar="TASKLOOM_HUB_REFRESH_FLOOR")
@click.option("--log-stderr/--no-log-stderr", default=None,
              help="Log JSON lines to stderr (a supervisor's journal) instead of hub-<key>.log "
                   "[default: stderr when it is not a terminal].")
@click.option("--lock-fd", type=int, hidden=True, help="The owner lock, locked and passed down by the starter.")
def serve_command(
    board_url: str,
    token_file: Path | None,
    port: int,
    idle_exit: float,
    hello_timeout: float,
    heartbeat: float,
    reconnect_min: float,
    reconnect_max: float,
    ring_size: int,
    refresh_debounce: float,
    refresh_max_wait: float,
    refresh_floor: float,
    log_stderr: bool | None,
    lock_fd: int | None,
) -> None:
    """Serve until SIGINT/SIGTERM or the idle exit (for supervisors: pass --idle-exit 0)."""
    try:
        resolved = hp.resolve_board_url(board_url)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--board") from None
    restrict_umask()
    token = resolve_token(board_url, token_file, os.environ)
    runtime = runtime_dir(os.environ, Path.home())
    try:
        ensure_private_dir(runtime)
    except NotOwned as exc:
        raise click.ClickException(str(exc)) from None
    files = HubFiles(runtime, hp.hub_key(resolved, token))
    if lock_fd is not None:
        lock = OwnerLock.inherit(files, lock_fd)
    else:
        acquired = OwnerLock.try_acquire(files, role="hub")
        if acquired is None:
            raise click.ClickException(f"another hub (pid {read_lock_pid(files)}) holds {files.lock}")
        lock = acquired
    log_stream, log_file = open_log(files, to_stderr=log_stderr, stderr=sys.stderr)
    configure_logging(log_stream, secret=token)
    adopted = adopt_registrations(files, resolved)
    if adopted is not None:
        log.info("registrations_adopted", source=str(adopted), path=str(files.registrations))
    settings = HubSettings(
        board_url=board_url,
        board_token=token,
        port=port,
        idle_exit=idle_exit,
        hello_timeout=hello_timeout,
        heartbeat_interval=heartbeat,
        reconnect_min=reconnect_min,
        reconnect_max=max(reconnect_min, reconnect_max),
        ring_size=ring_size,
        refresh_debounce=refresh_debounce,
        refresh_max_wait=refresh_max_wait,
        refresh_floor=refresh_floor,
        registrations_path=files.registrations,
        protected_dirs=protected_dirs(board_url, runtime),
    )
    log.info("hub_starting", pid=os.getpid(), board=resolved, key=files.key, protocol=hp.HUB_PROTOCOL)
    try:
        import uvloop
    except ImportError:
        status = asyncio.run(run(settings, files, lock, log_file=log_file))
    else:
        status = uvloop.run(run(settings, files, lock, log_file=log_file))
    sys.exit(status)


if __name__ == "__main__":
    main()
