"""The hub's files: owner-only modes, the owner lock, pid liveness (services/hub/pointer.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from services.hub.pointer import (
    HubFiles,
    OwnerLock,
    pid_alive,
    read_lock_pid,
    read_pointer,
    remove_pointer_if_mine,
    write_json_atomic,
)
from tests.support.waiting import wait_until


def test_pointer_is_owner_only_and_removed_only_by_its_owner(tmp_path: Path) -> None:
    files = HubFiles(tmp_path / "run", "k1")
    write_json_atomic(files.pointer, {"pid": 123, "port": 4})
    assert oct(files.pointer.stat().st_mode & 0o777) == "0o600"
    assert oct(files.runtime.stat().st_mode & 0o777) == "0o700"
    assert read_pointer(files) == {"pid": 123, "port": 4}
    remove_pointer_if_mine(files, 999)
    assert files.pointer.exists()
    remove_pointer_if_mine(files, 123)
    assert not files.pointer.exists()


def test_a_torn_pointer_reads_as_none(tmp_path: Path) -> None:
    files = HubFiles(tmp_path, "k1")
    files.pointer.write_text('{"pid": 12, "po')
    assert read_pointer(files) is None
    files.pointer.write_text('{"pid": "12", "port": 4}')
    assert read_pointer(files) is None


def test_the_owner_lock_is_exclusive_and_names_its_holder(tmp_path: Path) -> None:
    files = HubFiles(tmp_path / "run", "k1")
    first = OwnerLock.try_acquire(files, role="starter")
    assert first is not None and read_lock_pid(files) == os.getpid()
    assert OwnerLock.try_acquire(files, role="starter") is None  # another open file description
    first.release()
    files.lock.write_text('{"pid": 4242}')
    again = OwnerLock.try_acquire(files, role="hub")
    assert again is not None and again.previous_pid == 4242 and read_lock_pid(files) == os.getpid()
    assert oct(files.lock.stat().st_mode & 0o777) == "0o600"
    again.release()


def test_a_zombie_is_not_alive() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    # Not reaped yet: the kernel keeps a zombie, which must not count as a running hub.
    def zombie() -> bool:
        return Path(f"/proc/{child.pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z"

    wait_until(zombie, what="the child to exit")
    assert not pid_alive(child.pid)
    child.wait()
    assert not pid_alive(child.pid)
    assert pid_alive(os.getpid())
