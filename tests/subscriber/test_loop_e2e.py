"""``taskctl loop subscribe`` as a supervisor runs it: real taskd, real hub, real subscriber process.

The ``--on-wake`` command appends one JSON line per turn (its start time and its environment) to a
file; the tests read that file and the subscriber's state file, never its internals.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from services.hub.pointer import HubFiles, OwnerLock, pid_alive, read_pointer
from shared import hub_protocol as hp
from tests.support.board import VENV_BIN, BoardClient, TaskdProcess
from tests.support.waiting import async_wait_until, wait_until

TASKCTL = str(VENV_BIN / "taskctl")
TASKHUB = str(VENV_BIN / "taskhub")
API = "/api/v1"
OWN_AGENT = "worker-1"
#: One JSON line per turn: when the command started (wall clock, ns) and the wake it was given.
ON_WAKE = (
    "printf '{\"ns\": %s, \"revision\": %s, \"events\": \"%s\"}\\n' "
    "\"$(date +%s%N)\" \"$TASKLOOM_WAKE_REVISION\" \"$TASKLOOM_WAKE_EVENTS\" >> \"$WAKES_FILE\""
)
#: Short intervals for everything but the debounce, which stays at its 300 ms default.
FAST_ARGS = ("--min-interval", "0", "--lock-retry", "0.3", "--state-flush", "0.05", "--stop-grace", "2")


def date_has_nanoseconds() -> bool:
    done = subprocess.run(["date", "+%N"], check=False, capture_output=True, text=True)
    return done.returncode == 0 and done.stdout.strip().isdigit()


@dataclass
class SubscriberProcess:
    """One ``taskctl loop subscribe`` and the files it shares with the test."""

    dir: Path
    taskd: TaskdProcess
    process: asyncio.subprocess.Process | None = None
    hub_pids: set[int] = field(default_factory=set)
    #: Turns that ran before ``ready``: a rescan turn if the hub reached the board after we did.
    skip: int = 0

    @property
    def state_dir(self) -> Path:
        return self.dir / "loop"

    @property
    def wakes_file(self) -> Path:
        return self.dir / "wakes.jsonl"

    @property
    def log(self) -> Path:
        return self.dir / "subscriber.log"

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("TASKLOOM_", "XDG_"))}
        env.update(
            TASKLOOM_RUNTIME_DIR=str(self.taskd.runtime_dir),
            TASKLOOM_DATA_DIR=str(self.taskd.data_dir),
            TASKLOOM_NO_AUTOSTART="1",
            TASKLOOM_HUB_RECONNECT_MIN="0.05",
            TASKLOOM_HUB_RECONNECT_MAX="0.3",
            TASKLOOM_HUB_IDLE_EXIT="30",  # a hub left behind by a failed test goes away on its own
            TASKLOOM_HUB_HEARTBEAT="1",
            WAKES_FILE=str(self.wakes_file),
        )
        return env

    def write_pool(self, pids: list[int]) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        sessions = {"version": 1, "sessions": [{"pid": pid, "agent": OWN_AGENT} for pid in pids]}
        (self.state_dir / "sessions.state.json").write_text(json.dumps(sessions))

    async def start(self, *args: str) -> None:
        with open(self.log, "ab") as log:
            self.process = await asyncio.create_subprocess_exec(
                TASKCTL, "loop", "subscribe", "--url", self.taskd.url, "--agent", OWN_AGENT, "--on-wake", ON_WAKE,
                "--state-dir", str(self.state_dir), *FAST_ARGS, *args,
                env=self.env(), stdin=subprocess.DEVNULL, stdout=log, stderr=log,
            )

    def state(self) -> dict[str, Any]:
        try:
            return json.loads((self.state_dir / "subscribe.state.json").read_text())
        except (OSError, ValueError):
            return {}

    async def wait_state(self, predicate: Any, what: str, timeout: float = 20.0) -> dict[str, Any]:
        async def check() -> dict[str, Any] | None:
            assert self.process is not None
            if self.process.returncode is not None:
                raise AssertionError(f"the subscriber exited with {self.process.returncode}: {self.log.read_text()}")
            state = self.state()
            return state if state and predicate(state) else None

        try:
            return await async_wait_until(check, timeout=timeout, what=what)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; state {self.state()}\n{self.log_tail()}") from None

    def wakes(self) -> list[dict[str, Any]]:
        try:
            lines = self.wakes_file.read_text().splitlines()
        except FileNotFoundError:
            return []
        return [json.loads(line) for line in lines[self.skip:]]

    async def ready(self) -> None:
        """Streaming, knowing the board's head, with nothing pending: later writes are all seen.

        A subscriber that reaches the hub before the hub reaches the board learns the head late
        and runs one rescan turn for it; that turn is not the test's business.
        """
        await self.wait_state(
            lambda s: s.get("state") == "streaming" and isinstance(s.get("revision"), int)
            and not s.get("pending") and not s.get("turn_running"),
            "the subscriber to stream from a known head",
        )
        self.skip += len(self.wakes())

    async def wait_wakes(self, count: int, timeout: float = 10.0) -> list[dict[str, Any]]:
        async def enough() -> list[dict[str, Any]] | None:
            found = self.wakes()
            assert len(found) <= count, f"more turns than expected: {found}"
            return found if len(found) == count else None

        try:
            return await async_wait_until(enough, timeout=timeout, interval=0.002, what=f"{count} turn(s)")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; turns so far {self.wakes()}; state {self.state()}\n{self.log_tail()}") from None

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text().splitlines()[-lines:])
        except OSError:
            return "(no log)"

    async def settled(self, revision: int) -> None:
        """Every event up to ``revision`` was classified and no turn is pending or running."""
        await self.wait_state(
            lambda s: (s.get("revision") or 0) >= revision and not s.get("pending") and not s.get("turn_running"),
            f"the subscriber to settle at revision {revision}",
        )

    def hub_files(self) -> HubFiles:
        return HubFiles(self.taskd.runtime_dir, hp.hub_key(self.taskd.url, self.taskd.token))

    def hub_pid(self) -> int | None:
        pointer = read_pointer(self.hub_files())
        if pointer is None:
            return None
        self.hub_pids.add(pointer["pid"])
        return pointer["pid"]

    async def terminate(self) -> int:
        assert self.process is not None
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGTERM)
        return await asyncio.wait_for(self.process.wait(), 20)

    @classmethod
    @asynccontextmanager
    async def with_this_pool(cls, folder: Path, taskd: TaskdProcess) -> AsyncIterator[SubscriberProcess]:
        """A subscriber (not started yet) whose resident pool is this test process, alive for as
        long as the test runs; cleaned up, with its hubs, on the way out."""
        process = cls(folder, taskd)
        process.dir.mkdir()
        process.write_pool([os.getpid()])
        try:
            yield process
        finally:
            await process.cleanup()

    async def cleanup(self) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.kill()
            await self.process.wait()
        self.hub_pid()
        for pid in self.hub_pids:
            if pid_alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
async def board(taskd: TaskdProcess) -> AsyncIterator[tuple[TaskdProcess, BoardClient]]:
    taskd.start()
    async with aiohttp.ClientSession() as session:
        yield taskd, BoardClient(taskd.url, taskd.token, session)


@pytest.fixture
async def subscriber(board: tuple[TaskdProcess, BoardClient], tmp_path: Path) -> AsyncIterator[SubscriberProcess]:
    async with SubscriberProcess.with_this_pool(tmp_path / "sub", board[0]) as process:
        yield process


async def head(client: BoardClient) -> int:
    return (await client.get(f"{API}/meta")).body["revision"]


def activity_rows(data_dir: Path) -> list[tuple[str, str, str]]:
    with closing(sqlite3.connect(data_dir / "board.sqlite", timeout=10)) as conn:
        return [tuple(row) for row in conn.execute("SELECT actor_kind, actor_id, event FROM task_activities ORDER BY id")]


def status(sub: SubscriberProcess) -> subprocess.CompletedProcess[str]:
    return subprocess.run([TASKCTL, "loop", "status", "--state-dir", str(sub.state_dir)],
                          check=False, capture_output=True, text=True, env=sub.env(), timeout=30)


async def test_the_loop_wakes_on_work_only_and_survives_a_killed_hub(
    board: tuple[TaskdProcess, BoardClient], subscriber: SubscriberProcess
) -> None:
    assert date_has_nanoseconds(), "needs GNU date +%N (coreutils) to time the command's start"
    taskd, client = board
    await subscriber.start()
    await subscriber.ready()
    running = status(subscriber)
    assert running.returncode == 0 and running.stdout.startswith("streaming (pid "), running

    # A second subscriber on the same state directory would wake the supervisor twice: refused.
    twin = subprocess.run(
        [TASKCTL, "loop", "subscribe", "--url", taskd.url, "--agent", "other", "--on-wake", "true",
         "--state-dir", str(subscriber.state_dir)],
        check=False, capture_output=True, text=True, env=subscriber.env(), timeout=30,
    )
    assert twin.returncode == 1 and "SUBSCRIBER_RUNNING" in twin.stderr

    # 1. A human creates a task: one turn, within a second of the write.
    assert (await client.post(f"{API}/projects", {"id": "demo", "name": "Demo"})).status == 201
    before_write = time.time_ns()
    created = await client.post(f"{API}/tasks", {"project": "demo", "title": "Wire the loop"})
    assert created.status == 201
    task = created.body
    [wake] = await subscriber.wait_wakes(1)
    latency = (wake["ns"] - before_write) / 1e9
    print(f"\nhuman write -> --on-wake started: {latency * 1000:.0f} ms (debounce 300 ms)")
    assert latency < 1.0
    assert wake["revision"] == await head(client) and wake["events"] == "task_created"

    # 2. The loop's own agent claims and heartbeats: no turn. A human title edit (not work either)
    #    is the marker that everything before it has been classified.
    worker = client.as_actor("claude", OWN_AGENT)
    assert (await worker.post(f"{API}/tasks/{task['id']}/claim")).status == 200
    assert (await worker.post(f"{API}/tasks/{task['id']}/heartbeat")).status == 200
    assert (await client.patch(f"{API}/tasks/{task['id']}", {"title": "Wire the loop, really"})).status == 200
    await subscriber.settled(await head(client))
    assert len(subscriber.wakes()) == 1

    # 3. The worker asks (a handoff: one turn), a human answers (one turn: comment + resume).
    assert (await worker.post(f"{API}/tasks/{task['id']}/ask", {"body": "Which port?"})).status == 200
    assert (await subscriber.wait_wakes(2))[1]["events"] == "comment_added"
    await subscriber.settled(await head(client))
    assert (await client.post(f"{API}/tasks/{task['id']}/comments", {"body": "7431"})).status == 201
    answered = (await subscriber.wait_wakes(3))[2]
    assert answered["revision"] == await head(client) and answered["events"] == "comment_added,task_resumed"

    # 4. The hub is killed while the subscriber is frozen (SIGSTOP), so the test can take the
    #    hub's owner lock before the subscriber's ladder starts a new hub, and write a task while
    #    no hub runs. Thawed, the subscriber reports reconnecting until the lock is let go.
    hub_pid = subscriber.hub_pid()
    assert hub_pid is not None and subscriber.process is not None
    subscriber.process.send_signal(signal.SIGSTOP)
    try:
        os.kill(hub_pid, signal.SIGKILL)
        lock = wait_until(lambda: OwnerLock.try_acquire(subscriber.hub_files(), role="test"), timeout=10,
                          what="the dead hub's owner lock")
    finally:
        subscriber.process.send_signal(signal.SIGCONT)
    try:
        meanwhile = await client.post(f"{API}/tasks", {"project": "demo", "title": "Written while the hub is down"})
        assert meanwhile.status == 201
        written = await head(client)
        await subscriber.wait_state(lambda s: s.get("state") == "reconnecting", "the subscriber to report reconnecting")
        assert status(subscriber).stdout.startswith("reconnecting")
    finally:
        lock.release()
    await subscriber.wait_state(lambda s: s.get("state") == "streaming", "the subscriber to resume")
    resumed = (await subscriber.wait_wakes(4))[3]
    # The new hub's ring starts at the board's head, past our cursor: a reset, i.e. a rescan turn.
    assert resumed["revision"] >= written and "reset" in resumed["events"].split(",")
    assert subscriber.hub_pid() not in (None, hub_pid)

    # 5. SIGTERM: a clean stop, a final state, `loop status` says not running (exit 3).
    assert await subscriber.terminate() == 0
    assert subscriber.state()["state"] == "stopped"
    stopped = status(subscriber)
    assert stopped.returncode == 3 and stopped.stdout.strip() == "not running"

    # 6. Work written while it was stopped wakes it when it starts again: it resumes after the
    #    revision its state file kept, and the hub still holds that stretch in its ring.
    offline = await client.post(f"{API}/tasks", {"project": "demo", "title": "Written while stopped"})
    assert offline.status == 201
    await subscriber.start()
    missed = (await subscriber.wait_wakes(5))[4]
    assert missed == {"ns": missed["ns"], "revision": await head(client), "events": "task_created"}
    assert await subscriber.terminate() == 0

    # It never wrote to the board: every row is the test's own.
    assert {(kind, actor) for kind, actor, _ in activity_rows(taskd.data_dir)} == {("human", "ann"), ("claude", OWN_AGENT)}
    log = subscriber.log.read_text()
    assert all(json.loads(line)["level"] for line in log.splitlines())  # JSON lines when not a TTY


async def test_with_no_start_hub_it_waits_for_a_supervised_hub(
    board: tuple[TaskdProcess, BoardClient], subscriber: SubscriberProcess
) -> None:
    taskd, client = board
    await subscriber.start("--no-start-hub", "--reconnect-min", "0.1", "--reconnect-max", "0.2")
    await subscriber.wait_state(lambda s: s.get("state") == "reconnecting" and s.get("reconnects", 0) >= 2,
                                "the subscriber to wait for a hub")
    assert subscriber.hub_pid() is None  # it did not start one
    env = {**subscriber.env(), "TASKLOOM_TOKEN": taskd.token}
    with open(subscriber.dir / "taskhub.log", "ab") as log:
        hub = subprocess.Popen([TASKHUB, "serve", "--board", taskd.url, "--idle-exit", "0"],
                               env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    subscriber.hub_pids.add(hub.pid)
    try:
        await subscriber.ready()
        assert (await client.post(f"{API}/projects", {"id": "demo", "name": "Demo"})).status == 201
        assert (await client.post(f"{API}/tasks", {"project": "demo", "title": "Supervised"})).status == 201
        [wake] = await subscriber.wait_wakes(1)
        assert wake["events"] == "task_created"
        assert await subscriber.terminate() == 0
    finally:
        hub.terminate()
        hub.wait(20)


# -- refusals -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def quiet_board(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TaskdProcess]:
    root = tmp_path_factory.mktemp("taskd")
    process = TaskdProcess(data_dir=root / "data", runtime_dir=root / "run", log_path=root / "taskd.log")
    process.start()
    yield process
    process.stop()


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (("--on-wake", "true"), 2, "--agent"),
        (("--agent", " , ", "--on-wake", "true"), 2, "at least one agent"),
        (("--agent", "w1"), 2, "--on-wake"),
        (("--agent", "w1", "--on-wake", "   "), 2, "must not be empty"),
        (("--agent", "w1", "--director", "w1", "--on-wake", "true"), 2, "director"),
        (("--agent", "w1", "--on-wake", "true", "--debounce", "-1"), 2, "--debounce"),
        (("--agent", "w1", "--on-wake", "true", "--reconnect-min", "0"), 2, "--reconnect-min"),
        (("--agent", "w1", "--on-wake", "true", "--reconnect-min", "5", "--reconnect-max", "1"), 2, "reconnect_max"),
    ],
)
def test_bad_subscribe_input_is_refused_and_writes_nothing(
    quiet_board: TaskdProcess, tmp_path: Path, args: tuple[str, ...], code: int, message: str
) -> None:
    rows_before = activity_rows(quiet_board.data_dir)
    state_dir = tmp_path / "loop"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TASKLOOM_", "XDG_"))}
    env.update(TASKLOOM_RUNTIME_DIR=str(quiet_board.runtime_dir), TASKLOOM_DATA_DIR=str(quiet_board.data_dir),
               TASKLOOM_NO_AUTOSTART="1")
    done = subprocess.run([TASKCTL, "loop", "subscribe", "--url", quiet_board.url, "--state-dir", str(state_dir), *args],
                          check=False, capture_output=True, text=True, env=env, timeout=30)
    assert done.returncode == code, done.stderr
    assert message in done.stderr
    assert not state_dir.exists()
    assert activity_rows(quiet_board.data_dir) == rows_before
    assert not list(quiet_board.runtime_dir.glob("hub-*.json"))  # no hub was started either


def test_subscribe_without_a_token_is_refused_before_anything_starts(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TASKLOOM_", "XDG_"))}
    env.update(TASKLOOM_RUNTIME_DIR=str(tmp_path / "run"), TASKLOOM_DATA_DIR=str(tmp_path / "empty"),
               TASKLOOM_NO_AUTOSTART="1")
    state_dir = tmp_path / "loop"
    done = subprocess.run([TASKCTL, "loop", "subscribe", "--url", "http://127.0.0.1:9", "--agent", "w1",
                           "--on-wake", "true", "--state-dir", str(state_dir)],
                          check=False, capture_output=True, text=True, env=env, timeout=30)
    assert done.returncode == 1 and "UNAUTHORIZED" in done.stderr
    assert not state_dir.exists() and not (tmp_path / "run").exists()


def test_status_of_a_state_dir_nobody_uses_is_not_running(tmp_path: Path) -> None:
    done = subprocess.run([TASKCTL, "--json", "loop", "status", "--state-dir", str(tmp_path)],
                          check=False, capture_output=True, text=True, timeout=30)
    assert done.returncode == 3
    assert json.loads(done.stdout) == {"ok": True, "data": {"running": False, "state": "not running",
                                                             "state_dir": str(tmp_path)}}


async def test_a_token_file_given_to_the_subscriber_is_read_again_after_a_rotation(
    board: tuple[TaskdProcess, BoardClient], subscriber: SubscriberProcess
) -> None:
    """A supervisor that hands the subscriber ``--token-file FILE`` rotates by writing the new
    token there: the subscriber reports ``unauthorized`` once the board refuses the old one, and
    is streaming (and waking) again on its next reconnect after the file changed, without a
    restart. It used to read the file once, at start, and stay unauthorized until restarted."""
    taskd, client = board
    old_token = taskd.token
    token_file = subscriber.dir / "board.token"
    token_file.write_text(old_token + "\n")
    token_file.chmod(0o600)
    await subscriber.start("--token-file", str(token_file))
    await subscriber.ready()

    rotated = subprocess.run([TASKCTL, "--url", taskd.url, "--token-file", str(token_file), "token", "rotate"],
                             check=False, capture_output=True, text=True, env=subscriber.env(), timeout=30)
    assert rotated.returncode == 0, rotated.stderr
    new_token = (taskd.data_dir / "token").read_text().strip()
    assert new_token != old_token
    await subscriber.wait_state(lambda s: s.get("state") == "unauthorized", "the subscriber to hear the refusal")

    token_file.write_text(new_token + "\n")
    await subscriber.wait_state(lambda s: s.get("state") == "streaming", "the subscriber to stream again")
    await subscriber.ready()
    fresh = BoardClient(taskd.url, new_token, client.session)
    assert (await fresh.post(f"{API}/projects", {"id": "demo", "name": "Demo"})).status == 201
    assert (await fresh.post(f"{API}/tasks", {"project": "demo", "title": "After the rotation"})).status == 201
    [wake] = await subscriber.wait_wakes(1)
    assert wake["revision"] == await head(fresh) and wake["events"] == "task_created"
