"""A full disk, for real: a size-limited tmpfs filled until the kernel answers ENOSPC.

An attachment upload on a full disk used to answer 500 and leave empty directories under
attachments/; ``taskd serve`` on a full disk died with a traceback. Now the upload is
``503 STORE_UNAVAILABLE`` with nothing left behind and the board keeps serving, and a start that
cannot write says so in one line, exits 1 and leaves the data directory as it found it.

The disks are tests/support/disks.py's: real tmpfs mounts, which need root; a test that cannot
mount fails, it never skips.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiohttp
import pytest

from tests.support.board import API, VENV_BIN, BoardClient, TaskdProcess
from tests.support.disks import fill, tmpfs

from .support_bounds import head


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A fresh, empty 8 MiB tmpfs."""
    with tmpfs(tmp_path / "disk", "8m") as disk:
        yield disk


def snapshot(directory: Path) -> dict[str, str]:
    """Every path under ``directory`` (directories included) and a digest of each file."""
    found: dict[str, str] = {}
    for path in sorted(directory.rglob("*")):
        name = str(path.relative_to(directory))
        found[name] = "dir" if path.is_dir() else hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def without_lock(found: dict[str, str]) -> dict[str, str]:
    return {name: digest for name, digest in found.items() if name != "board.lock"}


def serve(data_dir: Path, runtime: Path, *, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
    """``taskd serve`` as a user runs it; it is expected to end by itself."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("TASKLOOM_")}
    env["TASKLOOM_RUNTIME_DIR"] = str(runtime)
    return subprocess.run(
        [str(VENV_BIN / "taskd"), "serve", "--port", "0", "--data-dir", str(data_dir)],
        env=env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, check=False,
    )


def assert_one_clear_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 1, (done.returncode, done.stderr)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr and "nothing was written" in lines[0], lines[0]
    return lines[0]


# -- attachments ------------------------------------------------------------------------------------


@pytest.fixture
def board_on_small_disk(small_disk: Path, tmp_path: Path) -> Iterator[TaskdProcess]:
    process = TaskdProcess(data_dir=small_disk / "data", runtime_dir=tmp_path / "run", log_path=tmp_path / "taskd.log")
    process.start()
    yield process
    if process.process is not None and process.process.poll() is None:
        process.stop()


@pytest.fixture
async def client(board_on_small_disk: TaskdProcess) -> AsyncIterator[BoardClient]:
    async with aiohttp.ClientSession() as session:
        yield BoardClient(board_on_small_disk.url, board_on_small_disk.token, session)


async def test_an_upload_on_a_full_disk_is_503_and_leaves_nothing(
    board_on_small_disk: TaskdProcess, client: BoardClient, small_disk: Path
) -> None:
    assert (await client.post(f"{API}/projects", {"id": "demo"})).status == 201
    task = (await client.post(f"{API}/tasks", {"project": "demo", "title": "Attach on a full disk"})).body
    attachments = board_on_small_disk.data_dir / "attachments"
    before = await head(client)
    filler = fill(small_disk)
    data = os.urandom(200_000)

    reply = await client.request(
        "POST", f"{API}/tasks/{task['id']}/attachments?filename=log.bin", data=data,
        headers={"Content-Type": "application/octet-stream"},
    )
    assert reply.status == 503 and reply.error == "STORE_UNAVAILABLE", reply.body
    assert reply.body["error"]["details"]["errno"] == "ENOSPC"
    assert reply.headers["Retry-After"] == "1"
    # Nothing half-written: no blob, no temp file, no empty shard directory, no row.
    assert not attachments.exists() or snapshot(attachments) == {}, snapshot(attachments)
    assert await head(client) == before
    assert (await client.get(f"{API}/tasks/{task['id']}/attachments")).body["items"] == []

    # The board keeps serving while the disk is full...
    assert (await client.get(f"{API}/tasks?limit=10")).status == 200
    assert (await client.get(f"{API}/activities?order=desc&limit=5")).status == 200
    assert board_on_small_disk.process is not None and board_on_small_disk.process.poll() is None
    # ...and once there is room again, the same upload goes through.
    filler.unlink()
    reply = await client.request(
        "POST", f"{API}/tasks/{task['id']}/attachments?filename=log.bin", data=data,
        headers={"Content-Type": "application/octet-stream"},
    )
    assert reply.status == 201, reply.body
    stored = attachments / reply.body["sha256"][:2] / reply.body["sha256"]
    assert stored.read_bytes() == data
    assert [name for name in snapshot(attachments)] == [stored.parent.name, f"{stored.parent.name}/{stored.name}"]


# -- starting --------------------------------------------------------------------------------------------


def test_a_fresh_start_on_a_full_disk_is_one_line_and_leaves_nothing(small_disk: Path, tmp_path: Path) -> None:
    fill(small_disk)
    done = serve(small_disk / "data", tmp_path / "run")
    line = assert_one_clear_line(done)
    assert "no space left on device" in line.lower(), line
    assert snapshot(small_disk) == {"filler": snapshot(small_disk)["filler"]}
    assert not (tmp_path / "run" / "board.json").exists()


def test_a_start_of_an_existing_board_on_a_full_disk_is_one_line_and_changes_nothing(
    small_disk: Path, tmp_path: Path
) -> None:
    board = TaskdProcess(data_dir=small_disk / "data", runtime_dir=tmp_path / "run", log_path=tmp_path / "taskd.log")
    board.start()
    assert board.stop() == 0
    found = snapshot(board.data_dir)
    assert "board.sqlite" in found and "token" in found
    fill(small_disk)
    done = serve(board.data_dir, tmp_path / "run")
    assert_one_clear_line(done)
    # board.lock is the one file every start attempt rewrites on purpose: it names the pid that
    # holds the data dir (services/board/lock.py), and a failed start's pid is harmless there.
    assert without_lock(snapshot(board.data_dir)) == without_lock(found)
    assert (board.data_dir / "board.lock").exists()
    assert not (tmp_path / "run" / "board.json").exists()
