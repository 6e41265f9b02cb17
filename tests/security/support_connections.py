"""``taskd serve`` under a chosen open-file limit, and raw HTTP/1.1 over loopback sockets."""

from __future__ import annotations

import asyncio
import json
import resource
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.board import VENV_BIN, TaskdProcess
from tests.support.waiting import wait_until

#: Small limits keep the tests small: a few hundred sockets exhaust the board.
LOW_NOFILE = 256


@dataclass
class LimitedTaskd(TaskdProcess):
    """``taskd serve`` started with ``RLIMIT_NOFILE`` set to ``nofile`` (soft, hard) in the child."""

    nofile: tuple[int, int] = (LOW_NOFILE, LOW_NOFILE)

    def start(self, *args: str, port: int = 0, timeout: float = 20.0) -> LimitedTaskd:
        pointer = self.runtime_dir / "board.json"
        pointer.unlink(missing_ok=True)
        soft, hard = self.nofile

        def limit_descriptors() -> None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [str(VENV_BIN / "taskd"), "serve", "--port", str(port), "--data-dir", str(self.data_dir), *args],
                env=self.env(),
                stdout=log,
                stderr=log,
                stdin=subprocess.DEVNULL,
                preexec_fn=limit_descriptors,
            )

        def ready() -> str | None:
            assert self.process is not None
            if self.process.poll() is not None:
                raise AssertionError(f"taskd exited with {self.process.returncode}: {self.log_path.read_text()}")
            try:
                record = json.loads(pointer.read_text())
            except (OSError, ValueError):
                return None
            return record["url"] if record.get("pid") == self.process.pid else None

        self.url = wait_until(ready, timeout=timeout, what="taskd to write its pointer")
        return self

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def open_files_limit(self) -> tuple[int, int]:
        """(soft, hard) ``Max open files`` of the running board, read from ``/proc/<pid>/limits``."""
        assert self.process is not None
        for line in Path(f"/proc/{self.process.pid}/limits").read_text().splitlines():
            if line.startswith("Max open files"):
                soft, hard = line.split()[3:5]
                return int(soft), int(hard)
        raise AssertionError("no 'Max open files' line")

    def open_descriptors(self) -> int:
        assert self.process is not None
        return len(list(Path(f"/proc/{self.process.pid}/fd").iterdir()))


def ensure_own_descriptors(needed: int) -> None:
    """The test itself holds ``needed`` sockets at once: raise its own soft limit if it must."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < needed:
        assert hard >= needed, f"the test needs {needed} descriptors; its hard limit is {hard}"
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


async def connect(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), timeout=10)


def request_head(method: str, path: str, *, token: str | None = None, extra: dict[str, str] | None = None) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1"]
    if token is not None:
        lines.append(f"Authorization: Bearer {token}")
    lines += [f"{name}: {value}" for name, value in (extra or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("ascii")


async def read_head(reader: asyncio.StreamReader, *, timeout: float = 10.0) -> tuple[int, dict[str, str]]:
    """The status and headers of one response; raises if the server closes or resets first."""
    raw = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=timeout)
    status_line, *header_lines = raw.decode("latin-1").split("\r\n")
    headers = {}
    for line in header_lines:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    return int(status_line.split()[1]), headers


async def read_reply(reader: asyncio.StreamReader, *, timeout: float = 10.0) -> Reply:
    status, headers = await read_head(reader, timeout=timeout)
    body = await asyncio.wait_for(reader.readexactly(int(headers.get("content-length", "0"))), timeout=timeout)
    return Reply(status, headers, body)


async def get(port: int, path: str, *, token: str | None = None, timeout: float = 10.0) -> Reply:
    reader, writer = await connect(port)
    try:
        writer.write(request_head("GET", path, token=token, extra={"Connection": "close"}))
        return await read_reply(reader, timeout=timeout)
    finally:
        writer.close()


async def closed_by_server(reader: asyncio.StreamReader, *, timeout: float) -> tuple[bytes, float]:
    """Everything the server sent until it closed the connection, and how long that took."""
    started = time.monotonic()
    received = b""
    while True:
        remaining = timeout - (time.monotonic() - started)
        if remaining <= 0:
            raise AssertionError(f"the server kept the connection open for {timeout} s (sent {received!r})")
        try:
            chunk = await asyncio.wait_for(reader.read(65536), timeout=remaining)
        except ConnectionResetError:
            chunk = b""
        except TimeoutError:
            continue
        if not chunk:
            return received, time.monotonic() - started
        received += chunk
