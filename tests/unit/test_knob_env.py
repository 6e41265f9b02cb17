"""Each process reads its own environment variables: a hub spawned with a caller's environment
does not take the board's knobs, and the board does not take the hub's or the subscriber's.

The first test is the bug as users met it: ``taskctl`` starts a hub on demand with its own
environment (``services.hub.client.find_or_start``), and a ``TASKLOOM_*`` port meant for the board
made the hub bind the board's port. The others parse each process's real command line with every
other process's variables set to garbage: a process that read one would fail or take it.
"""

from __future__ import annotations

import os
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import click
import pytest

from services.board.cli import main as taskd_main
from services.board.settings import SERVE_KNOBS as BOARD_KNOBS
from services.board.settings import ActorParam, DatabaseUrlParam
from services.board.store import Actor
from services.hub import client as hub_client
from services.hub.cli import main as taskhub_main
from services.hub.pointer import pid_alive, read_pointer
from services.hub.settings import SERVE_KNOBS as HUB_KNOBS
from services.subscriber.settings import SUBSCRIBE_KNOBS
from shared.knobs import Knob
from taskctl import loop_cmd
from tests.support.board import RunningBoard, start_board

#: Variables several processes read with one meaning (the README's and operations' names).
SHARED_MEANING = frozenset({"TASKLOOM_DATA_DIR", "TASKLOOM_RUNTIME_DIR", "TASKLOOM_URL", "TASKLOOM_TOKEN"})


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
async def board(tmp_path: Path) -> AsyncIterator[RunningBoard]:
    running = await start_board(tmp_path / "data")
    try:
        yield running
    finally:
        await running.runner.cleanup()


async def test_an_on_demand_hub_does_not_bind_the_port_meant_for_the_board(tmp_path: Path, board: RunningBoard) -> None:
    runtime = tmp_path / "run"
    port = free_port()
    caller = {key: value for key, value in os.environ.items() if not key.startswith("TASKLOOM_")}
    # What a user who runs `taskd` from the same shell sets for the board, under every spelling
    # the board has answered to.
    caller.update(
        TASKLOOM_RUNTIME_DIR=str(runtime),
        TASKLOOM_SERVE_PORT=str(port),
        TASKLOOM_BOARD_PORT=str(port),
        TASKLOOM_NO_AUTOSTART="1",
    )
    address = await hub_client.find_or_start(board.url, board.token, runtime=runtime, environ=caller)
    try:
        assert address.port != port, "the hub took the board's port from the caller's environment"
        pointer = read_pointer(hub_client.hub_files(board.url, board.token, runtime=runtime))
        assert pointer is not None and pointer["port"] == address.port
        assert await hub_client.ping(address) is not None
        with socket.socket() as probe:  # the port is still free for the board
            probe.bind(("127.0.0.1", port))
    finally:
        await hub_client.stop_pid(address.pid)
    assert not pid_alive(address.pid)


# -- every variable a command reads, and nothing of the others ----------------------------------


def read_variables(group: click.Group, name: str) -> dict[str, str]:
    """``{variable: parameter}`` for every environment variable ``group name`` reads, the ones an
    ``auto_envvar_prefix`` derives included (click's own resolution, not the table's claim)."""
    command = group.commands[name]
    parent = click.Context(group, info_name=group.name, auto_envvar_prefix=group.context_settings.get("auto_envvar_prefix"))
    ctx = click.Context(command, info_name=name, parent=parent)
    found: dict[str, str] = {}
    for param in command.params:
        if not isinstance(param, click.Option):
            continue
        names: list[str] = []
        if param.envvar:
            names += [param.envvar] if isinstance(param.envvar, str) else list(param.envvar)
        elif param.allow_from_autoenv and ctx.auto_envvar_prefix is not None and param.name is not None:
            names.append(f"{ctx.auto_envvar_prefix}_{param.name.upper()}")
        for variable in names:
            found[variable] = param.name or ""
    return found


BOARD = (taskd_main, "serve", [])
HUB = (taskhub_main, "serve", ["--board", "http://127.0.0.1:7431"])
SUBSCRIBER = (loop_cmd.loop, "subscribe", ["--agent", "worker-1", "--on-wake", "true"])
PROCESSES = {"board": BOARD, "hub": HUB, "subscriber": SUBSCRIBER}


def parsed(process: tuple[click.Group, str, list[str]], environ: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    group, name, args = process
    for key in [key for key in os.environ if key.startswith("TASKLOOM_")]:
        monkeypatch.delenv(key)
    for key, value in environ.items():
        monkeypatch.setenv(key, value)
    command = group.commands[name]
    parent = click.Context(group, info_name=group.name, auto_envvar_prefix=group.context_settings.get("auto_envvar_prefix"))
    with command.make_context(name, list(args), parent=parent) as ctx:
        return dict(ctx.params)


@pytest.mark.parametrize(("reader", "owner"), [
    (reader, owner) for reader in PROCESSES for owner in PROCESSES if reader != owner
])
def test_no_process_reads_another_process_s_variables(reader: str, owner: str, monkeypatch: pytest.MonkeyPatch) -> None:
    theirs = set(read_variables(*PROCESSES[owner][:2])) - SHARED_MEANING
    assert theirs, f"{owner} reads no variable of its own"
    assert not theirs & set(read_variables(*PROCESSES[reader][:2])), f"{reader} and {owner} read the same variable"
    # And at run time: every one of them set to garbage changes nothing of what the reader parses.
    untouched = parsed(PROCESSES[reader], {}, monkeypatch)
    assert parsed(PROCESSES[reader], {name: "not-a-value" for name in theirs}, monkeypatch) == untouched


def test_the_hub_port_comes_from_its_own_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    variables = read_variables(taskhub_main, "serve")
    (own,) = [name for name, param in variables.items() if param == "port"]
    assert own.startswith("TASKLOOM_HUB_")
    assert parsed(HUB, {own: "7999"}, monkeypatch)["port"] == 7999
    board_port = [name for name, param in read_variables(taskd_main, "serve").items() if param == "port"]
    assert board_port and board_port[0].startswith("TASKLOOM_BOARD_")
    assert parsed(BOARD, {board_port[0]: "7998"}, monkeypatch)["port"] == 7998
    assert parsed(HUB, {board_port[0]: "7998"}, monkeypatch)["port"] == 0


def sample(knob: Knob) -> tuple[str, Any]:
    """A valid value other than the default for ``knob``: (the variable's text, what it parses to)."""
    if "/" in knob.option:
        return "1", True
    if isinstance(knob.type, click.Path):
        return "/srv/elsewhere", Path("/srv/elsewhere")
    if knob.multiple:
        return "one.example two.example", ("one.example", "two.example")
    if isinstance(knob.type, ActorParam):
        return "codex:w9", Actor("codex", "w9")
    if isinstance(knob.type, DatabaseUrlParam):
        return "postgresql://db.example:5432/board", "postgresql://db.example:5432/board"
    if isinstance(knob.type, click.IntRange):
        value = max(int(knob.type.min or 0), int(knob.default or 0)) + 3
        return str(value), value
    if isinstance(knob.type, click.FloatRange):
        number = max(float(knob.type.min or 0), float(knob.default or 0)) + 0.5
        return str(number), number
    if isinstance(knob.type, click.Choice):
        other = next(str(choice) for choice in knob.type.choices if choice != knob.default)
        return other, other
    return "elsewhere", "elsewhere"


TABLES = {"board": (BOARD, BOARD_KNOBS), "hub": (HUB, HUB_KNOBS), "subscriber": (SUBSCRIBER, SUBSCRIBE_KNOBS)}


@pytest.mark.parametrize("process", TABLES)
def test_every_variable_of_a_table_reaches_its_option(process: str, monkeypatch: pytest.MonkeyPatch) -> None:
    command, table = TABLES[process]
    for knob in table:
        if knob.env is None or knob.env == "TASKLOOM_URL":  # --board is given on this command line
            continue
        text, value = sample(knob)
        assert parsed(command, {knob.env: text}, monkeypatch)[knob.name] == value, knob.env
