"""Each process's table of knobs is the one truth: its command line, its settings defaults and the
lists in ``docs/operations.md`` agree with it, and no two processes share a variable.

The docs are parsed, not copied: a knob the code has and the doc lacks, a documented knob that no
longer exists, or a variable or default that differs each fail with the row to write.
(``test_docs_claims.py`` keeps checking the prose claims — intervals, the hub's knob paragraph in
``docs/hub-protocol.md``; this file owns the tables.)
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import click
import pytest

from services.board.cli import main as taskd_main
from services.board.settings import SERVE_KNOBS as BOARD_KNOBS
from services.board.settings import BoardSettings
from services.hub import server
from services.hub.cli import main as taskhub_main
from services.hub.settings import CADENCE_KNOBS, HubSettings
from services.hub.settings import SERVE_KNOBS as HUB_KNOBS
from services.subscriber import runner
from services.subscriber.settings import SUBSCRIBE_KNOBS, Timing
from shared import knobs, limits
from shared.knobs import SHARED_ENV, Knob
from taskctl import export_standalone, loop_cmd
from taskctl.command import global_params
from taskctl.main import cli as taskctl_main

from .sourcescan import ROOT, parse, python_files

OPERATIONS = ROOT / "docs" / "operations.md"

#: process → (the command users run, its table, the prefix of its own variables)
PROCESSES: dict[str, tuple[click.Command, tuple[Knob, ...], str]] = {
    "taskd serve": (taskd_main.commands["serve"], BOARD_KNOBS, "TASKLOOM_BOARD_"),
    "taskhub serve": (taskhub_main.commands["serve"], HUB_KNOBS, "TASKLOOM_HUB_"),
    "taskctl loop subscribe": (loop_cmd.loop.commands["subscribe"], SUBSCRIBE_KNOBS, "TASKLOOM_LOOP_"),
}


#: The least each command line needs (its required options).
REQUIRED_ARGS = {
    "taskd serve": (),
    "taskhub serve": ("--board", "http://127.0.0.1:7431"),
    "taskctl loop subscribe": ("--agent", "w1", "--on-wake", "true"),
}


def documented(process: str) -> dict[str, tuple[str, str | None, str, bool, str]]:
    """The doc's rows for ``process``: ``{first flag: (flags, variable, default, hidden, text)}``."""
    doc = OPERATIONS.read_text(encoding="utf-8")
    heading = f"### `{process}`\n"
    assert heading in doc, f"operations.md has no table for {process} (a `{heading.strip()}` heading)"
    body = doc.split(heading, 1)[1]
    rows: dict[str, tuple[str, str | None, str, bool, str]] = {}
    for line in body.splitlines()[1:]:
        if not line.strip():
            if rows:
                break
            continue
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if cells[0] in ("option", "---"):
            continue
        assert len(cells) == 4, f"{process}: a row needs option | variable | default | text: {line}"
        flags = " / ".join(re.findall(r"`(-[^`]+)`", cells[0]))
        variable = None if cells[1] == "—" else cells[1].strip("`")
        default = cells[2].strip("`")
        rows[flags.split(" / ")[0]] = (flags, variable, default, "(hidden)" in cells[0], cells[3])
    return rows


def row_for(knob: Knob) -> str:
    flags = " / ".join(f"`{flag}`" for flag in knob.flags) + (" (hidden)" if knob.hidden else "")
    return f"| {flags} | {f'`{knob.env}`' if knob.env else '—'} | `{knob.shown_default()}` | {knob.help} |"


@pytest.mark.parametrize("process", PROCESSES)
def test_the_operations_table_lists_every_knob_with_its_variable_and_default(process: str) -> None:
    _, table, _ = PROCESSES[process]
    rows = documented(process)
    for knob in table:
        first = knob.flags[0]
        assert first in rows, f"operations.md lacks {process} {first}; add:\n{row_for(knob)}"
        flags, variable, default, hidden, text = rows[first]
        assert flags == " / ".join(knob.flags), f"{first}: the doc spells it {flags!r}"
        assert variable == knob.env, f"{first}: the doc says {variable}, the table {knob.env}"
        assert default == knob.shown_default(), f"{first}: the doc says {default!r}, the table {knob.shown_default()!r}"
        assert hidden == knob.hidden, f"{first}: hidden is {knob.hidden} in the table"
        assert text, f"{first}: say what it sets"
    stale = set(rows) - {knob.flags[0] for knob in table}
    assert not stale, f"operations.md documents {process} options that do not exist: {sorted(stale)}"


@pytest.mark.parametrize("process", PROCESSES)
def test_the_command_line_is_the_table(process: str) -> None:
    command, table, _ = PROCESSES[process]
    extra = {param.name for param in global_params()} if process.startswith("taskctl") else set()
    options = {param.name: param for param in command.params if isinstance(param, click.Option) and param.name not in extra}
    assert set(options) == {knob.name for knob in table}, "an option is declared outside the table"
    for knob in table:
        option = options[knob.name]
        assert option.envvar == knob.env, knob.name
        assert option.hidden == knob.hidden, knob.name
        assert set(option.opts) | set(option.secondary_opts) == set(knob.flags), knob.name
    given = REQUIRED_ARGS[process]
    with command.make_context(process, list(given)) as ctx:
        parsed = dict(ctx.params)
    for knob in table:
        if knob.option not in given:  # what an empty command line gives is the table's default
            assert parsed[knob.name] == knob.default, knob.name


def test_every_variable_is_its_process_s_own_or_shared_with_one_meaning() -> None:
    owners: dict[str, str] = {}
    for process, (_, table, prefix) in PROCESSES.items():
        for knob in table:
            if knob.env is None:
                continue
            assert knob.env.startswith(prefix) or knob.env in SHARED_ENV, (process, knob.env)
            if knob.env not in SHARED_ENV:
                assert knob.env not in owners, f"{knob.env} is read by {owners[knob.env]} and {process}"
                owners[knob.env] = process
    # The collision came from click deriving names: no group of ours may do that again.
    for group in (taskd_main, taskhub_main, taskctl_main):
        assert "auto_envvar_prefix" not in (group.context_settings or {}), group.name


def test_the_settings_built_from_an_empty_command_line_are_the_python_defaults(tmp_path: Path) -> None:
    def parse(process: str, *args: str) -> dict[str, object]:
        command = PROCESSES[process][0]
        with command.make_context(process, list(args)) as ctx:
            return dict(ctx.params)

    board = parse("taskd serve")
    assert BoardSettings(data_dir=tmp_path, **knobs.settings_values(BoardSettings, board)) == BoardSettings(data_dir=tmp_path)
    hub = parse("taskhub serve", "--board", "http://127.0.0.1:7431")
    built = HubSettings(board_token="t", **knobs.settings_values(HubSettings, hub))
    assert built == HubSettings(board_url="http://127.0.0.1:7431", board_token="t")
    loop = parse("taskctl loop subscribe", "--agent", "w1", "--on-wake", "true")
    assert Timing(**knobs.settings_values(Timing, loop)) == Timing()
    # The re-exports old imports use are the table's objects, not copies.
    assert server.HubSettings is HubSettings and runner.Timing is Timing
    assert (runner.STATE_FLUSH, runner.STOP_GRACE) == (Timing().state_flush, Timing().stop_grace)


def test_the_standalone_watcher_reads_the_hub_s_cadence_variables_and_defaults() -> None:
    spelled = {variable: default for variable, default in export_standalone.CADENCE_ENV.values()}
    assert spelled == {knob.env: knob.default for knob in CADENCE_KNOBS}
    assert len(CADENCE_KNOBS) == 3


def test_the_limits_table_states_the_board_s_defaults() -> None:
    doc = OPERATIONS.read_text(encoding="utf-8")
    body = doc.split("| option | default | what it does |", 1)[1].split("\n\n", 1)[0]
    by_flag = {knob.option: knob for knob in BOARD_KNOBS}
    rows = re.findall(r"^\| `(--[a-z-]+)` \| (\d+)(?: s)? \|", body, re.M)
    assert len(rows) >= 5
    for flag, default in rows:
        assert by_flag[flag].default == float(default), flag
    (example,) = re.findall(r"e\.g\. `(TASKLOOM_\w+)`", doc.split("## Limits", 1)[1].split("\n## ", 1)[0])
    assert example in {knob.env for knob in BOARD_KNOBS}


# -- the page limit: one constant ----------------------------------------------------------------


def test_the_page_limit_is_written_once() -> None:
    """No Python source spells the page size bounds itself; the page's copies equal the constant."""
    found: list[str] = []
    for folder in ("services", "taskctl"):
        for path in python_files(folder):
            for node in ast.walk(parse(path)):
                if isinstance(node, ast.Dict):
                    for key, value in zip(node.keys, node.values):
                        if (isinstance(key, ast.Constant) and key.value == "limit"
                                and isinstance(value, ast.Constant) and value.value == limits.PAGE_LIMIT_MAX):
                            found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
                elif isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "IntRange":
                    if any(isinstance(arg, ast.Constant) and arg.value == limits.PAGE_LIMIT_MAX for arg in node.args):
                        found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
                elif isinstance(node, ast.keyword) and node.arg == "maximum":
                    if isinstance(node.value, ast.Constant) and node.value.value == limits.PAGE_LIMIT_MAX:
                        found.append(f"{path.relative_to(ROOT)}:{node.value.lineno}")
    assert found == [], "use shared.limits.PAGE_LIMIT_MAX"
    static = ROOT / "services" / "board" / "static" / "js"
    (backfill,) = re.findall(r"BACKFILL_LIMIT = (\d+);", (static / "feed.js").read_text(encoding="utf-8"))
    (everything,) = re.findall(r"async all\(path, \{ limit = (\d+) \}", (static / "api.js").read_text(encoding="utf-8"))
    assert int(backfill) == int(everything) == limits.PAGE_LIMIT_MAX
    from services.board import api
    from services.board.queries import activities

    assert api.LIST_QUERY["limit"].maximum == limits.PAGE_LIMIT_MAX
    assert (activities.MAX_LIMIT, activities.DEFAULT_LIMIT) == (limits.PAGE_LIMIT_MAX, limits.PAGE_LIMIT_DEFAULT)
