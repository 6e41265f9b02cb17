"""What the bench scripts share: the board and hub as subprocesses, waiting on their files, a
follower of the board's event stream and one of the hub, and the event loop a bench runs on."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import orjson

from shared import hub_protocol as hp
from shared.sse import SSEMessage, SSEParser

T = TypeVar("T")
BIN = Path(sys.executable).parent
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
#: How long a board or hub may take to write its pointer, and to exit on SIGTERM before it is killed.
START_SECONDS = 60.0
STOP_SECONDS = 60.0


def wait_for(what: str, check: Any, timeout: float = 30.0) -> Any:
    """Poll ``check`` until it returns something truthy; benches are scripts, not tests."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)  # polling a file another process writes
    raise RuntimeError(f"timed out waiting for {what}")


def read_json(path: Path) -> dict[str, Any] | None:
    """A JSON file another process writes atomically, or None while it is missing."""
    try:
        found: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return found


def isolated_env(folder: Path) -> dict[str, str]:
    """This environment without the caller's Taskloom settings, pointed at ``folder``'s run and data
    directories: what a board and a hub that must find each other there both run with."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TASKLOOM_")}
    env.update(TASKLOOM_RUNTIME_DIR=str(folder / "run"), TASKLOOM_DATA_DIR=str(folder / "data"))
    return env


@dataclass
class Service:
    """A ``taskd`` or ``taskhub`` subprocess, with what the benches read off it in /proc (Linux)."""

    process: subprocess.Popen[bytes]

    def cpu_seconds(self) -> float:
        """user + system CPU the process has used so far."""
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS

    def memory_kib(self) -> dict[str, int]:
        status = Path(f"/proc/{self.process.pid}/status").read_text().splitlines()
        return {line.split(":")[0]: int(line.split()[1]) for line in status if line.startswith(("VmRSS", "VmHWM"))}

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it is still running after ``STOP_SECONDS``."""
        if self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(STOP_SECONDS)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@dataclass
class Board(Service):
    url: str
    token: str
    data_dir: Path


#: The tree these benches belong to. The venv's console scripts import ``services`` from wherever
#: the package was installed (an editable install of another checkout, say); putting this tree
#: first on the services' path makes a bench measure the code it was run from.
TREE = Path(__file__).resolve().parent.parent


def _spawn(command: list[str], env: Mapping[str, str], log: Path, *, keep_stdout: bool) -> subprocess.Popen[bytes]:
    path = os.pathsep.join(p for p in (str(TREE), env.get("PYTHONPATH", "")) if p)
    # Appended to, so a service restarted in the same folder keeps its earlier lines.
    with open(log, "ab") as out:
        return subprocess.Popen(command, env={**env, "PYTHONPATH": path}, stdin=subprocess.DEVNULL,
                                stdout=out if keep_stdout else subprocess.DEVNULL, stderr=out)


def _await_pointer(name: str, process: subprocess.Popen[bytes], pointer: Path, log: Path,
                   ready: Callable[[dict[str, Any]], T | None]) -> T:
    """What ``ready`` makes of the service's pointer once it names this process; the log if it exits."""

    def check() -> T | None:
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited: {log.read_text()}")
        found = read_json(pointer)
        return ready(found) if found is not None and found.get("pid") == process.pid else None

    try:
        started: T = wait_for(f"{name}'s pointer", check, timeout=START_SECONDS)
    except BaseException:
        process.kill()
        process.wait()
        raise
    return started


def start_board(folder: Path, *args: str, env: Mapping[str, str] | None = None, keep_stdout: bool = False) -> Board:
    """``taskd serve`` on a free loopback port with ``folder``'s data and run directories, once its
    pointer names it. ``env`` defaults to this process's environment; ``keep_stdout`` puts the
    board's log lines (stdout) into ``folder/taskd.log`` beside its stderr, else they are dropped."""
    data_dir, runtime, log = folder / "data", folder / "run", folder / "taskd.log"
    folder.mkdir(parents=True, exist_ok=True)
    env = {**(os.environ if env is None else env), "TASKLOOM_RUNTIME_DIR": str(runtime),
           "TASKLOOM_DATA_DIR": str(data_dir)}
    process = _spawn([str(BIN / "taskd"), "serve", "--port", "0", "--data-dir", str(data_dir), *args],
                     env, log, keep_stdout=keep_stdout)

    def ready(pointer: dict[str, Any]) -> Board | None:
        try:
            token = (data_dir / "token").read_text().strip()
        except OSError:
            return None
        return Board(process, pointer["url"], token, data_dir)

    return _await_pointer("taskd", process, runtime / "board.json", log, ready)


def start_hub(folder: Path, env: Mapping[str, str], url: str, token: str, *args: str) -> tuple[Service, dict[str, Any]]:
    """``taskhub serve`` for the board at ``url`` (never idling out), and its pointer once written;
    ``env`` is the board's (``isolated_env``), so the hub writes its pointer in ``folder/run``."""
    log = folder / "taskhub.err"
    process = _spawn([str(BIN / "taskhub"), "serve", "--board", url, "--idle-exit", "0", *args],
                     {**env, "TASKLOOM_TOKEN": token}, log, keep_stdout=False)
    pointer = _await_pointer("taskhub", process, folder / "run" / f"hub-{hp.hub_key(url, token)}.json", log,
                             lambda found: found)
    return Service(process), pointer


#: Linux's ``SO_TIMESTAMPNS`` (socket(7)), which Python's socket module does not name; the
#: ancillary message it adds to every read has the same number.
_SO_TIMESTAMPNS = 35


class StampedChunks:
    """A consumer's socket, read with the kernel's receive timestamp of every chunk (Linux
    ``SO_TIMESTAMPNS``; elsewhere the clock when the loop reads it).

    The benches read many streams in one process, and every consumer's parsing takes that
    process's loop time. The kernel stamps a segment when it reaches the socket, so a stamp is
    when the bytes reached this consumer, whatever the other consumers (or the writer) cost
    this loop: as if each consumer had a process of its own. Stamps are on ``perf_counter``'s
    scale (converted at each read, so a wall clock being slewed does not drift them).
    """

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.chunks: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()
        self._kernel_stamps = sys.platform == "linux"
        if self._kernel_stamps:
            sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(sock.fileno(), self._readable)

    def _readable(self) -> None:
        while True:
            try:
                data, ancillary, _, _ = self.sock.recvmsg(1 << 16, 64)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                data, ancillary = b"", []
            stamp = time.perf_counter()
            for level, kind, value in ancillary:
                if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPNS and len(value) >= 16:
                    seconds, nanoseconds = struct.unpack("qq", value[:16])
                    stamp = seconds + nanoseconds / 1e9 - (time.time() - time.perf_counter())
            self.chunks.put_nowait((stamp, data))
            if not data:
                self._loop.remove_reader(self.sock.fileno())
                return

    def write(self, data: bytes) -> None:
        self.sock.sendall(data)  # a request of a few hundred bytes: the send buffer takes it

    def close(self) -> None:
        if self.sock.fileno() >= 0:
            self._loop.remove_reader(self.sock.fileno())
        self.sock.close()


async def stamped_connection(host: str, port: int) -> StampedChunks:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setblocking(False)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    await asyncio.get_running_loop().sock_connect(sock, (host, port))
    return StampedChunks(sock)


def dechunk(buffer: bytearray) -> tuple[bytes, bool]:
    """The payload of every complete HTTP/1.1 chunk at the head of ``buffer`` (consumed), and
    whether the last chunk (size 0) was among them."""
    out = bytearray()
    while True:
        eol = buffer.find(b"\r\n")
        if eol < 0:
            return bytes(out), False
        size = int(bytes(buffer[:eol]).split(b";")[0], 16)
        if len(buffer) < eol + 2 + size + 2:
            return bytes(out), False
        out += buffer[eol + 2 : eol + 2 + size]
        del buffer[: eol + 2 + size + 2]
        if size == 0:
            return bytes(out), True


async def follow_board(url: str, token: str, opened: asyncio.Event,
                       on_message: Callable[[str | None, str, float], None]) -> None:
    """Follow the board's ``/api/v1/events`` from now on, setting ``opened`` once it answers (or
    fails to: whoever waits for it must not wait forever; the failure is this task's exception);
    every message with data goes to ``on_message`` as its event name (None for an activity frame),
    its data and the ``perf_counter`` at which its chunk reached this process (``StampedChunks``).

    A plain HTTP/1.1 request on a stamped socket rather than aiohttp's client, so the direct
    stream is read exactly as ``follow_hub`` reads the hub."""
    parts = urlsplit(url)
    try:
        stream = await stamped_connection(parts.hostname or "127.0.0.1", parts.port or 80)
        stream.write(f"GET {parts.path}/api/v1/events HTTP/1.1\r\nHost: {parts.netloc}\r\n"
                        f"Authorization: Bearer {token}\r\nAccept: text/event-stream\r\n\r\n".encode())
        head = bytearray()
        while b"\r\n\r\n" not in head:
            _, chunk = await stream.chunks.get()
            if not chunk:
                raise ConnectionError(f"the board closed the stream before answering: {bytes(head)!r}")
            head += chunk
    finally:
        opened.set()
    try:
        header, _, body = bytes(head).partition(b"\r\n\r\n")
        status = header.split(b"\r\n", 1)[0]
        assert status.split()[1] == b"200", header
        chunked = b"transfer-encoding: chunked" in header.lower()
        pending = bytearray(body)
        parser = SSEParser()
        arrived = time.perf_counter()
        while True:
            if chunked:
                data, ended = dechunk(pending)
            else:
                data, ended = bytes(pending), False
                pending.clear()
            for item in parser.feed(data):
                if isinstance(item, SSEMessage) and item.data:
                    on_message(item.event, item.data, arrived)
            if ended:
                return
            arrived, chunk = await stream.chunks.get()
            if not chunk:
                return
            pending += chunk
    finally:
        stream.close()


async def hub_session(port: int, token: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=4 << 20)
    writer.write(orjson.dumps(hp.hello(token)) + b"\n")
    welcome = orjson.loads(await reader.readline())
    assert welcome["type"] == "welcome", welcome
    return reader, writer


async def follow_hub(port: int, token: str, opened: asyncio.Event,
                     on_message: Callable[[dict[str, Any], float], None]) -> None:
    """Follow the hub from now on, setting ``opened`` at its ``open``; every other message goes to
    ``on_message`` with the ``perf_counter`` at which its chunk reached this process
    (``StampedChunks``)."""
    stream = await stamped_connection("127.0.0.1", port)
    stream.write(orjson.dumps(hp.hello(token)) + b"\n" + orjson.dumps(hp.follow(idle_ms=0)) + b"\n")
    tail = b""
    try:
        # Whole chunks split by hand: the bench client must cost less than what it measures.
        while True:
            arrived, chunk = await stream.chunks.get()
            if not chunk:
                return
            *lines, tail = (tail + chunk).split(b"\n")
            for line in lines:
                message = orjson.loads(line)
                if message["type"] == "welcome":
                    continue
                assert message["type"] != "error", message  # the hello was refused
                if message["type"] == "open":
                    opened.set()
                else:
                    on_message(message, arrived)
    finally:
        stream.close()


async def cancel_all(tasks: list[asyncio.Task[Any]]) -> None:
    """Stop the followers a bench started and wait until they are gone (their errors are theirs)."""
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def run_async(main: Coroutine[Any, Any, T]) -> T:
    """``main`` on uvloop where it is installed (as the services run), else on asyncio's loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    return uvloop.run(main)
