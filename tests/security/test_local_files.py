"""Another local user must find nothing to read or redeem: every file the processes create is owner-only.

The attack: an autostarted board wrote its one-time login link into ``<data_dir>/logs/taskd.log``
(0644 in a 0755 directory) and left ``board.sqlite`` and its WAL 0644, so another uid read every
project, redeemed the link and wrote. These tests start the real processes as a user would
(``taskctl`` autostarting ``taskd``, the hub started on demand) under a permissive 022 umask.
"""

from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import sqlite3
import stat
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli.conftest import TASKCTL, base_env
from tests.support.board import VENV_BIN, TaskdProcess
from tests.support.waiting import wait_until

LOGIN_LINK = "/login?code="
#: A user's usual umask: without our own, files would come out 0644 and directories 0755.
LOOSE_UMASK = 0o022


@pytest.fixture(scope="module")
def pycache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("pycache")


def everything_under(*roots: Path) -> Iterator[Path]:
    for root in roots:
        yield root
        for folder, dirs, names in os.walk(root):
            for name in (*dirs, *names):
                yield Path(folder) / name


def modes_under(*roots: Path) -> Iterator[tuple[Path, os.stat_result]]:
    """Each path under ``roots`` with its lstat, skipping one that went between listing and lstat.

    The services are running while we look: an atomic writer's ``.<name>.tmp`` can be listed
    and renamed away before we stat it.
    """
    for path in everything_under(*roots):
        try:
            yield path, path.lstat()
        except FileNotFoundError:
            continue


def loose(*roots: Path) -> list[str]:
    """Paths with any group or other permission bit, with their modes."""
    return [
        f"{path} {oct(stat.S_IMODE(status.st_mode))}"
        for path, status in modes_under(*roots)
        if not stat.S_ISLNK(status.st_mode) and stat.S_IMODE(status.st_mode) & 0o077
    ]


DOCS = Path(__file__).resolve().parents[2] / "docs" / "security.md"


def documented_modes() -> list[tuple[re.Pattern[str], str, int]]:
    """The *File modes* table of docs/security.md: (pattern, path as written, mode) per row.

    A row's path starts with ``<data_dir>``, ``<runtime_dir>`` or ``<state_dir>``; any later
    ``<name>`` stands for one path component.
    """
    section = DOCS.read_text(encoding="utf-8").split("## File modes", 1)[1].split("\n## ", 1)[0]
    rows = []
    for match in re.finditer(r"^\| `(<(?:data|runtime|state)_dir>[^`]*)` \| (0[0-7]{3}) \|", section, re.M):
        written = match[1]
        base, rest = written.split(">", 1)
        parts = re.split(r"(<[a-z0-9_]+>)", rest)
        pattern = re.escape(base + ">") + "".join(
            "[^/]+" if part.startswith("<") else re.escape(part) for part in parts
        )
        rows.append((re.compile(pattern), written, int(match[2], 8)))
    assert len(rows) > 15, "the file-modes table of docs/security.md did not parse"
    return rows


def check_against_docs(**roots: Path) -> list[str]:
    """Every path under ``roots`` (data_dir=…, runtime_dir=…, state_dir=…) has the mode the docs give it."""
    rows = documented_modes()
    problems = []
    for name, root in roots.items():
        for path, status in modes_under(root):
            relative = f"<{name}>" + str(path)[len(str(root)):]
            modes = [mode for pattern, _, mode in rows if pattern.fullmatch(relative)]
            actual = stat.S_IMODE(status.st_mode)
            if not modes:
                problems.append(f"{relative} ({oct(actual)}) is not in docs/security.md")
            elif modes[0] != actual:
                problems.append(f"{relative} is {oct(actual)}, docs/security.md says {oct(modes[0])}")
    return problems


def files_holding(text: str, *roots: Path) -> list[Path]:
    found = []
    for path, status in modes_under(*roots):
        try:
            if stat.S_ISREG(status.st_mode) and text.encode() in path.read_bytes():
                found.append(path)
        except FileNotFoundError:
            continue  # an atomic writer renamed it away after we listed it
    return found


def pid_gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def run_taskctl(env: dict[str, str], cwd: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([TASKCTL, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          umask=LOOSE_UMASK)
    assert done.returncode == 0, f"taskctl {' '.join(args)} → {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done


def test_an_autostarted_board_and_its_hub_keep_every_file_owner_only(tmp_path: Path, pycache: Path) -> None:
    env = base_env(pycache)
    env["TASKLOOM_RUNTIME_DIR"] = str(tmp_path / "run")
    env["TASKLOOM_DATA_DIR"] = str(tmp_path / "data")
    data, runtime = tmp_path / "data", tmp_path / "run"
    pointer = runtime / "board.json"
    pid: int | None = None
    try:
        started = run_taskctl(env, tmp_path, "project", "create", "demo")
        assert "started a local board" in started.stderr, started.stderr
        pid = json.loads(pointer.read_text())["pid"]
        run_taskctl(env, tmp_path, "task", "create", "-p", "demo", "Private work")
        (tmp_path / "notes.txt").write_text("private notes\n")
        run_taskctl(env, tmp_path, "attachment", "upload", "DEMO-0001", str(tmp_path / "notes.txt"))
        assert list((data / "attachments").glob("*/*")), "the blob and its directory are checked below"
        # The hub, started on demand, writes its pointer (with its own token), lock and log there too.
        run_taskctl(env, tmp_path, "events", "follow", "--idle", "0.3")
        assert list(runtime.glob("hub-*.json")), sorted(p.name for p in runtime.iterdir())
        # A login link minted for the browser goes to the caller, never into a file.
        link = run_taskctl(env, tmp_path, "--json", "open", "--print").stdout

        assert {"board.sqlite", "board.sqlite-wal", "board.sqlite-shm", "token", "logs"} <= {p.name for p in data.iterdir()}
        assert (data / "logs" / "taskd.log").stat().st_size > 0
        assert loose(data, runtime) == []
        assert check_against_docs(data_dir=data, runtime_dir=runtime) == []
        assert LOGIN_LINK in link
        assert files_holding(LOGIN_LINK, data, runtime) == [], "a login link was written to disk"
    finally:
        subprocess.run([TASKCTL, "events", "hub", "--stop", "--all"], env=env, cwd=tmp_path, capture_output=True,
                       timeout=60)
        if pid is not None:
            os.kill(pid, signal.SIGTERM)
            wait_until(lambda: pid_gone(pid), timeout=20, what="the autostarted board to stop")


def test_a_loose_data_dir_from_before_is_tightened_at_start(tmp_path: Path) -> None:
    data, runtime = tmp_path / "data", tmp_path / "run"
    (data / "logs").mkdir(parents=True)
    (data / "attachments" / "ab").mkdir(parents=True)
    runtime.mkdir()
    with sqlite3.connect(data / "board.sqlite") as conn:  # an old file, group- and world-readable
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("CREATE TABLE leftover (x)")
    (data / "token").write_text("tl_" + "ab" * 32 + "\n")
    (data / "logs" / "taskd.log").write_text("Open the board: http://127.0.0.1:1/login?code=spent\n")
    (runtime / "board-start.lock").write_text("")
    for path, mode in [(data, 0o755), (data / "logs", 0o755), (data / "attachments", 0o755), (runtime, 0o755),
                       (data / "board.sqlite", 0o644), (data / "token", 0o644), (data / "logs" / "taskd.log", 0o644),
                       (runtime / "board-start.lock", 0o644)]:
        path.chmod(mode)
    assert loose(data, runtime) != []

    board = TaskdProcess(data_dir=data, runtime_dir=runtime, log_path=tmp_path / "taskd.log")
    board.start()
    try:
        # The board serves the same token from its now private file.
        assert board.token == "tl_" + "ab" * 32
        remaining = loose(data, runtime)
        # Only what lies below a directory that is now 0700 may keep its old bits.
        assert [line for line in remaining if not line.startswith(str(data / "attachments") + "/")] == []
        assert stat.S_IMODE((data / "attachments").stat().st_mode) == 0o700
        for name in ("board.sqlite-wal", "board.sqlite-shm", "board.lock"):
            assert stat.S_IMODE((data / name).stat().st_mode) == 0o600, name
    finally:
        assert board.stop() == 0


def foreign_dir(tmp_path: Path) -> Path:
    """A directory another user owns: made and given away when we are root, else ``/`` (root's)."""
    if os.geteuid() == 0:
        path = tmp_path / "foreign"
        path.mkdir(mode=0o755)
        os.chown(path, 65534, 65534)
        return path
    return Path("/")


def test_a_data_dir_another_user_owns_is_refused_and_left_alone(tmp_path: Path) -> None:
    data = foreign_dir(tmp_path)
    before = sorted(p.name for p in data.iterdir())
    runtime = tmp_path / "run"
    env = {**os.environ, "TASKLOOM_RUNTIME_DIR": str(runtime), "TASKLOOM_DATA_DIR": str(data)}
    done = subprocess.run([str(VENV_BIN / "taskd"), "serve", "--port", "0", "--data-dir", str(data)], env=env,
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "belongs to uid" in lines[0] and str(data) in lines[0], done.stderr
    assert sorted(p.name for p in data.iterdir()) == before, "nothing was created in someone else's directory"
    assert not (runtime / "board.json").exists()


def test_the_login_link_is_printed_on_a_terminal_only(tmp_path: Path) -> None:
    """On a TTY the link is for the person watching; anywhere else (a log, the journal) it is not."""
    env = {**os.environ, "TASKLOOM_RUNTIME_DIR": str(tmp_path / "run"), "TASKLOOM_DATA_DIR": str(tmp_path / "data")}
    main, terminal = pty.openpty()
    process = subprocess.Popen([str(VENV_BIN / "taskd"), "serve", "--port", "0", "--data-dir", str(tmp_path / "data")],
                               env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=terminal)
    os.close(terminal)
    seen = b""
    try:
        deadline = time.monotonic() + 20
        while LOGIN_LINK.encode() not in seen and time.monotonic() < deadline and process.poll() is None:
            ready, _, _ = select.select([main], [], [], 0.2)
            if ready:
                try:
                    seen += os.read(main, 4096)
                except OSError:
                    break
        assert LOGIN_LINK.encode() in seen, seen.decode(errors="replace")
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0
        os.close(main)
    assert files_holding(LOGIN_LINK, tmp_path / "data", tmp_path / "run") == []


def test_the_loop_subscriber_keeps_its_state_owner_only_and_gives_its_command_the_users_umask(
    tmp_path: Path, pycache: Path
) -> None:
    board = TaskdProcess(data_dir=tmp_path / "data", runtime_dir=tmp_path / "run", log_path=tmp_path / "taskd.log")
    board.start()
    state = tmp_path / "loop"
    state.mkdir(mode=0o755)
    state.chmod(0o755)
    (state / "sessions.state.json").write_text(json.dumps({"version": 1, "sessions": [{"pid": os.getpid()}]}))
    umask_file = tmp_path / "umask-of-the-turn"
    env = base_env(pycache)
    env.update(TASKLOOM_RUNTIME_DIR=str(board.runtime_dir), TASKLOOM_DATA_DIR=str(board.data_dir),
               TASKLOOM_NO_AUTOSTART="1", TASKLOOM_HUB_IDLE_EXIT="30", UMASK_FILE=str(umask_file))
    log = open(tmp_path / "subscriber.log", "ab")
    subscriber = subprocess.Popen(
        [TASKCTL, "loop", "subscribe", "--url", board.url, "--agent", "worker-1", "--state-dir", str(state),
         "--on-wake", 'umask > "$UMASK_FILE"', "--min-interval", "0", "--state-flush", "0.05"],
        env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log, umask=LOOSE_UMASK,
    )
    log.close()

    def streaming() -> bool:
        assert subscriber.poll() is None, (tmp_path / "subscriber.log").read_text()
        try:
            record = json.loads((state / "subscribe.state.json").read_text())
        except (OSError, ValueError):
            return False
        return record.get("state") == "streaming" and isinstance(record.get("revision"), int)

    try:
        wait_until(streaming, timeout=30, what="the subscriber to stream")
        request = urllib.request.Request(
            board.url + "/api/v1/projects", method="POST", data=json.dumps({"id": "demo"}).encode(),
            headers={"Authorization": f"Bearer {board.token}", "Content-Type": "application/json",
                     "X-Taskloom-Actor": "ann", "X-Taskloom-Actor-Kind": "human"},
        )
        urllib.request.urlopen(request, timeout=10).close()
        request.data = json.dumps({"project": "demo", "title": "Wake the loop"}).encode()
        request.full_url = board.url + "/api/v1/tasks"
        urllib.request.urlopen(request, timeout=10).close()
        wait_until(lambda: umask_file.exists() and umask_file.read_text().strip(), timeout=20, what="a turn")
        # The supervisor's command runs with the umask the subscriber was given, not ours.
        assert int(umask_file.read_text().strip(), 8) == LOOSE_UMASK
        assert stat.S_IMODE(state.stat().st_mode) == 0o700
        for name in ("subscribe.state.json", "subscribe.lock", "continue.lock"):
            assert stat.S_IMODE((state / name).stat().st_mode) == 0o600, name
        # Everything the subscriber, its hub and the board made is owner-only.
        assert [line for line in loose(board.data_dir, board.runtime_dir, state)
                if not line.startswith(str(state / "sessions.state.json"))] == []
        (state / "sessions.state.json").unlink()  # the supervisor's file, not ours
        assert check_against_docs(data_dir=board.data_dir, runtime_dir=board.runtime_dir, state_dir=state) == []
    finally:
        subscriber.send_signal(signal.SIGTERM)
        subscriber.wait(timeout=30)
        subprocess.run([TASKCTL, "events", "hub", "--stop", "--all"], env=env, capture_output=True, timeout=60)
        board.stop()


@pytest.mark.parametrize("supervisor", ["systemd", "launchd"])
def test_the_rendered_board_and_hub_units_start_owner_only(supervisor: str, tmp_path: Path, pycache: Path) -> None:
    """The supervisor opens the launchd log files before our code runs: its umask must be ours."""
    env = base_env(pycache)
    env.update(TASKLOOM_RUNTIME_DIR=str(tmp_path / "run"), TASKLOOM_DATA_DIR=str(tmp_path / "data"))
    done = run_taskctl(env, tmp_path, "--json", "loop", "install", "--supervisor", supervisor, "--with-hub",
                       "--agent", "worker-1", "--on-wake", "true", "--dry-run", "--dir", str(tmp_path / "units"))
    units = {unit["role"]: unit["text"] for unit in json.loads(done.stdout)["data"]["units"]}
    for role in ("board", "hub"):
        if supervisor == "systemd":
            assert "\nUMask=0077\n" in units[role], units[role]
        else:
            assert "<key>Umask</key>\n\t<integer>63</integer>" in units[role], units[role]
    # The subscriber's own umask is set by the subscriber; its unit leaves the on-wake command the user's.
    assert "UMask" not in units["subscriber"] and "Umask" not in units["subscriber"]
