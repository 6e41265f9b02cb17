"""SIGKILL ``taskd`` in the middle of a write burst, restart it, and prove the log is still the
shadow of the state (SPEC §1.1): every task change has its activity row, and no row describes a
change that is not there. Acknowledged writes survive (a killed process loses nothing it committed).
"""

from __future__ import annotations

import http.client
import json
import signal
import sqlite3
import threading
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tests.support.board import TaskdProcess
from tests.support.waiting import wait_until

WRITERS = 4
SHARED_TASKS = 3
KILLS = 3
ACKS_BEFORE_KILL = 120  # acknowledged writes per round before the kill lands
STATUS_EVENTS = {"task_claimed", "task_moved"}
VERSIONED_EVENTS = {"task_updated", "task_claimed", "task_moved"}
WORKLOAD_EVENTS = {"task_created", "task_heartbeat"} | VERSIONED_EVENTS


class BoardGone(Exception):
    """The board stopped answering: the burst is over for this writer."""


@dataclass
class Ledger:
    """What the board acknowledged, shared by the writer threads."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    acks: int = 0
    titles: dict[str, str] = field(default_factory=dict)  # task id -> title it was created with
    versions: dict[str, int] = field(default_factory=lambda: defaultdict(int))  # highest acknowledged
    failures: list[str] = field(default_factory=list)

    def acknowledge(self, task: dict[str, Any]) -> None:
        with self.lock:
            self.acks += 1
            self.versions[task["id"]] = max(self.versions[task["id"]], task["version"])


class Writer(threading.Thread):
    """One client hammering the board over its own keep-alive connection until the board dies."""

    def __init__(self, url: str, token: str, number: int, shared: list[str], ledger: Ledger, start_at: int) -> None:
        super().__init__(name=f"writer-{number}", daemon=True)
        parts = urlsplit(url)
        self.conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=15)
        self.headers = {
            "Authorization": f"Bearer {token}",
            "Content-Type": "application/json",
            "X-Taskloom-Actor-Kind": "claude",
            "X-Taskloom-Actor": f"worker-{number}",
        }
        self.number = number
        self.shared = shared
        self.ledger = ledger
        self.iteration = start_at

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
        try:
            self.conn.request(method, path, body=json.dumps(body or {}), headers=self.headers)
            response = self.conn.getresponse()
            payload = json.loads(response.read() or b"null")
        except (OSError, http.client.HTTPException, ValueError) as exc:
            raise BoardGone from exc
        if response.status >= 500:
            self.ledger.failures.append(f"{method} {path} -> {response.status} {payload}")
            raise BoardGone
        if response.status < 300 and isinstance(payload, dict) and "version" in payload:
            self.ledger.acknowledge(payload)
        return response.status, payload

    def run(self) -> None:
        try:
            while True:
                self.one_round()
        except BoardGone:
            pass
        finally:
            self.conn.close()

    def one_round(self) -> None:
        self.iteration += 1
        n = self.iteration
        title = f"w{self.number} task {n}"
        status, task = self.call("POST", "/api/v1/tasks", {"project": "crash", "title": title, "labels": [f"w{self.number}"]})
        assert status == 201, task
        with self.ledger.lock:
            self.ledger.titles[task["id"]] = title
        ref = f"/api/v1/tasks/{task['id']}"
        self.call("PATCH", ref, {"title": f"{title} (renamed)", "priority": ("low", "high", "urgent")[n % 3]})
        self.call("POST", f"{ref}/claim")
        self.call("POST", f"{ref}/heartbeat")
        self.call("POST", f"{ref}/move", {"to": "blocked", "reason": "waiting on CI"})
        self.call("POST", f"{ref}/move", {"to": "todo" if n % 2 else "canceled"})
        # Contention: every writer competes for the same few shared tasks.
        shared = f"/api/v1/tasks/{self.shared[n % len(self.shared)]}"
        status, _ = self.call("POST", f"{shared}/claim")
        if status == 200:
            self.call("POST", f"{shared}/heartbeat")
            self.call("POST", f"{shared}/move", {"to": "todo"})


def api(taskd: TaskdProcess, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
    parts = urlsplit(taskd.url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=15)
    try:
        conn.request(method, path, body=json.dumps(body or {}), headers={
            "Authorization": f"Bearer {taskd.token}", "Content-Type": "application/json",
            "X-Taskloom-Actor-Kind": "human", "X-Taskloom-Actor": "ann",
        })
        response = conn.getresponse()
        return response.status, json.loads(response.read() or b"null")
    finally:
        conn.close()


def burst_then_kill(taskd: TaskdProcess, shared: list[str], ledger: Ledger, round_: int) -> None:
    writers = [Writer(taskd.url, taskd.token, n, shared, ledger, start_at=round_ * 10_000) for n in range(WRITERS)]
    target = ledger.acks + ACKS_BEFORE_KILL
    for writer in writers:
        writer.start()
    wait_until(lambda: ledger.acks >= target or ledger.failures, timeout=60, what="the write burst")
    assert all(writer.is_alive() for writer in writers), "the kill must land while every writer is still writing"
    assert taskd.stop(signal.SIGKILL) == -signal.SIGKILL
    for writer in writers:
        writer.join(timeout=30)
        assert not writer.is_alive()
    assert ledger.failures == []


def read_board(database: Path) -> tuple[dict[str, sqlite3.Row], dict[str, list[dict[str, Any]]], list[sqlite3.Row], int]:
    conn = sqlite3.connect(f"file:{database}?mode=ro", uri=True)
    conn.row_factory = sqlite3.Row
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
        conn.execute("BEGIN")
        tasks = {row["id"]: row for row in conn.execute("SELECT * FROM tasks")}
        activity = conn.execute("SELECT * FROM task_activities ORDER BY id").fetchall()
        head = conn.execute("SELECT revision FROM global_revision").fetchone()[0]
        conn.execute("COMMIT")
    finally:
        conn.close()
    by_task: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in activity:
        if row["task_id"] is not None:
            by_task[row["task_id"]].append({**dict(row), "changes": json.loads(row["changes_json"])})
    return tasks, by_task, activity, head


def check_log_shadows_state(database: Path, ledger: Ledger) -> None:
    tasks, by_task, activity, head = read_board(database)

    # The log as a whole: revisions unique and increasing in append order, none past the head.
    revisions = [row["revision"] for row in activity]
    assert revisions == sorted(set(revisions)) and revisions[-1] <= head
    # No row describes a task that is not there; every task has exactly one creation row.
    assert set(by_task) <= set(tasks), "activity rows naming tasks that do not exist"
    for task_id, task in tasks.items():
        rows = by_task[task_id]
        assert [row["event"] for row in rows].count("task_created") == 1, task["identifier"]
        assert rows[0]["event"] == "task_created"
        assert {row["event"] for row in rows} <= WORKLOAD_EVENTS

    # Acknowledged writes survived the kill.
    assert set(ledger.titles) <= set(tasks), "a task whose creation was acknowledged is gone"
    for task_id, version in ledger.versions.items():
        assert tasks[task_id]["version"] >= version, f"acknowledged version {version} of {task_id} was lost"

    for task_id, task in tasks.items():
        rows = by_task[task_id]
        name = task["identifier"]
        # Every version-changing write has its row, and every such row its write.
        versioned = [row for row in rows if row["event"] in VERSIONED_EVENTS]
        assert task["version"] == 1 + len(versioned), f"{name}: version {task['version']}, {len(versioned)} rows"
        # The task row was stamped inside the transaction of its last row: between it and the one before.
        assert task["revision"] < rows[-1]["revision"], name
        if len(rows) > 1:
            assert rows[-2]["revision"] < task["revision"], f"{name} changed after its last row"
        # Status: the `to` of the last status row, else where it was created.
        moves = [row for row in rows if row["event"] in STATUS_EVENTS]
        expected_status = moves[-1]["changes"]["to"] if moves else rows[0]["changes"]["status"]
        assert task["status"] == expected_status, name
        if task["status"] == "in_progress":
            claim = [row for row in rows if row["event"] == "task_claimed"][-1]
            assert (task["claimed_by_kind"], task["claimed_by"]) == (claim["actor_kind"], claim["actor_id"]), name
        # Updates: each field holds the last `after` the log gives it, else its creation value.
        updates = [row for row in rows if row["event"] == "task_updated"]
        after: dict[str, Any] = {}
        for row in updates:
            after.update(row["changes"].get("after", {}))
        if task_id in ledger.titles:
            assert task["title"] == after.get("title", ledger.titles[task_id]), name
        if "priority" in after:
            assert task["priority"] == after["priority"], name
        created = rows[0]["changes"]
        assert json.loads(task["labels_json"]) == created.get("labels", []), name
        # Heartbeats: the last claim/heartbeat/move decides what heartbeat_at holds.
        last = [row for row in rows if row["event"] in STATUS_EVENTS | {"task_heartbeat"}]
        if last:
            final = last[-1]
            if final["event"] == "task_heartbeat":
                assert task["heartbeat_at"] == final["changes"]["heartbeatAt"], name
            elif final["event"] == "task_claimed":
                assert task["heartbeat_at"] == final["created_at"], name
            elif final["changes"]["to"] in ("todo", "backlog", "canceled", "done"):
                assert task["heartbeat_at"] is None and task["claimed_by"] is None, name


def test_sigkill_mid_burst_leaves_the_log_the_shadow_of_the_state(taskd: TaskdProcess) -> None:
    taskd.start()
    assert api(taskd, "POST", "/api/v1/projects", {"id": "crash", "name": "Crash"})[0] == 201
    shared = []
    for n in range(SHARED_TASKS):
        status, task = api(taskd, "POST", "/api/v1/tasks", {"project": "crash", "title": f"shared {n}"})
        assert status == 201
        shared.append(task["id"])
    ledger = Ledger()
    database = taskd.data_dir / "board.sqlite"

    for round_ in range(KILLS):
        burst_then_kill(taskd, shared, ledger, round_)
        taskd.start()  # same data dir: recovers the WAL
        check_log_shadows_state(database, ledger)

    # The restarted board carries on: the next write takes the next revision and lands.
    status, meta = api(taskd, "GET", "/api/v1/meta")
    assert status == 200
    status, task = api(taskd, "POST", "/api/v1/tasks", {"project": "crash", "title": "after the crashes"})
    assert status == 201 and task["revision"] > meta["revision"]
    status, rows = api(taskd, "GET", f"/api/v1/tasks/{task['id']}/activities")
    assert [row["event"] for row in rows["items"]] == ["task_created"]
    assert rows["items"][0]["revision"] > meta["revision"]
    assert taskd.stop() == 0
