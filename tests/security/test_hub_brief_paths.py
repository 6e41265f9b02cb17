"""The hub must not write a brief over its own state or the board's (raw TCP against a real ``taskhub``).

The attack: a ``watch`` naming ``hub-<key>.registrations.json`` or the board pointer as its brief
path was accepted; the brief replaced the file, and every detached registration was lost after
the next crash. Brief paths inside the runtime directory and the board's data directory are now
refused with ``VALIDATION_FAILED`` (``details.field: "paths"``), and nothing is written.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.board import VENV_BIN, TaskdProcess
from tests.support.waiting import wait_until


class Line:
    """One NDJSON session over a plain socket, as ``nc`` would hold it."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=20)
        self.buffer = b""

    def send(self, message: dict[str, Any]) -> None:
        self.sock.sendall(json.dumps(message).encode() + b"\n")

    def recv(self) -> dict[str, Any]:
        while b"\n" not in self.buffer:
            chunk = self.sock.recv(65536)
            assert chunk, "the hub closed the session"
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return json.loads(line)

    def ask(self, message: dict[str, Any]) -> dict[str, Any]:
        self.send(message)
        while True:
            answer = self.recv()
            if answer["type"] != "heartbeat":
                return answer



def contents(*roots: Path) -> dict[str, bytes]:
    """Every file's bytes except the hub's own log (it notes the refusals)."""
    return {
        str(path): path.read_bytes()
        for root in roots for path in sorted(root.rglob("*"))
        if path.is_file() and not path.name.endswith(".log") and "-wal" not in path.name and "-shm" not in path.name
    }


@pytest.fixture
def board(tmp_path: Path) -> Iterator[TaskdProcess]:
    process = TaskdProcess(data_dir=tmp_path / "data", runtime_dir=tmp_path / "run", log_path=tmp_path / "taskd.log")
    process.start()
    process.api("POST", "/api/v1/projects", {"id": "demo"})
    process.api("POST", "/api/v1/tasks", {"project": "demo", "title": "Brief me"})
    process.api("POST", "/api/v1/tasks", {"project": "demo", "title": "Brief me too"})
    yield process
    process.stop()


@pytest.fixture
def hub(board: TaskdProcess, tmp_path: Path) -> Iterator[dict[str, Any]]:
    env = {**board.env(), "TASKLOOM_TOKEN": board.token}
    # The hub's default data directory is elsewhere: the board's own must still be recognised.
    env["TASKLOOM_DATA_DIR"] = str(tmp_path / "elsewhere")
    log = open(tmp_path / "taskhub.out", "ab")
    process = subprocess.Popen([str(VENV_BIN / "taskhub"), "serve", "--board", board.url, "--idle-exit", "0"],
                               env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    log.close()

    def pointer() -> dict[str, Any] | None:
        assert process.poll() is None, (tmp_path / "taskhub.out").read_text()
        for path in board.runtime_dir.glob("hub-*.json"):
            if not path.name.endswith(".registrations.json"):
                try:
                    record = json.loads(path.read_text())
                except ValueError:
                    return None
                return record if record.get("pid") == process.pid else None
        return None

    record = wait_until(pointer, timeout=20, what="taskhub to write its pointer")
    yield record
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=20)


def session(hub: dict[str, Any]) -> Line:
    line = Line(hub["port"])
    welcome = line.ask({"type": "hello", "protocol": 2, "token": hub["token"]})
    assert welcome["type"] == "welcome", welcome
    return line


def test_brief_paths_inside_the_runtime_or_data_directory_are_refused(
    board: TaskdProcess, hub: dict[str, Any], tmp_path: Path
) -> None:
    run, data = board.runtime_dir, board.data_dir
    registrations = run / f"hub-{hub['key']}.registrations.json"
    (tmp_path / "link").symlink_to(run)
    (tmp_path / "work").mkdir()
    fine = tmp_path / "work" / "card.md"
    attacks: list[dict[str, Any]] = [
        {"type": "watch", "ref": "DEMO-0001", "out": str(registrations), "detach": True, "ttl_ms": 0},
        {"type": "watch", "ref": "DEMO-0001", "out": str(run / "board.json"), "detach": True},
        {"type": "watch", "ref": "DEMO-0001", "out": str(run / f"hub-{hub['key']}.json"), "detach": True},
        {"type": "watch", "ref": "DEMO-0001", "out": str(data / "token"), "detach": True},
        {"type": "watch", "ref": "DEMO-0001", "out": str(data / "board.sqlite"), "detach": True},
        {"type": "watch", "ref": "DEMO-0001", "out": str(tmp_path / "link" / "board.json"), "detach": True},
        {"type": "watch", "ref": "DEMO-0001", "out": str(tmp_path / "work" / ".." / "run" / "board.json"), "detach": True},
        {"type": "watch", "refs": ["DEMO-0001"], "dir": str(run), "detach": True},
        {"type": "watch", "refs": ["DEMO-0001"], "dir": str(data), "detach": True},
        # All or nothing: the harmless path of a request that names a protected one is not written either.
        {"type": "watch", "detach": True,
         "cards": [{"ref": "DEMO-0001", "out": str(fine)}, {"ref": "DEMO-0002", "out": str(run / "board.json")}]},
    ]
    before = contents(run, data)
    line = session(hub)
    for attack in attacks:
        answer = line.ask(attack)
        assert answer["type"] == "error" and answer["code"] == "VALIDATION_FAILED", (attack, answer)
        assert answer["details"]["field"] == "paths", answer
        assert "holds Taskloom's own files" in answer["message"], answer
    assert contents(run, data) == before, "a refused watch wrote something"
    assert not fine.exists()
    assert line.ask({"type": "watch-status"})["registrations"] == []

    # The hub still serves: a brief outside those directories is written and persisted.
    answer = line.ask({"type": "watch", "ref": "DEMO-0001", "out": str(fine), "detach": True, "ttl_ms": 0})
    assert answer["type"] == "registered", answer
    assert fine.read_text().startswith("---")
    kept = json.loads(registrations.read_text())
    assert [card["path"] for entry in kept["registrations"] for card in entry["cards"]] == [str(fine)]
    assert json.loads((run / "board.json").read_text())["pid"] == board.process.pid  # type: ignore[union-attr]
    assert os.path.exists(data / "token") and board.token.startswith("tl_")


@pytest.fixture
def planted(board: TaskdProcess, tmp_path: Path) -> dict[str, Path]:
    """A registrations file from a hub that did not check: one brief over the board pointer, one fine."""
    from shared import hub_protocol as hp

    request = urllib.request.Request(board.url + "/api/v1/tasks/DEMO-0001",
                                     headers={"Authorization": f"Bearer {board.token}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        task_id = json.loads(response.read())["id"]
    key = hp.hub_key(hp.resolve_board_url(board.url), board.token)
    fine = tmp_path / "kept" / "card.md"
    entries = [
        {"registration_id": f"w_{n:016x}", "created_at": "2026-05-04T09:12:44.120Z", "ttl_ms": 0, "expires_at": None,
         "cards": [{"ref": "DEMO-0001", "task_id": task_id, "identifier": "DEMO-0001", "path": str(path)}]}
        for n, path in enumerate([board.runtime_dir / "board.json", fine], 1)
    ]
    path = board.runtime_dir / f"hub-{key}.registrations.json"
    path.write_text(json.dumps({"version": 2, "board": hp.resolve_board_url(board.url), "registrations": entries}))
    return {"fine": fine, "file": path}


def test_a_persisted_brief_over_our_own_state_is_dropped_at_rehydration(
    board: TaskdProcess, planted: dict[str, Path], hub: dict[str, Any]
) -> None:
    pointer = board.runtime_dir / "board.json"
    before = pointer.read_bytes()
    line = session(hub)
    status = line.ask({"type": "watch-status"})
    assert [card["path"] for reg in status["registrations"] for card in reg["cards"]] == [str(planted["fine"])]
    assert pointer.read_bytes() == before
    assert json.loads(pointer.read_text())["pid"] == board.process.pid  # type: ignore[union-attr]
    assert planted["fine"].read_text().startswith("---")
