"""``taskhub``: run the hub for one board (normally started on demand by ``taskctl``).

Phases: take the owner lock → listen and reach the board → publish the pointer → serve until a
signal or the idle exit → say ``shutdown`` to every session → remove the pointer if it is still
ours → let go of the lock. The board token comes from the environment or a token file, never
from ``argv`` (``ps`` shows argv to every user).
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
from shared import knobs
from shared.paths import BOARD_POINTER, data_dir, runtime_dir

from .files import NotOwned, restrict_umask
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
from .server import Hub
from .settings import SERVE_KNOBS, HubSettings

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


async def run(settings: HubSettings, files: HubFiles, lock: OwnerLock, *, log_file: Path | None) -> None:
    hub = Hub(settings)
    await hub.start()
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
        log.info("hub_exited", pid=os.getpid())


# No auto_envvar_prefix: the variables are the table's, spelled out (services/hub/settings.py),
# so a hub spawned with a caller's environment never reads the board's.
@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """Taskloom hub: one board stream fanned out to local NDJSON clients on 127.0.0.1."""


@main.command("serve")
@knobs.options(SERVE_KNOBS)
def serve_command(
    *, board_url: str, token_file: Path | None, log_stderr: bool | None, lock_fd: int | None, **params: Any
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
    values = knobs.settings_values(HubSettings, params)
    values["reconnect_max"] = max(values["reconnect_min"], values["reconnect_max"])
    settings = HubSettings(
        board_url=board_url,
        board_token=token,
        registrations_path=files.registrations,
        protected_dirs=protected_dirs(board_url, runtime),
        **values,
    )
    log.info("hub_starting", pid=os.getpid(), board=resolved, key=files.key, protocol=hp.HUB_PROTOCOL)
    try:
        import uvloop
    except ImportError:
        asyncio.run(run(settings, files, lock, log_file=log_file))
    else:
        uvloop.run(run(settings, files, lock, log_file=log_file))


if __name__ == "__main__":
    main()
