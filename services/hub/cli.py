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
import os
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

from .client import EXIT_UNAUTHORIZED
from .descriptors import raise_open_file_limit
from .files import NotOwned, ensure_private_dir, move_atomic, open_private, restrict_umask
from .pointer import (
    HubFiles,
    OwnerLock,
    read_json,
    read_lock_pid,
    remove_pointer_if_mine,
    write_json_atomic,
)
from .process import ShutdownSignals, configure_logging, exit_forced
from .server import Hub
from .settings import SERVE_KNOBS, HubSettings

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
            move_atomic(path, files.registrations)
        except OSError:
            continue
        finally:
            other.release()
        return path
    return None


async def run(settings: HubSettings, files: HubFiles, lock: OwnerLock, *, log_file: Path | None) -> int:
    """Serve until stopped; the exit status (0, or ``EXIT_UNAUTHORIZED`` when the board refused us)."""
    hub = Hub(settings)
    await hub.start()
    pid = os.getpid()
    if hub.failure is not None:
        # Refused before anyone could find us: no pointer, so no client ever trusts this hub.
        await hub.wait_stopped()
        lock.release()
        log.info("hub_exited", pid=pid, status=EXIT_UNAUTHORIZED)
        return EXIT_UNAUTHORIZED

    def forced() -> None:
        # A second signal: no more waiting for sessions, but nobody may be sent to a dead port.
        log.warning("hub_forced_exit", pid=pid)
        exit_forced(hub.close_listener, lambda: remove_pointer_if_mine(files, pid))

    # Handlers before the pointer: a SIGTERM from whoever just read it must still remove it.
    with ShutdownSignals(stop=lambda: hub.request_stop("hub_stopping"), force=forced):
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
                "pid": pid,
                "port": hub.port,
                "token": hub.token,
                "log": str(log_file) if log_file is not None else None,
                "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(hub.started_at)),
            },
        )
        log.info("hub_pointer_written", pointer=str(files.pointer), pid=pid, port=hub.port)
        try:
            await hub.wait_stopped()
        finally:
            remove_pointer_if_mine(files, pid)
            lock.release()
    status = EXIT_UNAUTHORIZED if hub.failure is not None else 0
    log.info("hub_exited", pid=pid, status=status)
    return status


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
    configure_logging(log_stream, json=True, secret=token)
    adopted = adopt_registrations(files, resolved)
    if adopted is not None:
        log.info("registrations_adopted", source=str(adopted), path=str(files.registrations))
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
    limit = raise_open_file_limit()
    if limit is not None:
        log.info("open_file_limit", soft=limit[1], hard=limit[2], raised_from=limit[0])
    try:
        import uvloop
    except ImportError:
        status = asyncio.run(run(settings, files, lock, log_file=log_file))
    else:
        status = uvloop.run(run(settings, files, lock, log_file=log_file))
    sys.exit(status)


if __name__ == "__main__":
    main()
