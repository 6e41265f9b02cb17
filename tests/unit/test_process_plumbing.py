"""One suite for every copy of the process plumbing: ``services/{board,hub,subscriber}/process.py``.

The services may not import each other (SPEC §2), so each holds its own copy of liveness, file
locks, logging, signal wiring and the reconnect ladder; this suite runs against each, checks that
the copies stay the same code, that the callers (``taskctl`` included) use them, and that nothing
in ``services/`` or ``taskctl/`` grows its own again. Zombies, locks and deaths are real processes.
"""

from __future__ import annotations

import ast
import asyncio
import importlib
import io
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import structlog

from tests.support.waiting import async_wait_until, wait_until

ROOT = Path(__file__).resolve().parents[2]
COPIES = ("services.board.process", "services.hub.process", "services.subscriber.process")
SECRET = "tl_0123456789abcdef0123456789abcdef"


@pytest.fixture(params=COPIES)
def process(request: pytest.FixtureRequest) -> ModuleType:
    return importlib.import_module(request.param)


@pytest.fixture
def logging_restored() -> Iterator[None]:
    yield
    structlog.reset_defaults()


def _state(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return None


# -- liveness -----------------------------------------------------------------------------------

# Every pid_alive a caller reaches: the three copies, and the names taskctl and the services use.
PID_ALIVE = (
    *(f"{name}:pid_alive" for name in COPIES),
    "taskctl.discovery:pid_alive",
    "services.hub.pointer:pid_alive",
    "services.subscriber.state:pid_alive",
)


def _resolve(spec: str) -> object:
    module, _, attribute = spec.partition(":")
    return getattr(importlib.import_module(module), attribute)


@pytest.mark.parametrize("spec", PID_ALIVE)
def test_a_zombie_is_not_alive(spec: str) -> None:
    pid_alive = _resolve(spec)
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        # Not reaped until child.wait(): the kernel keeps it as a zombie until then.
        wait_until(lambda: _state(child.pid) == "Z", what="the child to become a zombie")
        assert not pid_alive(child.pid)
    finally:
        child.wait()


@pytest.mark.parametrize("spec", PID_ALIVE)
def test_a_dead_pid_and_nonsense_are_not_alive(spec: str) -> None:
    pid_alive = _resolve(spec)
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert not pid_alive(child.pid)
    for nonsense in (0, -1, True, "1", None, 1.5):
        assert not pid_alive(nonsense)
    # Too big for a pid_t (a file someone else wrote): no process, not an OverflowError.
    for too_big in (2**31, 2**63, 10**30):
        assert not pid_alive(too_big)


@pytest.mark.parametrize("spec", PID_ALIVE)
def test_own_pid_and_a_running_child_are_alive(spec: str) -> None:
    pid_alive = _resolve(spec)
    assert pid_alive(os.getpid())
    assert pid_alive(1)  # init: someone else's process is still alive
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        assert pid_alive(child.pid)
    finally:
        child.communicate()


def test_every_caller_uses_a_services_copy() -> None:
    import services.board.process as board
    import services.hub.process as hub
    import services.subscriber.process as subscriber

    assert _resolve("taskctl.discovery:pid_alive") is board.pid_alive
    assert _resolve("services.hub.pointer:pid_alive") is hub.pid_alive
    assert _resolve("services.subscriber.state:pid_alive") is subscriber.pid_alive
    assert _resolve("services.subscriber.turns:pid_alive") is subscriber.pid_alive


# -- file locks ---------------------------------------------------------------------------------


def test_a_lock_is_exclusive_owner_only_and_released_on_close(process: ModuleType, tmp_path: Path) -> None:
    path = tmp_path / "thing.lock"
    fd = process.lock_file(path)
    assert fd is not None
    assert path.stat().st_mode & 0o777 == 0o600
    # Another open file description, even in this process, is refused without waiting.
    assert process.lock_file(path) is None
    other = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    try:
        assert process.try_flock(other) is False
    finally:
        os.close(other)
    os.close(fd)
    again = process.lock_file(path, wait=True)
    assert again is not None
    os.close(again)


def test_a_lock_is_released_when_its_holder_dies(process: ModuleType, tmp_path: Path) -> None:
    path = tmp_path / "thing.lock"
    code = (
        f"import pathlib, sys; from {process.__name__} import lock_file\n"
        "fd = lock_file(pathlib.Path(sys.argv[1]))\n"
        "print('held' if fd is not None else 'busy', flush=True)\n"
        "sys.stdin.read()\n"  # hold it until killed
    )
    holder = subprocess.Popen([sys.executable, "-c", code, str(path)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=ROOT, text=True)
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "held"
        assert process.lock_file(path) is None
        holder.kill()  # SIGKILL: no cleanup of its own runs
        holder.wait(timeout=10)
        fd = process.lock_file(path)
        assert fd is not None
        os.close(fd)
    finally:
        if holder.poll() is None:
            holder.kill()
        holder.wait(timeout=10)


# -- the reconnect ladder -----------------------------------------------------------------------


def test_the_ladder_doubles_from_one_second_to_thirty_and_stays(process: ModuleType) -> None:
    ladder = process.Backoff()
    assert [ladder.next() for _ in range(8)] == [1, 2, 4, 8, 16, 30, 30, 30]
    ladder.reset()
    assert [ladder.next() for _ in range(3)] == [1, 2, 4]


def test_the_ladder_takes_its_bounds_and_refuses_nonsense(process: ModuleType) -> None:
    ladder = process.Backoff(0.25, 1.0)
    assert [ladder.next() for _ in range(5)] == [0.25, 0.5, 1.0, 1.0, 1.0]
    for first, most in ((0, 1), (-1, 1), (2, 1)):
        with pytest.raises(ValueError):
            process.Backoff(first, most)


# -- logging ------------------------------------------------------------------------------------


def test_logging_is_json_off_a_terminal_and_never_prints_the_secret(
    process: ModuleType, logging_restored: None
) -> None:
    out = io.StringIO()
    process.configure_logging(out, secret=SECRET)
    log = structlog.get_logger("test")
    log.info("board_contact", token=SECRET, url=f"http://x/?t={SECRET}")
    log.debug("hidden")
    lines = out.getvalue().splitlines()
    assert len(lines) == 1, "one JSON line, debug filtered out"
    record = json.loads(lines[0])
    assert record["event"] == "board_contact" and record["level"] == "info"
    assert SECRET not in out.getvalue() and "[redacted]" in record["token"]


def test_logging_is_console_lines_on_a_terminal(process: ModuleType, logging_restored: None) -> None:
    controller, terminal = os.openpty()
    stream = os.fdopen(terminal, "w", buffering=1)
    try:
        process.configure_logging(stream, secret=SECRET)
        structlog.get_logger("test").info("board_contact", token=SECRET)
        line = os.read(controller, 4096).decode()
    finally:
        stream.close()
        os.close(controller)
    assert "board_contact" in line and not line.lstrip().startswith("{")
    assert SECRET not in line


def test_logging_can_be_json_on_a_terminal_too(process: ModuleType, logging_restored: None) -> None:
    controller, terminal = os.openpty()
    stream = os.fdopen(terminal, "w", buffering=1)
    try:
        process.configure_logging(stream, json=True)
        structlog.get_logger("test").info("hub_listening")
        line = os.read(controller, 4096).decode()
    finally:
        stream.close()
        os.close(controller)
    assert json.loads(line)["event"] == "hub_listening"


# -- signals ------------------------------------------------------------------------------------


async def test_the_first_signal_stops_and_the_second_forces(process: ModuleType) -> None:
    stops: list[str] = []
    forces: list[str] = []
    with process.ShutdownSignals(stop=lambda: stops.append("stop"), force=lambda: forces.append("force")) as signals:
        os.kill(os.getpid(), signal.SIGTERM)
        await asyncio.wait_for(signals.requested.wait(), 10)
        assert stops == ["stop"] and forces == [] and not signals.forced
        os.kill(os.getpid(), signal.SIGINT)
        await async_wait_until(lambda: _async(bool(forces)), what="the forced path")
        assert stops == ["stop"] and forces == ["force"] and signals.forced
        assert signals.received == [signal.SIGTERM, signal.SIGINT]
    loop = asyncio.get_running_loop()
    # Removed on exit: the loop no longer answers these signals for us.
    assert all(not loop.remove_signal_handler(sig) for sig in process.HANDLED_SIGNALS)


async def _async(value: bool) -> bool:
    return value


def test_the_forced_exit_runs_every_cleanup_and_exits_130(process: ModuleType, tmp_path: Path) -> None:
    mark = tmp_path / "cleaned"
    code = (
        f"import pathlib; from {process.__name__} import exit_forced\n"
        "def broken(): raise OSError('gone')\n"
        f"exit_forced(broken, lambda: pathlib.Path({str(mark)!r}).write_text('yes'))\n"
        "raise SystemExit(0)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, timeout=60)
    assert done.returncode == 130 == process.FORCED_EXIT
    assert mark.read_text() == "yes"


# -- one room per kind of plumbing --------------------------------------------------------------


def _code_after_docstring(name: str) -> str:
    source = (ROOT / Path(*name.split("."))).with_suffix(".py").read_text(encoding="utf-8")
    tree = ast.parse(source)
    first = tree.body[0]
    assert isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant), f"{name} starts with its docstring"
    return "\n".join(source.splitlines()[first.end_lineno:])


def test_the_three_copies_are_the_same_code_apart_from_the_docstring() -> None:
    board, hub, subscriber = (_code_after_docstring(name) for name in COPIES)
    assert board == hub, "services/hub/process.py drifted from services/board/process.py"
    assert board == subscriber, "services/subscriber/process.py drifted from services/board/process.py"


# What only process.py may hold: each would be a second copy of a helper that lives there.
PLUMBING = {
    "pid_alive": re.compile(r"^\s*def pid_alive\("),
    "flock": re.compile(r"\bfcntl\.flock\("),
    "configure_logging": re.compile(r"^\s*def configure_logging\("),
    "signal handlers": re.compile(r"\badd_signal_handler\("),
    "HANDLED_SIGNALS": re.compile(r"^HANDLED_SIGNALS\b"),
    "a doubling ladder": re.compile(r"\*\s*2\s*,\s*\w*(reconnect|max|most)|min\(\s*\w+\s*\*\s*2"),
    "os._exit": re.compile(r"\bos\._exit\("),
}


def test_no_second_copy_of_the_plumbing_in_services_or_taskctl() -> None:
    offenders = []
    for folder in ("services", "taskctl"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path.name == "process.py" and path.parent.name in ("board", "hub", "subscriber"):
                continue
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                for what, pattern in PLUMBING.items():
                    if pattern.search(line):
                        offenders.append(f"{path.relative_to(ROOT)}:{number} {what}: {line.strip()}")
    assert offenders == [], "use the service's process.py"
