"""One suite for every atomic-file writer: the three ``files`` modules and everything that writes through them.

The services may not import each other (SPEC §2), so ``services/{board,hub,subscriber}/files.py``
are deliberate copies; this suite runs against each, checks that they stay the same code, and
checks that nothing in ``services/`` or ``taskctl/`` replaces a file another way. ``os.fsync``
and ``os.replace`` are observed (they are the operating system, not our code).
"""

from __future__ import annotations

import ast
import importlib
import json
import os
import re
import stat
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
COPIES = ("services.board.files", "services.hub.files", "services.subscriber.files")


def _module(name: str) -> ModuleType:
    return importlib.import_module(name)


@pytest.fixture(params=COPIES)
def files(request: pytest.FixtureRequest) -> ModuleType:
    return _module(request.param)


# Every writer, as ``write(path, payload_number)``; the payload is what ``expected`` says the file holds.
def _board(path: Path, n: int) -> None:
    _module("services.board.files").write_atomic(path, f"payload {n}\n".encode())


def _hub_pointer(path: Path, n: int) -> None:
    _module("services.hub.pointer").write_json_atomic(path, {"n": n})


def _hub_brief(path: Path, n: int) -> None:
    _module("services.hub.briefs").write_brief(str(path), f"payload {n}\n".encode())


def _subscriber_state(path: Path, n: int) -> None:
    _module("services.subscriber.state").write_state(path, {"n": n})


def _export_md(path: Path, n: int) -> None:
    _module("taskctl.export_md").write_atomically(path, f"payload {n}\n".encode())


def _unit_file(path: Path, n: int) -> None:
    _module("taskctl.loop_cmd")._write_atomic(path, f"payload {n}\n")


WRITERS: dict[str, tuple[Callable[[Path, int], None], int]] = {
    # name: (writer, the mode the file must end with)
    "board.files": (_board, 0o600),
    "hub.pointer": (_hub_pointer, 0o600),
    "hub.briefs": (_hub_brief, 0o600),
    "subscriber.state": (_subscriber_state, 0o600),
    "taskctl.export md": (_export_md, 0o600),
    "taskctl.loop install": (_unit_file, 0o644),
}


def _holds(path: Path, n: int) -> bool:
    text = path.read_text()
    if text.startswith("{"):
        return json.loads(text).get("n") == n
    return text == f"payload {n}\n"


@pytest.fixture(params=sorted(WRITERS))
def writer(request: pytest.FixtureRequest) -> tuple[Callable[[Path, int], None], int]:
    return WRITERS[request.param]


@pytest.fixture
def fsynced(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The paths (as the kernel names them) of every descriptor passed to ``os.fsync``."""
    seen: list[str] = []
    real = os.fsync

    def record(fd: int) -> None:
        seen.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", record)
    yield seen


# -- the three copies ---------------------------------------------------------------------------


def _code_after_docstring(name: str) -> str:
    source = (ROOT / Path(*name.split("."))).with_suffix(".py").read_text(encoding="utf-8")
    tree = ast.parse(source)
    first = tree.body[0]
    assert isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant), f"{name} starts with its docstring"
    return "\n".join(source.splitlines()[first.end_lineno:])


def test_the_three_copies_are_the_same_code_apart_from_the_docstring() -> None:
    board, hub, subscriber = (_code_after_docstring(name) for name in COPIES)
    assert board == hub, "services/hub/files.py drifted from services/board/files.py"
    assert board == subscriber, "services/subscriber/files.py drifted from services/board/files.py"


def test_nothing_else_in_services_or_taskctl_replaces_a_file_by_hand() -> None:
    pattern = re.compile(r"\bos\.replace\(|\bos\.rename\(|\btempfile\.|\bos\.fsync\(|\bmkstemp\(")
    offenders = []
    for folder in ("services", "taskctl"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path.name == "files.py" and path.parent.name in ("board", "hub", "subscriber"):
                continue
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                code = line.split("#", 1)[0]
                if pattern.search(code):
                    offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert offenders == [], "write through the service's files.write_atomic instead:\n" + "\n".join(offenders)


def test_writes_the_bytes_owner_only_whatever_the_umask(files: ModuleType, tmp_path: Path) -> None:
    target = tmp_path / "deep" / "record.json"
    previous = os.umask(0o000)
    try:
        files.write_atomic(target, b"hello\n")
        files.write_atomic(tmp_path / "shared.txt", b"x", mode=0o644)
    finally:
        os.umask(previous)
    assert target.read_bytes() == b"hello\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "shared.txt").stat().st_mode) == 0o644


def test_an_existing_target_is_replaced_by_a_new_inode(files: ModuleType, tmp_path: Path) -> None:
    target = tmp_path / "token"
    target.write_bytes(b"old\n")
    target.chmod(0o644)
    before = target.stat().st_ino
    with open(target, "rb") as reader:  # a reader holding the old file keeps seeing all of it
        files.write_atomic(target, b"new\n")
        assert reader.read() == b"old\n"
    assert target.read_bytes() == b"new\n"
    assert target.stat().st_ino != before, "replaced by rename, not rewritten in place"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600


def test_temp_names_are_unique_and_beside_the_target(
    files: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    temps: list[str] = []
    real = os.replace

    def record(src: Any, dst: Any) -> None:
        temps.append(str(src))
        real(src, dst)

    monkeypatch.setattr(os, "replace", record)
    target = tmp_path / "board.json"
    for n in range(3):
        files.write_atomic(target, b"%d" % n)
    assert len(set(temps)) == 3, temps
    assert all(Path(temp).parent == tmp_path and Path(temp).name.startswith(".board.json.") for temp in temps)


def test_file_and_directory_are_fsynced(files: ModuleType, tmp_path: Path, fsynced: list[str]) -> None:
    target = tmp_path / "state.json"
    files.write_atomic(target, b"{}")
    assert str(tmp_path) in fsynced, f"the directory was not fsynced: {fsynced}"
    temp = [seen for seen in fsynced if Path(seen).name.startswith(".state.json.")]
    assert temp, f"the file was not fsynced before the rename: {fsynced}"
    assert fsynced.index(temp[0]) < fsynced.index(str(tmp_path)), "file first, then the directory"


def test_a_move_replaces_the_target_in_one_step_and_fsyncs_the_directory(
    files: ModuleType, tmp_path: Path, fsynced: list[str]
) -> None:
    source, target = tmp_path / "old-key.json", tmp_path / "new-key.json"
    source.write_bytes(b"moved")
    target.write_bytes(b"replaced")
    files.move_atomic(source, target)
    assert target.read_bytes() == b"moved" and not source.exists()
    assert str(tmp_path) in fsynced, f"the directory was not fsynced: {fsynced}"


@pytest.mark.parametrize("failing", ["os.replace", "os.fsync"])
def test_a_failure_leaves_the_old_file_and_no_temp(
    files: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    target = tmp_path / "hub-abc.registrations.json"
    target.write_bytes(b"old")

    def boom(*_: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, failing.split(".")[1], boom)
    with pytest.raises(OSError):
        files.write_atomic(target, b"new")
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hub-abc.registrations.json"]
    assert target.read_bytes() == b"old"


def test_restrict_umask_masks_group_and_other_and_returns_the_inherited_one(files: ModuleType, tmp_path: Path) -> None:
    previous = os.umask(0o022)
    try:
        assert files.restrict_umask() == 0o022
        (tmp_path / "d").mkdir()
        (tmp_path / "f").write_text("x")
        assert os.umask(0o022) == 0o077
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "d").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "f").stat().st_mode) == 0o600


def test_tighten_and_private_dirs(files: ModuleType, tmp_path: Path) -> None:
    loose = tmp_path / "board.sqlite"
    loose.write_text("x")
    loose.chmod(0o644)
    assert files.tighten(loose) is True
    assert stat.S_IMODE(loose.stat().st_mode) == 0o600
    assert files.tighten(loose) is False
    assert files.tighten(tmp_path / "missing") is False
    data = tmp_path / "data"
    data.mkdir(mode=0o755)
    data.chmod(0o755)
    files.ensure_private_dir(data)
    files.ensure_private_dir(tmp_path / "new" / "run")
    assert stat.S_IMODE(data.stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "new" / "run").stat().st_mode) == 0o700
    fd = files.open_private(loose, os.O_RDWR)
    os.close(fd)
    assert stat.S_IMODE(loose.stat().st_mode) == 0o600


def foreign_path(tmp_path: Path) -> Path:
    """A directory another user owns: made and given away when we are root, else ``/`` (root's)."""
    if os.geteuid() == 0:
        path = tmp_path / "foreign"
        path.mkdir(mode=0o755)
        os.chown(path, 65534, 65534)
        return path
    return Path("/")


def test_a_path_another_user_owns_is_refused_not_changed(files: ModuleType, tmp_path: Path) -> None:
    path = foreign_path(tmp_path)
    before = stat.S_IMODE(path.stat().st_mode)
    with pytest.raises(files.NotOwned, match="belongs to uid"):
        files.tighten(path)
    with pytest.raises(files.NotOwned):
        files.ensure_private_dir(path)
    assert stat.S_IMODE(path.stat().st_mode) == before


# -- every writer -------------------------------------------------------------------------------


def test_every_writer_is_atomic_durable_and_leaves_nothing_behind(
    writer: tuple[Callable[[Path, int], None], int], tmp_path: Path, fsynced: list[str]
) -> None:
    write, mode = writer
    target = tmp_path / "out" / "file.json"
    write(target, 1)
    assert _holds(target, 1)
    assert stat.S_IMODE(target.stat().st_mode) == mode
    assert str(target.parent) in fsynced, f"the directory was not fsynced: {fsynced}"
    assert sorted(p.name for p in target.parent.iterdir()) == ["file.json"]


def test_every_writer_survives_concurrent_writers_in_one_process(
    writer: tuple[Callable[[Path, int], None], int], tmp_path: Path
) -> None:
    """Two threads of one process writing one file: pid-only temp names collide and lose a write."""
    write, _ = writer
    target = tmp_path / "file.json"
    errors: list[BaseException] = []

    def run(offset: int) -> None:
        try:
            for n in range(offset, offset + 40):
                write(target, n)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(start,)) for start in (0, 1000)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert _holds(target, 39) or _holds(target, 1039)
    assert [p.name for p in tmp_path.iterdir()] == ["file.json"]


def test_every_writer_leaves_no_temp_when_the_rename_fails(
    writer: tuple[Callable[[Path, int], None], int], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write, _ = writer
    target = tmp_path / "file.json"
    write(target, 1)

    def boom(*_: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        write(target, 2)
    monkeypatch.undo()
    assert [p.name for p in tmp_path.iterdir()] == ["file.json"]
    assert _holds(target, 1)


# -- reading a file another process writes ------------------------------------------------------


def test_a_small_regular_file_is_read_through_a_symlink(files: ModuleType, tmp_path: Path) -> None:
    real = tmp_path / "real.json"
    real.write_bytes(b"x" * 10)
    (tmp_path / "link.json").symlink_to(real)
    assert files.read_small_file(tmp_path / "link.json", 10) == b"x" * 10


@pytest.mark.parametrize("what", ["fifo", "device", "directory", "too-big"])
def test_what_is_no_small_regular_file_is_refused_at_once(files: ModuleType, tmp_path: Path, what: str) -> None:
    """Never waited on (a FIFO with no writer), never read to its end (``/dev/zero``): the
    ``NotARegularFile`` the readers count as any file they cannot read (an ``OSError``)."""
    path = tmp_path / "in-the-way"
    if what == "fifo":
        os.mkfifo(path)
    elif what == "device":
        path.symlink_to("/dev/zero")
    elif what == "directory":
        path.mkdir()
    else:
        path.write_bytes(b"x" * 11)
    with pytest.raises(files.NotARegularFile):
        files.read_small_file(path, 10)
    assert issubclass(files.NotARegularFile, OSError)
