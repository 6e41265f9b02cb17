"""``taskctl loop``: wake an agent supervisor when board work becomes actionable (SPEC §9, §13).

``subscribe`` follows the local hub (never the board's HTTP API), classifies each event and runs
``--on-wake CMD`` as a coalesced continue turn; it never writes board state. ``status`` reads the
state file it publishes. ``install``/``uninstall`` write or remove the systemd user units or
launchd agents that run the board, the subscriber and (optionally) the hub.

Exit codes: ``subscribe`` 0 after SIGTERM/SIGINT, 1 when it cannot start (no token, another
subscriber on the same state directory); ``status`` 0 running, 3 not running; 2 usage.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import AsyncGenerator, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

import click

from services.subscriber import settings as subscriber_settings
from shared import hub_protocol as hp
from shared import knobs
from shared.paths import BOARD_PORT

from .command import command, current, run_async
from .discovery import current_token, default_data_dir, normalise_url
from .errors import TaskctlError

if TYPE_CHECKING:
    from services.hub.client import CursorBoard

#: Where the loop's files live unless ``--state-dir`` says otherwise: ``<data_dir>/loop``.
STATE_DIR_ENV = subscriber_settings.STATE_DIR_ENV
#: Held for the subscriber's whole life: one subscriber per state directory.
SUBSCRIBE_LOCK = "subscribe.lock"
#: ``loop status`` exit code when nothing runs (LSB ``status`` uses 3 for "not running" too).
EXIT_NOT_RUNNING = 3
DEFAULT_PORT = BOARD_PORT
#: Service units are read by the user's supervisor; they name paths and commands, never a secret.
UNIT_FILE_MODE = 0o644


def default_state_dir() -> Path:
    if os.environ.get(STATE_DIR_ENV):
        return Path(os.environ[STATE_DIR_ENV])
    return default_data_dir() / "loop"


def _state_dir(value: Path | None) -> Path:
    return (value if value is not None else default_state_dir()).expanduser().absolute()


@click.group("loop")
def loop() -> None:
    """Wake an agent supervisor when work is actionable (subscribe, status, install)."""


# -- subscribe -----------------------------------------------------------------------------------

STATE_DIR_OPTION = knobs.click_option(subscriber_settings.STATE_DIR)


@command(loop, "subscribe")
@knobs.options(subscriber_settings.SUBSCRIBE_KNOBS)
def subscribe(
    *,
    agents: tuple[str, ...],
    director: str | None,
    on_wake: str,
    wake_on_timeout: tuple[str, ...],
    state_dir: Path | None,
    start_hub: bool,
    verbose: bool,
    **params: Any,
) -> None:
    """Follow the board through the local hub and run CMD when work becomes actionable.

    \b
    Wakes on new, moved, reopened, delivered and resumed tasks, reports, relations, dispatch
    field updates, questions and human comments, and on the board's card_unblocked and
    claim_stale conditions (status_timeout only for --wake-on-timeout statuses); never on this
    loop's own agents' writes (except a release back to todo or a question), heartbeats or board
    housekeeping. Wakes are coalesced
    (300 ms debounce, 2 s at most, one turn a minute). A turn needs a live resident pool
    (<state-dir>/sessions.state.json) and the continue lock (<state-dir>/continue.lock).
    Publishes <state-dir>/subscribe.state.json; stops cleanly on SIGTERM/SIGINT (exit 0).
    """
    import structlog

    from services.hub.client import CursorBoard
    from services.subscriber import state as st
    from services.subscriber.classify import LoopIdentity
    from services.subscriber.process import configure_logging
    from services.subscriber.runner import RESET_WAKE, Subscriber
    from services.subscriber.turns import TurnRunner

    if director is not None and director in agents:
        raise click.BadParameter("the director must not also be one of this loop's --agent ids",
                                 param_hint="--director")
    try:
        timing = subscriber_settings.Timing(**knobs.settings_values(subscriber_settings.Timing, params))
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    inv = current()
    board = inv.board()
    if not board.token:
        raise TaskctlError("UNAUTHORIZED", "no board token: the hub needs it to reach the board",
                           hint="set TASKLOOM_TOKEN, pass --token-file FILE, or start the board once so its token file exists")
    directory = _state_dir(state_dir)
    inherited_umask = _private_state_dir(directory)
    held = _hold_subscribe_lock(directory)
    try:
        # Before the state file is read: a value in it that cannot be used is said in the log.
        configure_logging(sys.stderr, level=logging.DEBUG if verbose else logging.INFO)
        path = st.state_path(directory)
        previous, unreadable = st.load_state(path)
        after = _resume_revision(previous, board.url)
        replay = _pending_wakes(previous, board.url)
        if unreadable is not None:
            # A previous run was here, and where it stopped cannot be known: starting live from
            # the head would skip whatever it had not dealt with, so the first turn is a rescan.
            structlog.get_logger("taskloom.subscriber").warning(
                "state_file_unreadable", path=str(path), reason=unreadable,
                hint="starting live from the board's head with one rescan turn (reset); the file is replaced")
            replay = (RESET_WAKE, *replay)
        #: The board the saved cursor counts in: named in the first follow, kept current from the hub.
        history = CursorBoard(board_id=st.saved_board_id(previous, board.url))
        publisher = st.Publisher(
            path,
            {"board": board.url, "agents": list(agents), "director": director, "state_dir": str(directory)},
            flush_interval=timing.state_flush,
        )
        who = LoopIdentity(agents=frozenset(agents), director=director, wake_on_timeout=frozenset(wake_on_timeout))

        async def main() -> int:
            subscriber = Subscriber(
                hub_stream(board.url, lambda: current_token(board), start_hub=start_hub, history=history),
                who,
                TurnRunner(on_wake, directory, umask=inherited_umask),
                publisher,
                timing=timing,
                after=after,
                replay=replay,
                cursor_board=lambda: history.board_id,
            )
            return await subscriber.run_until_signalled()

        code = run_async(main())
    finally:
        os.close(held)
    raise click.exceptions.Exit(code)


def _private_state_dir(directory: Path) -> int:
    """Owner-only from here on, the state directory ours and 0700; returns the umask we started
    with, which the ``--on-wake`` command gets back (its files are the supervisor's business)."""
    from services.subscriber import files

    inherited = files.restrict_umask()
    try:
        files.ensure_private_dir(directory)
    except files.NotOwned as exc:
        raise TaskctlError("VALIDATION_FAILED", str(exc), details={"state_dir": str(directory)}) from None
    return inherited


def _hold_subscribe_lock(directory: Path) -> int:
    """An flock on ``<state_dir>/subscribe.lock`` for the process's life: two subscribers on one
    state directory would wake the same supervisor twice."""
    from services.subscriber import state as st
    from services.subscriber.process import lock_file

    fd = lock_file(directory / SUBSCRIBE_LOCK)
    if fd is None:
        record = st.read_state(st.state_path(directory)) or {}
        raise TaskctlError(
            "SUBSCRIBER_RUNNING",
            f"another subscriber already runs on {directory}",
            details={"pid": record.get("pid"), "state_dir": str(directory)},
            hint="stop it first, or give this one its own --state-dir",
        )
    return fd


def _resume_revision(previous: dict[str, Any] | None, board_url: str) -> int | None:
    """Resume after the revision a previous run reached on the same board (None: live from the head),
    or below a wake it still had waiting (``resume_after``), so that wake is not lost."""
    if not previous or previous.get("board") != board_url:
        return None
    for field in ("resume_after", "revision"):
        revision = previous.get(field)
        if isinstance(revision, int) and not isinstance(revision, bool) and revision >= 0:
            return revision
    return None


#: The most wake names taken from a previous run's state file (the event and signal names are
#: a few dozen; more is a file someone else wrote).
MOST_REPLAYED_WAKES = 64


def _pending_wakes(previous: dict[str, Any] | None, board_url: str) -> tuple[str, ...]:
    """The wakes a previous run on the same board had waiting, or in a turn, when it stopped."""
    if not previous or previous.get("board") != board_url or not isinstance(previous.get("pending_wakes"), list):
        return ()
    names = [name for name in previous["pending_wakes"] if isinstance(name, str) and 0 < len(name) <= 64]
    return tuple(dict.fromkeys(names))[:MOST_REPLAYED_WAKES]


def hub_stream(
    board_url: str, board_token: str | Callable[[], str | None], *, start_hub: bool = True, history: CursorBoard | None = None
) -> Callable[[int | None], AsyncGenerator[dict[str, Any], None]]:
    """One hub connection per call: find (or start) the hub, ``follow`` after a revision, yield records.

    ``idle_ms=0``: the subscriber follows for ever and watches for silence itself. The
    reconnect ladder is the subscriber's, not the hub client's. ``board_token`` may be a
    callable, read on every call: after a ``token rotate`` the next connection goes to the hub
    keyed by the new token (the old one says ``error UNAUTHORIZED`` once its board refuses it).
    ``history`` (a ``CursorBoard``): the board the cursor comes from, named on every resume; the
    caller passes its own to seed it from a saved cursor and to save what it learns.
    """
    from services.hub import client

    read_token = board_token if callable(board_token) else (lambda: board_token)
    #: The board the subscriber's cursor comes from, named on resume (a restore starts a new history).
    cursor_board = history if history is not None else client.CursorBoard()

    async def find_running(board_token: str) -> Any:
        from services.hub.pointer import read_pointer

        files = client.hub_files(board_url, board_token)
        record = read_pointer(files)
        if record is not None and record.get("protocol") == hp.HUB_PROTOCOL:
            address = client.HubAddress(port=record["port"], token=str(record.get("token", "")),
                                        pid=record["pid"], key=files.key)
            if await client.ping(address) is not None:
                return address
        raise client.HubUnavailable(f"no hub answers for this board yet (pointer {files.pointer})")

    async def open_stream(after: int | None) -> AsyncGenerator[dict[str, Any], None]:
        board_token = read_token()
        if not board_token:
            raise client.HubError(hp.UNAUTHORIZED, "no board token (the token file is gone?)")
        address = await (client.find_or_start(board_url, board_token) if start_hub else find_running(board_token))
        session = await client.HubSession.connect(address)
        cursor_board.opened(session)
        try:
            await session.send(cursor_board.follow(after=after, idle_ms=0))
            while (record := await session.receive()) is not None:
                cursor_board.saw(record)
                yield record
        finally:
            session.close()

    return open_stream


# -- status --------------------------------------------------------------------------------------


@command(loop, "status")
@STATE_DIR_OPTION
def status(state_dir: Path | None) -> None:
    """Print the subscriber's state (starting, streaming, reconnecting, unauthorized) or `not running`.

    \b
    Exit 0 while it runs, 3 when it does not (no state file, a clean stop, or a dead pid).
    `unauthorized`: the board refused the token (rotated?); the subscriber re-reads it on every
    reconnect and is back to `streaming` once the token it finds works.
    """
    from services.subscriber import state as st

    inv = current()
    directory = _state_dir(state_dir)
    report = st.status(directory)
    data = {**report.as_dict(), "state_dir": str(directory)}
    if report.running:
        # Read now, not as last published: the pool file is the supervisor's and changes on its own.
        from services.subscriber.turns import waiting_for

        data["waiting_for"] = waiting_for(directory)

    def human(info: dict[str, Any]) -> None:
        record = info.get("record") or {}
        if not info["running"]:
            inv.out.echo(st.NOT_RUNNING)
            if record:
                inv.out.note(f"last state {record.get('state')!s} (pid {record.get('pid')}) at {record.get('updated_at')}")
            return
        turns = record.get("turns") or {}
        last = record.get("last_turn") or {}
        inv.out.echo(f"{info['state']} (pid {record.get('pid')})")
        if info["state"] == st.UNAUTHORIZED:
            inv.out.note("the board refused the token: after `taskctl token rotate`, put the new token in the "
                         "--token-file if the subscriber was given one (it is read again on every reconnect); a "
                         "TASKLOOM_TOKEN needs a restart with the new value (the board's own token file is re-read "
                         "on its own)")
        inv.out.fields(
            [
                ("board", record.get("board")),
                ("agents", ", ".join(record.get("agents") or [])),
                ("director", record.get("director")),
                ("revision", record.get("revision")),
                ("last wake", record.get("last_wake_at")),
                ("last turn", f"{last.get('outcome')}: {last.get('reason')}" if last else None),
                ("waiting for", _waiting_text(info.get("waiting_for"))),
                ("turns", f"ran {turns.get('ran', 0)}, refused {turns.get('refused', 0)}, skipped {turns.get('skipped', 0)}"),
                ("problem", record.get("last_problem") if info["state"] in (st.RECONNECTING, st.UNAUTHORIZED) else None),
                ("updated", record.get("updated_at")),
                ("state dir", info["state_dir"]),
            ]
        )

    inv.out.result(data, human)
    if not report.running:
        raise click.exceptions.Exit(EXIT_NOT_RUNNING)


def _waiting_text(waiting: Any) -> str | None:
    """The pool file turns wait for, and why (missing, empty, dead pids…), when there is none."""
    if not isinstance(waiting, dict) or not waiting.get("file"):
        return None
    return f"{waiting['file']} (no live resident pool: {waiting.get('reason', '?')}; turns are skipped until it lists one)"


# -- install / uninstall -------------------------------------------------------------------------


def _default_supervisor() -> str:
    return "launchd" if sys.platform == "darwin" else "systemd"


SUPERVISOR_OPTION = click.option(
    "--supervisor", type=click.Choice(["systemd", "launchd"]), default=_default_supervisor, show_default="by platform",
    help="systemd user units, or launchd agents.",
)
DIR_OPTION = click.option(
    "--dir", "target", type=click.Path(file_okay=False, path_type=Path),
    help="Write the units here instead of ~/.config/systemd/user or ~/Library/LaunchAgents.",
)


def _next_steps(supervisor: str, target: Path, names: list[str], *, install: bool) -> list[str]:
    if supervisor == "systemd":
        units = " ".join(names)
        if install:
            return ["systemctl --user daemon-reload", f"systemctl --user enable --now {units}"]
        return [f"systemctl --user stop {units}", "systemctl --user daemon-reload"]
    labels = [name.removesuffix(".plist") for name in names]
    if install:
        return [f"launchctl bootstrap gui/$(id -u) {target / name}" for name in names]
    return [f"launchctl bootout gui/$(id -u)/{label}" for label in labels]


@command(loop, "install")
@SUPERVISOR_OPTION
@click.option("--agent", "agents", multiple=True, required=True, callback=subscriber_settings.check_agents, metavar="NAME",
              help="The subscriber's agent id (repeat, or a comma list).")
@click.option("--director", callback=subscriber_settings.check_director, metavar="NAME", help="The decision lane's actor id.")
@click.option("--on-wake", "on_wake", required=True, callback=subscriber_settings.check_on_wake, metavar="CMD",
              help="The subscriber's continue-turn command.")
@click.option("--wake-on-timeout", "wake_on_timeout", multiple=True, callback=subscriber_settings.check_timeout_statuses,
              metavar="STATUS", help="Passed to the subscriber: also wake when a card times out in STATUS (repeatable).")
@STATE_DIR_OPTION
@click.option("--port", type=click.IntRange(1, 65535), default=DEFAULT_PORT, show_default=True,
              help="The board's port on 127.0.0.1.")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path),
              help="The board's data directory (default: TASKLOOM_DATA_DIR, else the platform's).")
@click.option("--with-hub", is_flag=True, help="Also run the hub as a unit; the subscriber then never starts one.")
@DIR_OPTION
@click.option("--dry-run", is_flag=True, help="Print the rendered units; write nothing.")
def install(
    supervisor: str,
    agents: tuple[str, ...],
    director: str | None,
    on_wake: str,
    wake_on_timeout: tuple[str, ...],
    state_dir: Path | None,
    port: int,
    data_dir: Path | None,
    with_hub: bool,
    target: Path | None,
    dry_run: bool,
) -> None:
    """Render the board and subscriber units (and the hub's) with this machine's paths and write them.

    \b
    Prints what it wrote and the commands that start them; it does not start anything itself.
    """
    from services.subscriber import units
    from shared.paths import runtime_dir

    inv = current()
    if director is not None and director in agents:
        raise click.BadParameter("the director must not also be one of the --agent ids", param_hint="--director")
    board_url = normalise_url(inv.url) if inv.url else f"http://127.0.0.1:{port}"
    data = (data_dir if data_dir is not None else default_data_dir()).expanduser().absolute()
    try:
        found = units.find_executables()
        values = units.UnitValues(
            taskd=found["taskd"],
            taskhub=found["taskhub"],
            taskctl=found["taskctl"],
            port=port,
            board_url=board_url,
            data_dir=str(data),
            runtime_dir=str(runtime_dir(os.environ, Path.home()).expanduser().absolute()),
            state_dir=str(_state_dir(state_dir)),
            log_dir=str(units.default_log_dir(supervisor, data)),
            agents=agents,
            on_wake=on_wake,
            director=director,
            wake_on_timeout=wake_on_timeout,
            path=os.environ.get("PATH") or os.defpath,
            supervised_hub=with_hub,
        )
        rendered = units.render(supervisor, values, hub=with_hub)
        directory = (target if target is not None else units.unit_dir(supervisor)).expanduser().absolute()
    except units.UnitError as exc:
        raise TaskctlError("INSTALL_FAILED", str(exc)) from None

    results = []
    for unit in rendered:
        path = directory / unit.name
        try:
            current_text = path.read_text(encoding="utf-8")
        except OSError:
            current_text = None
        action = "unchanged" if current_text == unit.text else ("updated" if current_text is not None else "created")
        results.append({"role": unit.role, "name": unit.name, "path": str(path), "action": action, "text": unit.text})
    if not dry_run:
        directory.mkdir(parents=True, exist_ok=True)
        # Owner-only, as the services keep them (docs/security.md).
        Path(values.state_dir).mkdir(parents=True, exist_ok=True, mode=0o700)
        if supervisor == "launchd":
            Path(values.log_dir).mkdir(parents=True, exist_ok=True, mode=0o700)  # launchd does not create it
        for result, unit in zip(results, rendered):
            if result["action"] != "unchanged":
                _write_atomic(Path(result["path"]), unit.text)
    steps = _next_steps(supervisor, directory, [unit.name for unit in rendered], install=True)
    payload = {"supervisor": supervisor, "dir": str(directory), "dry_run": dry_run, "units": results, "next": steps}

    def human(info: dict[str, Any]) -> None:
        for result in info["units"]:
            if info["dry_run"]:
                inv.out.echo(f"# {result['path']} (would be {result['action']})")
                inv.out.echo(result["text"].rstrip("\n"))
                inv.out.echo()
            else:
                inv.out.echo(f"{result['action']} {result['path']}")
        inv.out.echo("then run:" if not info["dry_run"] else "after installing, run:")
        for step in info["next"]:
            inv.out.echo(f"  {step}")

    inv.out.result(payload, human)


class RemovedUnit(TypedDict):
    """One unit ``loop uninstall`` found: its file name and every path of it (the file, its enable link)."""

    name: str
    paths: list[str]


@command(loop, "uninstall")
@SUPERVISOR_OPTION
@DIR_OPTION
@click.option("--dry-run", is_flag=True, help="Say what would be removed; remove nothing.")
def uninstall(supervisor: str, target: Path | None, dry_run: bool) -> None:
    """Remove the units `loop install` wrote (board, subscriber, hub) and say how to stop them."""
    from services.subscriber import units

    inv = current()
    directory = (target if target is not None else units.unit_dir(supervisor)).expanduser().absolute()
    removed: list[RemovedUnit] = []
    for name in units.UNIT_FILES[supervisor].values():
        path = directory / name
        links = [directory / "default.target.wants" / name] if supervisor == "systemd" else []
        present = [p for p in (path, *links) if p.is_symlink() or p.exists()]
        if not present:
            continue
        if not dry_run:
            for found in present:
                found.unlink()
        removed.append({"name": name, "paths": [str(p) for p in present]})
    steps = _next_steps(supervisor, directory, [item["name"] for item in removed], install=False) if removed else []
    payload = {"supervisor": supervisor, "dir": str(directory), "dry_run": dry_run, "removed": removed, "next": steps}

    def human(info: dict[str, Any]) -> None:
        if not info["removed"]:
            inv.out.echo(f"no Taskloom units in {info['dir']}")
            return
        verb = "would remove" if info["dry_run"] else "removed"
        for item in info["removed"]:
            for path in item["paths"]:
                inv.out.echo(f"{verb} {path}")
        inv.out.echo("to stop what still runs:")
        for step in info["next"]:
            inv.out.echo(f"  {step}")

    inv.out.result(payload, human)


def _write_atomic(path: Path, text: str) -> None:
    """A unit file, world-readable as supervisors expect (it holds paths, never the token)."""
    from services.subscriber.files import write_atomic

    write_atomic(path, text.encode("utf-8"), mode=UNIT_FILE_MODE)
