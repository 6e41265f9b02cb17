"""Real processes for the token-rotation and dead-peer tests: a ``taskd``, ``taskctl``, hubs, raw TCP.

Everything here is what a user has: the CLIs as subprocesses, the files in the runtime directory,
and a bare socket speaking NDJSON to the hub (what ``nc`` does). Nothing of ours is mocked.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from services.hub.pointer import HubFiles, pid_alive, read_pointer
from shared import hub_protocol as hp
from tests.support.board import VENV_BIN, TaskdProcess
from tests.support.waiting import async_wait_until

TASKCTL = str(VENV_BIN / "taskctl")
TASKHUB = str(VENV_BIN / "taskhub")
API = "/api/v1"
OWN_AGENT = "worker-1"
#: One JSON line per continue turn: the wake's revision and event names.
ON_WAKE = (
    "printf '{\"revision\": %s, \"events\": \"%s\"}\\n' "
    "\"$TASKLOOM_WAKE_REVISION\" \"$TASKLOOM_WAKE_EVENTS\" >> \"$WAKES_FILE\""
)
#: Short subscriber intervals (the debounce stays at its 300 ms default).
FAST_LOOP = ("--min-interval", "0", "--lock-retry", "0.3", "--state-flush", "0.05", "--stop-grace", "2",
             "--reconnect-min", "0.05", "--reconnect-max", "0.3")


def clean_env(taskd: TaskdProcess, **extra: str) -> dict[str, str]:
    """The environment a user's shell would have for this board: no stray TASKLOOM_/XDG_ values."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TASKLOOM_", "XDG_"))}
    env.update(
        TASKLOOM_RUNTIME_DIR=str(taskd.runtime_dir),
        TASKLOOM_DATA_DIR=str(taskd.data_dir),
        TASKLOOM_NO_AUTOSTART="1",
        TASKLOOM_HUB_RECONNECT_MIN="0.05",
        TASKLOOM_HUB_RECONNECT_MAX="0.3",
        TASKLOOM_HUB_IDLE_EXIT="30",  # a hub left behind by a failed test goes away on its own
        TASKLOOM_HUB_HEARTBEAT="1",
    )
    env.update(extra)
    return env


async def taskctl(env: dict[str, str], *args: str, timeout: float = 60.0) -> tuple[int, Any, str]:
    """Run ``taskctl ARGS``; returns (exit code, stdout parsed as JSON when it is, stderr)."""
    process = await asyncio.create_subprocess_exec(
        TASKCTL, *args, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout)
    text = out.decode()
    try:
        parsed: Any = json.loads(text)
    except ValueError:
        parsed = text
    assert process.returncode is not None
    return process.returncode, parsed, err.decode()


def hub_files(taskd: TaskdProcess, token: str) -> HubFiles:
    return HubFiles(taskd.runtime_dir, hp.hub_key(taskd.url, token))


def hub_processes(board_url: str) -> list[int]:
    """Live ``taskhub`` processes for ``board_url``, found as ``ps`` would (argv names the board)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"serve" in argv and board_url.encode() in argv and any(b"hub" in part for part in argv[:3]):
            if pid_alive(int(entry.name)):
                found.append(int(entry.name))
    return found


def kill_hubs(board_url: str) -> None:
    for pid in hub_processes(board_url):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


async def wait_for_pointer(files: HubFiles, *, timeout: float = 20.0, what: str = "a hub pointer") -> dict[str, Any]:
    async def published() -> dict[str, Any] | None:
        record = read_pointer(files)
        return record if record is not None and pid_alive(record["pid"]) else None

    return await async_wait_until(published, timeout=timeout, what=what)


class Closed(Exception):
    """The hub closed the connection."""


class RawSession:
    """A bare NDJSON client over TCP, as a person with ``nc`` would type it."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def greeted(cls, port: int, token: str) -> RawSession:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=4 << 20)
        session = cls(reader, writer)
        await session.send(hp.hello(token))
        welcome = await session.recv()
        assert welcome["type"] == "welcome", welcome
        return session

    async def send(self, message: dict[str, Any]) -> None:
        self.writer.write(orjson.dumps(message) + b"\n")
        await self.writer.drain()

    async def recv(self, timeout: float = 10.0) -> dict[str, Any]:
        line = await asyncio.wait_for(self.reader.readline(), timeout)
        if not line:
            raise Closed()
        return orjson.loads(line)

    async def recv_until(self, kind: str, *, skip: tuple[str, ...], timeout: float = 10.0) -> dict[str, Any]:
        """The next record of ``kind``; records of the ``skip`` types may come first, nothing else."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            record = await self.recv(max(0.01, deadline - loop.time()))
            if record["type"] == kind:
                return record
            assert record["type"] in skip, f"expected {kind}, got {record}"

    async def at_eof(self, timeout: float = 10.0) -> bool:
        """True once the hub has closed the connection (nothing more may arrive)."""
        try:
            rest = await asyncio.wait_for(self.reader.read(), timeout)
        except (ConnectionError, OSError):
            return True
        assert not rest.strip(), f"more after the last record: {rest[:200]!r}"
        return True

    def close(self) -> None:
        self.writer.close()


@dataclass
class Subscriber:
    """One ``taskctl loop subscribe`` process and the files it shares with the test."""

    dir: Path
    env: dict[str, str]
    url: str
    process: asyncio.subprocess.Process | None = None
    skip: int = 0
    extra: tuple[str, ...] = field(default_factory=tuple)

    @property
    def state_dir(self) -> Path:
        return self.dir / "loop"

    @property
    def wakes_file(self) -> Path:
        return self.dir / "wakes.jsonl"

    @property
    def log(self) -> Path:
        return self.dir / "subscriber.log"

    async def start(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        # A live resident pool: this test process stands in for the agent sessions.
        pool = {"version": 1, "sessions": [{"pid": os.getpid(), "agent": OWN_AGENT}]}
        (self.state_dir / "sessions.state.json").write_text(json.dumps(pool))
        with open(self.log, "ab") as log:
            self.process = await asyncio.create_subprocess_exec(
                TASKCTL, "loop", "subscribe", "--url", self.url, "--agent", OWN_AGENT, "--on-wake", ON_WAKE,
                "--state-dir", str(self.state_dir), *FAST_LOOP, *self.extra,
                env={**self.env, "WAKES_FILE": str(self.wakes_file)},
                stdin=subprocess.DEVNULL, stdout=log, stderr=log,
            )

    def state(self) -> dict[str, Any]:
        try:
            return json.loads((self.state_dir / "subscribe.state.json").read_text())
        except (OSError, ValueError):
            return {}

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text().splitlines()[-lines:])
        except OSError:
            return "(no log)"

    async def wait_state(self, predicate: Any, what: str, timeout: float = 20.0) -> dict[str, Any]:
        async def check() -> dict[str, Any] | None:
            assert self.process is not None
            if self.process.returncode is not None:
                raise AssertionError(f"the subscriber exited with {self.process.returncode}: {self.log_tail()}")
            state = self.state()
            return state if state and predicate(state) else None

        try:
            return await async_wait_until(check, timeout=timeout, what=what)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; state {self.state()}\n{self.log_tail()}") from None

    async def ready(self) -> None:
        """Streaming from a known head with nothing pending; turns so far are not the test's."""
        await self.wait_state(
            lambda s: s.get("state") == "streaming" and isinstance(s.get("revision"), int)
            and not s.get("pending") and not s.get("turn_running"),
            "the subscriber to stream from a known head",
        )
        self.skip = len(self.all_wakes())

    def all_wakes(self) -> list[dict[str, Any]]:
        try:
            return [json.loads(line) for line in self.wakes_file.read_text().splitlines()]
        except FileNotFoundError:
            return []

    def wakes(self) -> list[dict[str, Any]]:
        return self.all_wakes()[self.skip:]

    async def wait_wake(self, revision: int, *, timeout: float) -> dict[str, Any]:
        """The first turn that covers ``revision`` (its wake revision is at least that)."""
        async def covered() -> dict[str, Any] | None:
            return next((wake for wake in self.wakes() if int(wake["revision"]) >= revision), None)

        try:
            return await async_wait_until(covered, timeout=timeout, interval=0.01,
                                          what=f"a turn covering revision {revision}")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; turns {self.wakes()}; state {self.state()}\n{self.log_tail()}") from None

    async def cleanup(self) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.kill()
            await self.process.wait()
