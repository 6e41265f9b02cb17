"""What the docs state as fact — file modes, defaults, environment variables, intervals, option
names — read out of the docs themselves and compared with the code that runs.

Each test finds its sentence in the doc with a pattern (whitespace-insensitive, so rewrapping a
paragraph is fine) and takes the stated value from the text, not from this file: change a number in
the doc or in the code and the test names the disagreement. A rewritten sentence that no longer
matches fails with the pattern, so the claim is re-checked rather than silently dropped. Modes and
files come from real processes (``taskhub serve``, ``taskctl loop subscribe``, a board) where the
claim is about what a process writes.
"""

from __future__ import annotations

import ast
import asyncio
import hashlib
import json
import os
import re
import signal
import subprocess
import tomllib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import click
import pytest

from services.board import app as board_app
from services.board import auth, logreader, sqlite_store, store
from services.board.cli import main as taskd_main
from services.hub import board_link, server
from services.hub import client as hub_client
from services.hub.cli import main as taskhub_main
from services.hub.pointer import HubFiles, read_pointer
from services.subscriber import coalesce, runner, turns, units
from services.subscriber import state as subscriber_state
from shared import hub_protocol as hp
from shared import limits
from shared.ndjson import MAX_LINE
from shared.paths import data_dir, runtime_dir
from taskctl import loop_cmd
from taskctl.follow_cmd import follow as follow_command
from tests.support.board import VENV_BIN, RunningBoard, start_board
from tests.support.waiting import async_wait_until

from .sourcescan import ROOT, parse, python_files

DOCS = ROOT / "docs"
HOME = Path("/home/ann")


def text(name: str) -> str:
    """A doc with every run of whitespace folded to one space, so a claim may span lines."""
    return re.sub(r"\s+", " ", (ROOT / name).read_text(encoding="utf-8"))


def stated(name: str, pattern: str) -> tuple[str, ...]:
    match = re.search(pattern, text(name))
    assert match is not None, f"{name} no longer states /{pattern}/: re-check the claim and update this test"
    return match.groups()


def number(word: str) -> float:
    return float(word.replace("_", "").replace(",", ""))


def option(command: click.Command, name: str) -> click.Option:
    for param in command.params:
        if isinstance(param, click.Option) and (name in param.opts or name in param.secondary_opts):
            return param
    raise AssertionError(f"{command.name} has no option {name}")


def mode(path: Path) -> str:
    return oct(path.stat().st_mode & 0o777)[2:].zfill(4)


SUBSCRIBE = loop_cmd.loop.commands["subscribe"]
INSTALL = loop_cmd.loop.commands["install"]
HUB_SERVE = taskhub_main.commands["serve"]
BOARD_SERVE = taskd_main.commands["serve"]


# -- directories and environment variables (README, operations, hub protocol) ---------------------


@pytest.mark.parametrize("doc", ["README.md", "docs/operations.md", "docs/hub-protocol.md"])
def test_the_runtime_directory_is_found_as_stated(doc: str) -> None:
    env_var, xdg_var, xdg_sub, fallback = stated(
        doc, r"\(?`\$?(TASKLOOM_RUNTIME_DIR)`, else `\$(XDG_RUNTIME_DIR)/(\w+)`, else `~/([\w./]+)`"
    )
    assert runtime_dir({env_var: "/r", xdg_var: "/x"}, HOME) == Path("/r")
    assert runtime_dir({xdg_var: "/x"}, HOME) == Path("/x") / xdg_sub
    assert runtime_dir({}, HOME) == HOME / fallback


def test_the_data_directory_is_found_as_the_readme_states() -> None:
    env_var, xdg_var, sub, usual, mac = stated(
        "README.md",
        r"Data lives in `\$(TASKLOOM_DATA_DIR)`, else `\$(XDG_DATA_HOME)/(\w+)` \(usually `~/([^`]+)`; `~/([^`]+)` on macOS\)",
    )
    assert data_dir({env_var: "/d", xdg_var: "/x"}, HOME) == Path("/d")
    assert data_dir({xdg_var: "/x"}, HOME) == Path("/x") / sub
    assert data_dir({}, HOME) == HOME / usual
    assert data_dir({}, HOME, platform="darwin") == HOME / mac


def test_the_loop_state_directory_is_found_as_stated(monkeypatch: pytest.MonkeyPatch) -> None:
    flag, env_var, sub = stated(
        "docs/operations.md",
        r"the loop's state directory \(`(--state-dir)`, else `(TASKLOOM_LOOP_STATE_DIR)`, else `<data dir>/(\w+)`\)",
    )
    assert option(SUBSCRIBE, flag) and option(loop_cmd.loop.commands["status"], flag)
    monkeypatch.setenv(env_var, "/state")
    assert loop_cmd.default_state_dir() == Path("/state")
    monkeypatch.delenv(env_var)
    monkeypatch.setenv("TASKLOOM_DATA_DIR", "/data")
    assert loop_cmd.default_state_dir() == Path("/data") / sub


def test_taskctl_reads_the_variables_the_readme_names() -> None:
    url_flag, url_env, autostart = stated(
        "README.md", r"\(or `(--url)` / `(TASKLOOM_URL)`\), starts one when none runs \(unless `(TASKLOOM_NO_AUTOSTART)=1`\)"
    )
    literals = {node.value for node in ast.walk(parse(ROOT / "taskctl/discovery.py"))
                if isinstance(node, ast.Constant) and isinstance(node.value, str)}
    assert {url_env, autostart} <= literals
    assert option(SUBSCRIBE, url_flag)  # a global option every command carries


def test_the_board_listens_where_the_readme_says() -> None:
    host, port = stated("README.md", r"starts the board \(`taskd serve`\) on `http://([\d.]+):(\d+)`")
    assert option(BOARD_SERVE, "--host").default == host
    assert option(BOARD_SERVE, "--port").default == int(port)
    assert option(INSTALL, "--port").default == int(port)
    (default,) = stated("docs/operations.md", r"the board URL is `http://127\.0\.0\.1:<--port>` \(default (\d+)\)")
    assert int(default) == int(port)


# -- the loop subscriber (operations) --------------------------------------------------------------


def test_the_coalescing_intervals_are_the_stated_ones() -> None:
    debounce_ms, max_wait, lock_retry = stated(
        "docs/operations.md", r"\((\d+) ms debounce, (\d+) s at most, one event-triggered turn a minute, (\d+) s lock retry\)"
    )
    assert coalesce.DEBOUNCE == number(debounce_ms) / 1000 == option(SUBSCRIBE, "--debounce").default
    assert coalesce.MAX_WAIT == number(max_wait) == option(SUBSCRIBE, "--max-wait").default
    assert coalesce.MIN_INTERVAL == 60 == option(SUBSCRIBE, "--min-interval").default
    assert coalesce.LOCK_RETRY == number(lock_retry) == option(SUBSCRIBE, "--lock-retry").default
    (retry,) = stated("docs/operations.md", r"if it is held the turn is \*refused\* and retried (\d+) s later")
    assert number(retry) == coalesce.LOCK_RETRY


def test_every_subscriber_interval_has_the_stated_hidden_option_and_variable() -> None:
    (listed,) = stated("docs/operations.md", r"variable for tests and tuning: (.*?) \(each `TASKLOOM_LOOP_<NAME>`\)")
    names = re.findall(r"`(--[a-z-]+)`", listed)
    assert names[0] == "--debounce" and "`--debounce`/`TASKLOOM_LOOP_DEBOUNCE`" in listed
    hidden = {opt for param in SUBSCRIBE.params if isinstance(param, click.Option) and param.hidden for opt in param.opts}
    assert set(names) == hidden, "the doc's list and the hidden options of `loop subscribe` differ"
    for name in names:
        assert option(SUBSCRIBE, name).envvar == "TASKLOOM_LOOP_" + name[2:].upper().replace("-", "_")


def test_the_subscriber_reconnect_ladder_and_silence_are_the_stated_ones() -> None:
    low, high, silence, beats = stated(
        "docs/operations.md",
        r"its own reconnect ladder \((\d+) s doubling to (\d+) s, .*? "
        r"treats (\d+) s without any record \((\w+) missed hub heartbeats\)",
    )
    assert option(SUBSCRIBE, "--reconnect-min").default == runner.RECONNECT_MIN == number(low)
    assert option(SUBSCRIBE, "--reconnect-max").default == runner.RECONNECT_MAX == number(high)
    assert option(SUBSCRIBE, "--silence-timeout").default == runner.SILENCE_TIMEOUT == number(silence)
    assert {"three": 3}[beats] * hp.HEARTBEAT_INTERVAL == number(silence)


def test_the_stop_grace_is_the_stated_one() -> None:
    (grace,) = stated("docs/operations.md", r"lets a running turn finish for up to (\d+) s \(`--stop-grace`")
    assert option(SUBSCRIBE, "--stop-grace").default == runner.STOP_GRACE == number(grace)


def test_the_files_and_variables_shared_with_the_supervisor_are_the_stated_ones() -> None:
    ops = text("docs/operations.md")
    for name in (turns.SESSIONS_FILE, turns.CONTINUE_LOCK, turns.WAKE_REVISION_ENV, turns.WAKE_EVENTS_ENV):
        assert f"**`{name}`**" in ops or f"`{name}` —" in ops, f"operations.md no longer documents {name}"
    (state_file,) = stated("docs/operations.md", r"The file behind it is `<state dir>/([\w.]+)`")
    assert state_file == subscriber_state.STATE_FILE


def test_the_units_are_the_stated_files_and_commands(tmp_path: Path) -> None:
    systemd_dir, systemd_stem, launchd_dir, launchd_stem = stated(
        "docs/operations.md",
        r"It writes `~/([\w./]+)/([\w-]+)\{board,subscriber\}\.service` "
        r"\(or `~/([\w/]+)/([\w.]+)\{board,subscriber\}\.plist`\)",
    )
    assert units.unit_dir(units.SYSTEMD, environ={}, home=HOME) == HOME / systemd_dir
    assert units.unit_dir(units.LAUNCHD, environ={}, home=HOME) == HOME / launchd_dir
    for role in ("board", "subscriber"):
        assert units.UNIT_FILES[units.SYSTEMD][role] == f"{systemd_stem}{role}.service"
        assert units.UNIT_FILES[units.LAUNCHD][role] == f"{launchd_stem}{role}.plist"
    board_cmd, hub_cmd = stated(
        "docs/operations.md", r"\| `taskd (serve [^`]+)` \| the board.*?\| `taskhub (serve [^`]+)` \| the local event hub"
    )
    values = units.UnitValues(
        taskd="/bin/taskd", taskhub="/bin/taskhub", taskctl="/bin/taskctl", port=7431,
        board_url="http://127.0.0.1:7431", data_dir=str(tmp_path), runtime_dir=str(tmp_path), state_dir=str(tmp_path),
        log_dir=str(tmp_path), agents=("worker-1",), on_wake="true",
    )
    rendered = {unit.role: units.systemd_exec_argv(unit.text) for unit in units.render(units.SYSTEMD, values, hub=True)}
    board_words = board_cmd.split()
    assert rendered["board"][1:len(board_words) + 1] == board_words
    assert rendered["hub"][1:] == hub_cmd.replace("URL", values.board_url).split()


def test_loop_status_exits_with_the_stated_codes(tmp_path: Path) -> None:
    running, not_running, usage = stated(
        "docs/operations.md", r"\*\*Exit codes: (\d) running, (\d) not running\*\* .*?, (\d) usage"
    )
    assert loop_cmd.EXIT_NOT_RUNNING == int(not_running) and int(running) == 0
    env = {**os.environ, "TASKLOOM_NO_AUTOSTART": "1"}
    done = subprocess.run([str(VENV_BIN / "taskctl"), "loop", "status", "--state-dir", str(tmp_path)],
                          env=env, capture_output=True, timeout=30)
    assert done.returncode == int(not_running), done
    done = subprocess.run([str(VENV_BIN / "taskctl"), "loop", "status", "--no-such-option"],
                          env=env, capture_output=True, timeout=30)
    assert done.returncode == int(usage), done


def test_the_subscriber_state_file_is_owner_only_with_the_stated_fields(tmp_path: Path) -> None:
    assert "replaced atomically (temp file, fsync, rename), owner-only" in text("docs/operations.md")
    ops = (DOCS / "operations.md").read_text(encoding="utf-8")
    table = ops[ops.index("| field | meaning |"):ops.index("## Logs")]
    documented = {name for row in table.splitlines()[2:] if row.startswith("|")
                  for name in re.findall(r"`(\w+)`", row.split("|")[1])}
    state_dir = tmp_path / "state"
    env = {key: value for key, value in os.environ.items() if not key.startswith("TASKLOOM_")}
    env.update(TASKLOOM_RUNTIME_DIR=str(tmp_path / "run"), TASKLOOM_TOKEN="tl_" + "0" * 64, TASKLOOM_NO_AUTOSTART="1")
    # A subscriber with no hub to reach: it publishes its state and keeps retrying until stopped.
    process = subprocess.Popen(
        [str(VENV_BIN / "taskctl"), "loop", "subscribe", "--agent", "worker-1", "--on-wake", "true",
         "--state-dir", str(state_dir), "--url", "http://127.0.0.1:9", "--no-start-hub",
         "--reconnect-min", "0.05", "--reconnect-max", "0.1"],
        env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    path = state_dir / subscriber_state.STATE_FILE
    try:
        asyncio.run(async_wait_until(_reconnecting(path), timeout=20, what="the subscriber to publish its state"))
    finally:
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=20)
    assert process.returncode == 0, err
    assert mode(path) == "0600"
    written = set(json.loads(path.read_text()))
    # Fields a turn sets appear only once one ran: take them from the calls that publish them.
    published = {keyword.arg for node in ast.walk(parse(ROOT / "services/subscriber/runner.py"))
                 if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                 and node.func.attr in {"update", "set_state"}
                 for keyword in node.keywords if keyword.arg}
    assert documented == (written | published) - {"version"}


def _reconnecting(path: Path) -> Any:
    async def check() -> bool:
        record = subscriber_state.read_state(path)
        return record is not None and record.get("state") == subscriber_state.RECONNECTING

    return check


# -- logs ----------------------------------------------------------------------------------------


def test_the_hub_logging_option_is_the_stated_one() -> None:
    (flag,) = stated("docs/operations.md", r"when stderr is not a terminal \(`taskhub serve (--log-stderr)`")
    (negative,) = stated("docs/operations.md", r"\(`(--no-log-stderr)` chooses the file anywhere\)")
    log_option = option(HUB_SERVE, flag)
    assert log_option.secondary_opts == [negative] and log_option.default is None  # None: decided by isatty
    assert f"`{flag}` / `{negative}`" in text("docs/hub-protocol.md")
    (name,) = stated("docs/operations.md", r"else to `<runtime dir>/(hub-<key>\.log)`")
    assert HubFiles(Path("/run"), "k").log.name == name.replace("<key>", "k")


# -- the hub (hub protocol) --------------------------------------------------------------------


def test_the_hub_constants_are_the_stated_ones() -> None:
    (generation,) = stated("docs/hub-protocol.md", r"Generation: `HUB_PROTOCOL = (\d+)`")
    assert hp.HUB_PROTOCOL == int(generation)
    (line_cap, exact) = stated("docs/hub-protocol.md", r"at most \*\*(\d+) MiB\*\* \(([\d,]+) bytes, before the `\\n`\) per line")
    assert MAX_LINE == limits.HUB_MAX_LINE == int(line_cap) << 20 == number(exact)
    (hello,) = stated("docs/hub-protocol.md", r"Within \*\*(\d+) s\*\* send `hello`")
    assert hp.HELLO_TIMEOUT == number(hello) == option(HUB_SERVE, "--hello-timeout").default
    (awaiting,) = stated("docs/hub-protocol.md", r"At most\s+\*\*(\d+)\*\*\s+connections may be waiting for their `hello`")
    assert hp.MAX_AWAITING_HELLO == int(awaiting)
    (idle_exit,) = stated("docs/hub-protocol.md", r"The hub exits after (\d+) minutes with no connection and no registration")
    assert hp.IDLE_EXIT == number(idle_exit) * 60 == option(HUB_SERVE, "--idle-exit").default
    (idle_ms,) = stated("docs/hub-protocol.md", r"end the stream after this long without an `event`; default `(\d+)`")
    assert hp.DEFAULT_IDLE_MS == int(idle_ms)
    (follow_idle,) = stated("docs/hub-protocol.md", r"`--idle` is in seconds, default (\d+)")
    assert option(follow_command, "--idle").default == number(follow_idle) == hp.DEFAULT_IDLE_MS / 1000
    (beat,) = stated("docs/hub-protocol.md", r"after (\d+) s with nothing else written")
    assert hp.HEARTBEAT_INTERVAL == number(beat) == option(HUB_SERVE, "--heartbeat").default
    ttl_ms, ttl_min = stated("docs/hub-protocol.md", r"default `(\d+)` = (\d+) min\)")
    assert hp.DEFAULT_WATCH_TTL_MS == int(ttl_ms) == int(ttl_min) * 60_000
    longest_ms, longest_days = stated("docs/hub-protocol.md", r"At most `(\d+)` \(([\d,]+)\s+days\), so its end is a timestamp")
    assert hp.MAX_WATCH_TTL_MS == int(longest_ms) == number(longest_days) * 86_400_000
    (ring,) = stated("docs/hub-protocol.md", r"The ring\*\* holds the last (\d+) event lines")
    assert hp.RING_SIZE == int(ring) == option(HUB_SERVE, "--ring-size").default
    (outbox,) = stated("docs/hub-protocol.md", r"bounded outbox \((\d+) lines\)")
    assert server.MAX_PENDING == int(outbox)
    (version,) = stated("docs/hub-protocol.md", r"detached card-brief registrations \(`version: (\d+)`")
    assert hp.REGISTRATIONS_VERSION == int(version)


def test_the_hub_timeouts_are_the_stated_ones() -> None:
    (kill_after,) = stated("docs/hub-protocol.md", r"is sent `SIGTERM` \(then `SIGKILL` after (\d+) s\)")
    assert hub_client.STOP_TIMEOUT == number(kill_after)
    (give_up,) = stated("docs/hub-protocol.md", r"the client gives up after (\d+) s")
    assert hub_client.START_TIMEOUT == number(give_up)
    (first_contact,) = stated("docs/hub-protocol.md", r"it waits up to (\d+) s for that at start")
    assert server.HubSettings(board_url="http://127.0.0.1:1", board_token="t").first_contact_timeout == number(first_contact)
    low, high, silent, ping = stated(
        "docs/hub-protocol.md",
        r"reconnects on a ladder \((\d+) s doubling to (\d+) s;.*?no byte for (\d+) s \(the board pings every (\d+) s\)",
    )
    assert (hp.RECONNECT_MIN, hp.RECONNECT_MAX) == (number(low), number(high))
    ladder = (option(HUB_SERVE, "--reconnect-min").default, option(HUB_SERVE, "--reconnect-max").default)
    assert ladder == (number(low), number(high))
    assert board_link.READ_TIMEOUT == number(silent)
    assert option(BOARD_SERVE, "--ping-interval").default == number(ping)


def test_the_brief_cadence_is_the_stated_one() -> None:
    debounce_ms, max_wait, floor = stated(
        "docs/hub-protocol.md",
        r"a batch starts (\d+) ms after the last mark, at most (\d+) s after the first unserved one, and no sooner than (\d+) s",
    )
    cadence = (hp.REFRESH_DEBOUNCE, hp.REFRESH_MAX_WAIT, hp.REFRESH_FLOOR)
    assert cadence == (number(debounce_ms) / 1000, number(max_wait), number(floor))


def test_the_hub_knobs_are_the_stated_options_variables_and_defaults() -> None:
    (knobs,) = stated("docs/hub-protocol.md", r"## Knobs for tests and operators (.*?)\(`taskctl export watch --standalone`")
    pairs = re.findall(r"`(--[a-z-]+)` / `(TASKLOOM_HUB_[A-Z_]+)`(?: \(([\d.]+)\))?", knobs)
    assert len(pairs) >= 9
    visible, hidden = knobs.split("and hidden", 1)
    for flag, env_var, default in pairs:
        knob = option(HUB_SERVE, flag)
        assert knob.envvar == env_var, flag
        assert knob.hidden == (flag in hidden and flag not in visible), flag
        if default:
            assert knob.default == number(default), flag
    declared = {param.envvar for param in HUB_SERVE.params
                if isinstance(param.envvar, str) and param.envvar.startswith("TASKLOOM_HUB_")}
    assert declared == {env_var for _, env_var, _ in pairs}, "a hub knob is missing from the doc's list"
    standalone = {node.value for node in ast.walk(parse(ROOT / "taskctl/export_standalone.py"))
                  if isinstance(node, ast.Constant) and isinstance(node.value, str)
                  and node.value.startswith("TASKLOOM_HUB_REFRESH")}
    assert standalone == {env_var for _, env_var, _ in pairs if "REFRESH" in env_var}


def test_the_hub_key_is_computed_as_stated() -> None:
    formula = ("`sha256(resolved board URL + \"\\n\" + token fingerprint)[:16]`, "
               "where the fingerprint is `sha256(board token)[:16]`")
    assert formula in text("docs/hub-protocol.md")
    url, token = "HTTP://LocalHost:7431/", "tl_" + "ab" * 32
    fingerprint = hashlib.sha256(token.encode()).hexdigest()[:16]
    expected = hashlib.sha256(f"{hp.resolve_board_url(url)}\n{fingerprint}".encode()).hexdigest()[:16]
    assert hp.hub_key(url, token) == expected and auth.token_fingerprint(token) == fingerprint


@pytest.fixture
async def board(tmp_path: Path) -> AsyncIterator[RunningBoard]:
    running = await start_board(tmp_path / "data")
    try:
        yield running
    finally:
        await running.runner.cleanup()


async def test_the_hub_files_have_the_stated_names_modes_and_pointer(board: RunningBoard, tmp_path: Path) -> None:
    dir_mode, file_mode = stated("docs/hub-protocol.md", r"The directory is `(0\d{3})`, every file `(0\d{3})`")
    names = re.findall(r"\| `(hub-<key>[\w.]+)` \|", (DOCS / "hub-protocol.md").read_text(encoding="utf-8"))
    (fields,) = stated("docs/hub-protocol.md", r"\| `hub-<key>\.json` \| the pointer: `\{([^}]+)\}`")
    runtime = tmp_path / "run"
    env = {key: value for key, value in os.environ.items() if not key.startswith("TASKLOOM_")}
    env.update(TASKLOOM_RUNTIME_DIR=str(runtime), TASKLOOM_TOKEN=board.token)
    served = await asyncio.create_subprocess_exec(
        str(VENV_BIN / "taskhub"), "serve", "--board", board.url, "--idle-exit", "0", "--no-log-stderr",
        env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    files = HubFiles(runtime, hp.hub_key(board.url, board.token))
    try:
        async def published() -> dict[str, Any] | None:
            record = read_pointer(files)
            return record if record is not None and record["pid"] == served.pid else None

        pointer = await async_wait_until(published, timeout=20, what="taskhub serve to publish its pointer")
        assert set(pointer) == {field.strip() for field in fields.split(",")}
        address = hub_client.HubAddress(port=pointer["port"], token=pointer["token"], pid=served.pid, key=files.key)
        assert await hub_client.ping(address) is not None
        assert mode(files.pointer) == file_mode  # removed on exit: checked while the hub runs
    finally:
        served.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(served.wait(), 20) == 0
    assert mode(runtime) == dir_mode
    assert {name.replace("<key>", files.key) for name in names} == {
        files.pointer.name, files.lock.name, files.log.name, files.registrations.name,
    }
    for path in (files.lock, files.log):
        assert mode(path) == file_mode, path


# -- the board (README, architecture) ---------------------------------------------------------------


async def test_the_token_file_and_cookie_are_as_stated(board: RunningBoard) -> None:
    (readme_mode,) = stated("README.md", r"the API token in `token` \(mode (0\d{3})\)")
    prefix, hex_digits, arch_mode = stated(
        "docs/architecture.md",
        r"`<data_dir>/token` holds `(\w+)` \+ (\d+) hex characters, created on first start with mode (0\d{3})",
    )
    token_path = board.data_dir / "token"
    assert mode(token_path) == readme_mode == arch_mode
    token = token_path.read_text().strip()
    assert re.fullmatch(re.escape(prefix) + f"[0-9a-f]{{{hex_digits}}}", token)
    minutes, cookie = stated("docs/architecture.md", r"The code lives in memory for (\d+) minutes .*? it sets `(\w+)<board id>`")
    assert auth.LOGIN_CODE_TTL == number(minutes) * 60 and auth.SESSION_COOKIE_PREFIX == cookie


def test_the_store_figures_are_the_stated_ones() -> None:
    (batch,) = stated("docs/architecture.md", r"takes whatever has queued up \(at most (\d+) commands\)")
    assert store.MAX_BATCH == int(batch)
    (busy,) = stated("docs/architecture.md", r"`busy_timeout` only matters against \*other\* processes .*? it is (\d+) s")
    assert sqlite_store.BUSY_TIMEOUT_MS == number(busy) * 1000
    poll_ms, page = stated(
        "docs/architecture.md", r"\(every (\d+) ms by default\).*?reads the rows with `revision > position` \((\d+) at a time\)"
    )
    assert board_app.BoardSettings(data_dir=Path("/d")).external_poll_interval == number(poll_ms) / 1000
    assert logreader.LIVE_PAGE == int(page)


@pytest.mark.sqlite_only
async def test_the_sqlite_file_runs_in_the_stated_mode(board: RunningBoard) -> None:
    (sync,) = stated("docs/architecture.md", r"SQLite in WAL mode with `synchronous=(\w+)`")
    levels = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}
    pragmas = await board.store.query(lambda conn: (conn.execute("PRAGMA synchronous").fetchone()[0],
                                                    conn.execute("PRAGMA journal_mode").fetchone()[0]))
    assert (levels[pragmas[0]], pragmas[1]) == (sync, "wal")


def test_the_commands_and_queries_import_no_driver_as_the_architecture_states() -> None:
    arch = text("docs/architecture.md")
    assert "**Two engines behind one seam.**" in arch and "import no driver" in arch
    seam_sources = python_files("services/board/commands") + python_files("services/board/queries")
    drivers = {"sqlite3", "psycopg", "psycopg_pool"}
    importing = [str(path) for path in seam_sources
                 if any(isinstance(node, ast.Import) and any(alias.name.split(".")[0] in drivers for alias in node.names)
                        or isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in drivers
                        for node in ast.walk(parse(path)))]
    assert importing == []
    sql = "\n".join(node.value for path in seam_sources for node in ast.walk(parse(path))
                    if isinstance(node, ast.Constant) and isinstance(node.value, str))
    assert "json_extract(" not in sql and "json_each(" not in sql and "INSERT OR " not in sql


def test_shared_has_no_io_as_the_architecture_states() -> None:
    assert "no sockets, no asyncio, no SQLite" in text("docs/architecture.md")
    for path in python_files("shared"):
        for node in ast.walk(parse(path)):
            names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not [name for name in names if name.split(".")[0] in {"socket", "asyncio", "sqlite3"}], path


# -- dependencies --------------------------------------------------------------------------------


def _table(doc: str, heading: str) -> list[str]:
    body = (ROOT / doc).read_text(encoding="utf-8").split(heading, 1)[1].split("\n## ", 1)[0]
    return [row.split("|")[1].strip() for row in body.splitlines() if row.startswith("| ") and not row.startswith("| package")]


def _requirement_names(requirements: list[str]) -> set[str]:
    return {re.split(r"[<>=;\[ ]", requirement, maxsplit=1)[0].lower() for requirement in requirements}


def test_the_dependency_tables_are_the_project_dependencies() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    runtime = {name for row in _table("docs/dependencies.md", "## Runtime") for name in row.split(", ")}
    assert runtime == _requirement_names(project["dependencies"])
    tests = {name for row in _table("docs/dependencies.md", "## Tests and tools") for name in row.split(", ")}
    assert tests == _requirement_names(project["optional-dependencies"]["test"])
    bench = {name for row in _table("docs/dependencies.md", "## Benchmarks only") for name in row.split(", ")}
    assert bench == _requirement_names(project["optional-dependencies"]["bench"])
    assert "**aiosqlite** (listed by SPEC §2) is deliberately not a dependency" in text("docs/dependencies.md")
    assert "aiosqlite" not in _requirement_names(project["dependencies"])


def _imported_modules(folder: str) -> set[str]:
    """Every module the sources under ``folder`` import, lazy imports inside functions included."""
    found: set[str] = set()
    for path in python_files(folder):
        for node in ast.walk(parse(path)):
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found.add(node.module)
    return found


def test_taskctl_does_not_use_aiohttp_as_the_dependencies_doc_states() -> None:
    assert "`taskctl` does not import it, not even lazily" in text("docs/dependencies.md")
    external: set[str] = set()
    seen: set[Path] = set()
    pending = python_files("taskctl")
    while pending:
        path = pending.pop()
        if path in seen:
            continue
        seen.add(path)
        for node in ast.walk(parse(path)):
            modules: list[str] = []
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                modules = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level:
                base = path.parent
                for _ in range(node.level - 1):
                    base = base.parent
                package = ".".join(base.relative_to(ROOT).parts)
                modules = [f"{package}.{node.module}" if node.module else package]
                modules += [f"{modules[0]}.{alias.name}" for alias in node.names]
            for module in modules:
                parts = module.split(".")
                if parts[0] not in {"services", "shared", "taskctl"}:
                    external.add(parts[0])
                    continue
                for depth in range(1, len(parts) + 1):
                    here = ROOT.joinpath(*parts[:depth])
                    for candidate in (here / "__init__.py", here.with_suffix(".py")):
                        if candidate.is_file():
                            pending.append(candidate)
    assert len(seen) > 30, "the walk stopped following taskctl's imports"
    assert ROOT / "services/hub/client.py" in seen and ROOT / "services/subscriber/runner.py" in seen
    assert "aiohttp" not in external
    assert {"click", "orjson", "uvloop", "structlog"} <= external  # what the doc's table says taskctl does use


def test_the_test_only_packages_stay_out_of_the_product() -> None:
    assert "Never imported by `services/`, `shared/` or `taskctl/`" in text("docs/dependencies.md")
    product = _imported_modules("services") | _imported_modules("shared") | _imported_modules("taskctl")
    test_only = {"httpx", "httpx_sse", "openapi_spec_validator", "pytest", "hypothesis"}
    assert not {module.split(".")[0] for module in product} & test_only
