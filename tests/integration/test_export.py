"""Card briefs over a real board: the golden brief, determinism, refusals, and ``taskctl export md``.

The golden card is seeded through the real task commands plus direct rows (with their activity
rows, written the way the comment/report/acceptance/relation/session/attachment commands write
them) on a store whose clock ticks one minute per commit, so the brief is byte-for-byte stable.
Set TASKLOOM_REGENERATE_GOLDEN=1 to rewrite tests/fixtures/brief_golden.md.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import pytest

from services.board.commands import projects, tasks
from services.board.commands.common import set_status
from services.board.queries.tasks import require_task
from services.board.sqlite_store import SqliteStore
from services.board.store import Actor, Tx
from shared import events
from shared.timestamps import format_timestamp
from tests.support.board import REPORT, VENV_BIN, BoardClient, RunningBoard, TaskdProcess, start_board

GOLDEN = Path(__file__).resolve().parent.parent / "fixtures" / "brief_golden.md"
REGENERATE = os.environ.get("TASKLOOM_REGENERATE_GOLDEN") == "1"

ANN = Actor("human", "ann")
BOB = Actor("human", "bob")
WORKER = Actor("claude", "worker-1")


async def activity_count(board: RunningBoard) -> int:
    return await board.store.query(lambda conn: conn.execute("SELECT count(*) FROM task_activities").fetchone()[0])


# -- a board whose commits are one minute apart -------------------------------------------------


class StepClock:
    """Commit timestamps one minute apart from a fixed start: the seeded board is the same every run."""

    def __init__(self) -> None:
        self.start = datetime(2030, 1, 2, 9, 0, tzinfo=UTC)
        self.ticks = 0

    def __call__(self) -> str:
        self.ticks += 1
        return format_timestamp(self.start + timedelta(minutes=self.ticks))


@asynccontextmanager
async def clocked_board(data_dir: Path) -> AsyncIterator[RunningBoard]:
    board = await start_board(data_dir, clock=StepClock())
    try:
        yield board
    finally:
        await board.runner.cleanup()


# -- direct rows, each with the activity row its command writes ---------------------------------


def _task(tx: Tx, ref: str) -> Any:
    return require_task(tx.conn, ref)


def add_comment(tx: Tx, ref: str, comment_id: str, kind: str, body: str) -> None:
    task = _task(tx, ref)
    tx.execute(
        "INSERT INTO comments (id, task_id, kind, body, actor_kind, actor_id, round, created_at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (comment_id, task["id"], kind, body, tx.actor.kind, tx.actor.id, task["delivery_round"], tx.now),
    )
    tx.record(events.COMMENT_ADDED, events.comment_added(comment_id=comment_id, kind=kind),
              task_id=task["id"], project_id=task["project_id"])


def ask(tx: Tx, ref: str, comment_id: str, question: str) -> None:
    add_comment(tx, ref, comment_id, "question", question)
    task = _task(tx, ref)
    set_status(tx, task, "awaiting", awaiting_reason=question)
    tx.record(
        events.TASK_MOVED,
        events.task_moved(from_=task["status"], to="awaiting", delivery_round=task["delivery_round"],
                          awaiting_reason=question, question_comment_id=comment_id),
        task_id=task["id"], project_id=task["project_id"],
    )


def answer(tx: Tx, ref: str, comment_id: str, body: str) -> None:
    add_comment(tx, ref, comment_id, "note", body)
    task = _task(tx, ref)
    set_status(tx, task, "todo")
    tx.record(events.TASK_RESUMED, events.task_resumed(comment_id=comment_id, from_="awaiting", to="todo"),
              task_id=task["id"], project_id=task["project_id"])


def add_relation(tx: Tx, relation_id: str, rel_type: str, source: str, target: str) -> None:
    src, dst = _task(tx, source), _task(tx, target)
    tx.execute("INSERT INTO relations (id, type, source_id, target_id, created_at) VALUES (?, ?, ?, ?, ?)",
               (relation_id, rel_type, src["id"], dst["id"], tx.now))
    tx.record(events.RELATION_ADDED,
              events.relation_added(relation_id=relation_id, type_=rel_type, source=src["id"], target=dst["id"]),
              task_id=dst["id"], project_id=dst["project_id"])


def remove_relation(tx: Tx, relation_id: str) -> None:
    rel = tx.one("SELECT * FROM relations WHERE id = ?", (relation_id,))
    dst = _task(tx, rel["target_id"])
    tx.execute("DELETE FROM relations WHERE id = ?", (relation_id,))
    tx.record(events.RELATION_REMOVED,
              events.relation_removed(relation_id=relation_id, type_=rel["type"], source=rel["source_id"],
                                      target=rel["target_id"]),
              task_id=dst["id"], project_id=dst["project_id"])


def add_acceptance(tx: Tx, ref: str, items: list[tuple[str, str]]) -> None:
    task = _task(tx, ref)
    start = tx.one("SELECT coalesce(max(position), 0) AS top FROM acceptance_items WHERE task_id = ?", (task["id"],))["top"]
    added = []
    for offset, (item_id, text) in enumerate(items, start=1):
        tx.execute("INSERT INTO acceptance_items (id, task_id, position, text, created_at) VALUES (?, ?, ?, ?, ?)",
                   (item_id, task["id"], start + offset, text, tx.now))
        added.append({"id": item_id, "text": text, "position": start + offset})
    revision = tx.one("SELECT revision FROM global_revision")["revision"]
    tx.record(events.ACCEPTANCE_CHANGED, events.acceptance_changed(added=added, revision=revision),
              task_id=task["id"], project_id=task["project_id"])


def prune_acceptance(tx: Tx, ref: str, item_id: str, reason: str) -> None:
    task = _task(tx, ref)
    item = tx.one("SELECT * FROM acceptance_items WHERE id = ?", (item_id,))
    tx.record(events.ACCEPTANCE_PRUNED,
              events.acceptance_pruned(reason=reason, removed=[{"id": item_id, "text": item["text"]}]),
              task_id=task["id"], project_id=task["project_id"])
    tx.execute("DELETE FROM acceptance_items WHERE id = ?", (item_id,))


def override_acceptance(tx: Tx, ref: str, to: str, reason: str) -> None:
    task = _task(tx, ref)
    tx.execute("UPDATE tasks SET acceptance_mode = ?, version = version + 1, updated_at = ? WHERE id = ?",
               (to, tx.now, task["id"]))
    tx.record(events.ACCEPTANCE_OVERRIDE, events.acceptance_override(from_=task["acceptance_mode"], to=to, reason=reason),
              task_id=task["id"], project_id=task["project_id"])


def write_report(tx: Tx, ref: str, report_id: str, body: str) -> None:
    task = _task(tx, ref)
    round_ = task["delivery_round"]
    tx.execute("INSERT INTO reports (id, task_id, round, body, actor_kind, actor_id, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
               (report_id, task["id"], round_, body, tx.actor.kind, tx.actor.id, tx.now))
    tx.record(events.REPORT_WRITTEN, events.report_written(round_=round_, report_id=report_id, delivery_round=round_),
              task_id=task["id"], project_id=task["project_id"])


def waive(tx: Tx, ref: str, reason: str) -> None:
    task = _task(tx, ref)
    set_status(tx, task, "in_review", waiver_reason=reason, delivered_by=tx.actor.id)
    tx.record(events.REPORT_WAIVED,
              events.report_waived(from_=task["status"], to="in_review", round_=task["delivery_round"], reason=reason,
                                   delivery_round=task["delivery_round"]),
              task_id=task["id"], project_id=task["project_id"])


def open_session(tx: Tx, ref: str, session_id: str, phase: str) -> None:
    task = _task(tx, ref)
    tx.execute(
        "INSERT INTO agent_sessions (id, task_id, owner_kind, owner_id, seg, phase, status, created_at, updated_at)"
        " VALUES (?, ?, ?, ?, 1, ?, 'open', ?, ?)",
        (session_id, task["id"], tx.actor.kind, tx.actor.id, phase, tx.now, tx.now),
    )
    tx.record(events.SESSION_REGISTERED,
              events.session_registered(session_id=session_id, seg=1, owner_kind=tx.actor.kind, phase=phase),
              task_id=task["id"], project_id=task["project_id"])


def close_session(tx: Tx, ref: str, session_id: str, status: str) -> None:
    task = _task(tx, ref)
    tx.execute("UPDATE agent_sessions SET status = ?, updated_at = ?, closed_at = ? WHERE id = ?",
               (status, tx.now, tx.now, session_id))
    tx.record(events.SESSION_CLOSED, events.session_closed(session_id=session_id, status=status),
              task_id=task["id"], project_id=task["project_id"])


def put_attachment(tx: Tx, ref: str, attachment_id: str, filename: str, size: int, digest: str) -> None:
    task = _task(tx, ref)
    exists = tx.one("SELECT 1 FROM attachments WHERE id = ?", (attachment_id,))
    if exists:
        tx.execute("UPDATE attachments SET size = ?, sha256 = ?, updated_at = ? WHERE id = ?",
                   (size, digest, tx.now, attachment_id))
    else:
        tx.execute(
            "INSERT INTO attachments (id, task_id, filename, content_type, size, sha256, created_at, updated_at)"
            " VALUES (?, ?, ?, 'text/markdown', ?, ?, ?, ?)",
            (attachment_id, task["id"], filename, size, digest, tx.now, tx.now),
        )
    event = events.ATTACHMENT_UPDATED if exists else events.ATTACHMENT_ADDED
    tx.record(event, events.CONSTRUCTORS[event](attachment_id=attachment_id, filename=filename,
                                                content_type="text/markdown", size=size),
              task_id=task["id"], project_id=task["project_id"])


LONG_DESCRIPTION = (
    "Document `POST /api/v1/export` and `taskctl export md` for people who run agent loops.\n"
    "\n"
    "## Scope\n"
    "\n"
    "- what the brief contains, section by section;\n"
    "- how `--check` tells a CI job that the exported briefs are stale;\n"
    "- why the board never writes a file itself.\n"
    "\n"
    "```sh\n"
    "# in CI: fail when a brief is stale\n"
    "taskctl export md --check\n"
    "```\n"
)


#: Why the golden card is worked on while its blocker is open.
FORCED = "the schema lands in the same release"


async def seed_golden_card(store: SqliteStore) -> None:
    """DEMO-0001 with every section and a History that covers a full round trip and a reopen.

    DEMO-0003 blocks it throughout, so every claim and finishing move passes the dependency gate
    with force and a reason, as the History then shows."""
    run = store.command
    await run(projects.create_project, ANN, id="demo", name="Demo")
    await run(tasks.create_task, ANN, project="demo", title="Write the export docs", description="Document the export.",
              labels=["docs", "Needs Review"], assignee_kind="claude", assignee_id="worker-1",
              reporter_kind="human", reporter_id="ann")
    await run(tasks.create_task, ANN, project="demo", title="Card briefs", kind="epic")
    await run(tasks.create_task, ANN, project="demo", title="Land the schema")
    await run(tasks.create_task, ANN, project="demo", title="Review the export docs", kind="review")
    await run(add_relation, ANN, "rel-parent", "parent", "DEMO-0002", "DEMO-0001")
    await run(add_relation, ANN, "rel-blocks", "blocks", "DEMO-0003", "DEMO-0001")
    await run(add_relation, ANN, "rel-review", "review_of", "DEMO-0004", "DEMO-0001")
    await run(add_relation, ANN, "rel-related", "related", "DEMO-0001", "DEMO-0003")
    await run(add_relation, ANN, "rel-gone", "related", "DEMO-0004", "DEMO-0001")
    await run(add_acceptance, ANN, "DEMO-0001", [
        ("acc-1", "The brief's sections are each explained"),
        ("acc-2", "`--check` exit codes are listed:\n0 when all match, 3 when one differs"),
        ("acc-3", "A screenshot of the web UI"),
    ])
    await run(tasks.update_task, ANN, "DEMO-0001", title="Write the card brief docs", priority="high",
              description=LONG_DESCRIPTION)
    await run(tasks.claim_task, WORKER, "DEMO-0001", force=True, reason=FORCED)
    await run(open_session, WORKER, "DEMO-0001", "ses-demo-0001-w1", "work")
    for _ in range(3):
        await run(tasks.heartbeat_task, WORKER, "DEMO-0001")
    await run(ask, WORKER, "DEMO-0001", "cmt-q", "Should the docs cover --project, or only the default export?")
    await run(answer, ANN, "DEMO-0001", "cmt-a", "Cover --project too; people export one project into its repo.")
    await run(tasks.claim_task, WORKER, "DEMO-0001", force=True, reason=FORCED)
    for _ in range(2):
        await run(tasks.heartbeat_task, WORKER, "DEMO-0001")
    await run(put_attachment, WORKER, "DEMO-0001", "att-outline", "outline.md", 42, "ab" * 32)
    await run(remove_relation, ANN, "rel-gone")
    await run(write_report, WORKER, "DEMO-0001", "rep-1", "Wrote docs/export.md.\n\n## Open points\n\nNone.")
    await run(tasks.move_task, WORKER, "DEMO-0001", to="in_review", force=True, reason=FORCED)
    await run(add_comment, BOB, "DEMO-0001", "cmt-defect", "defect", "The exit code table is missing 2 (usage).")
    await run(tasks.move_task, BOB, "DEMO-0001", to="in_progress")
    await run(prune_acceptance, ANN, "DEMO-0001", "acc-3", "the UI is out of scope here")
    await run(tasks.heartbeat_task, WORKER, "DEMO-0001")
    await run(write_report, WORKER, "DEMO-0001", "rep-2", "Added exit code 2 to the table.")
    await run(tasks.move_task, WORKER, "DEMO-0001", to="in_review", force=True, reason=FORCED)
    await run(add_comment, BOB, "DEMO-0001", "cmt-ok", "confirm", "Looks right now.")
    await run(tasks.move_task, BOB, "DEMO-0001", to="done", force=True, reason=FORCED)
    await run(close_session, WORKER, "DEMO-0001", "ses-demo-0001-w1", "done")
    await run(tasks.reopen_task, ANN, "DEMO-0001", reason="The docs miss the --json output shape")
    await run(override_acceptance, ANN, "DEMO-0001", "none", "a docs fix needs no second review")
    await run(put_attachment, WORKER, "DEMO-0001", "att-outline", "outline.md", 57, "cd" * 32)
    await run(tasks.claim_task, WORKER, "DEMO-0001", force=True, reason=FORCED)
    await run(waive, WORKER, "DEMO-0001", "one-line docs fix, shown in the diff")


# -- the golden brief ---------------------------------------------------------------------------


async def test_golden_brief_covers_every_section(tmp_path: Path) -> None:
    async with clocked_board(tmp_path / "data") as board, aiohttp.ClientSession() as session:
        await seed_golden_card(board.store)
        client = BoardClient(board.url, board.token, session)
        reply = await client.post("/api/v1/export", {"ref": "DEMO-0001"})
        assert reply.status == 200, reply.body
        task = (await client.get("/api/v1/tasks/DEMO-0001")).body
    assert reply.body["task"] == {key: task[key] for key in ("id", "identifier", "status", "revision")}
    markdown = reply.body["markdown"]
    if REGENERATE:
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(markdown, encoding="utf-8")
        pytest.fail(f"regenerated {GOLDEN}: review the diff, then run again without TASKLOOM_REGENERATE_GOLDEN")
    assert markdown == GOLDEN.read_text(encoding="utf-8")


def test_golden_seed_really_fills_every_section() -> None:
    """Guards the fixture itself: a regenerated golden must still show every section non-empty."""
    text = GOLDEN.read_text(encoding="utf-8")
    for section in ("Description", "Acceptance", "Comments", "Relations", "Reports", "Sessions", "Attachments", "History"):
        body = text.split(f"\n## {section}\n\n", 1)[1].split("\n## ", 1)[0]
        assert not body.startswith("_No "), section
    history = text.split("\n## History\n\n", 1)[1]
    for phrase in ("created in todo", "updated title:", "claimed (todo → in_progress)", "3 heartbeats, last at",
                   "asked:", "moved in_progress → awaiting", "resumed (awaiting → todo) on that answer",
                   "moved in_progress → in_review", "round 2 begins", "reopened (done → todo), round 3 begins",
                   "removed acceptance criteria",
                   "changed acceptance mode (review → none)", "added relation: child of DEMO-0002",
                   "removed relation: related to DEMO-0004", "attached outline.md", "waived the report for round 3"):
        assert phrase in history, phrase


# -- determinism and refusals on the ordinary board ---------------------------------------------


async def make_task(client: BoardClient, title: str, **fields: Any) -> dict[str, Any]:
    if (await client.get("/api/v1/projects/demo")).status == 404:
        assert (await client.post("/api/v1/projects", {"id": "demo", "name": "Demo"})).status == 201
    reply = await client.post("/api/v1/tasks", {"project": "demo", "title": title, **fields})
    assert reply.status == 201, reply.body
    return reply.body


async def test_same_state_same_bytes_and_unrelated_changes_do_not_touch_the_brief(client: BoardClient) -> None:
    card = await make_task(client, "Write the docs", description="Line one\n\nLine two", labels=["docs"])
    other = await make_task(client, "Something else")
    worker = client.as_actor("claude", "worker-9")
    await worker.post(f"/api/v1/tasks/{card['id']}/claim")
    first = await client.post("/api/v1/export", {"ref": card["identifier"]})
    again = await client.post("/api/v1/export", {"ref": card["id"]})
    lower = await client.post("/api/v1/export", {"ref": card["identifier"].lower()})
    assert first.status == again.status == lower.status == 200
    assert first.body == again.body == lower.body

    assert (await client.patch(f"/api/v1/tasks/{other['id']}", {"title": "Renamed", "priority": "urgent"})).status == 200
    assert (await worker.post(f"/api/v1/tasks/{other['id']}/claim")).status == 200
    assert (await make_task(client, "A third card"))["identifier"] == "DEMO-0003"
    after_noise = await client.post("/api/v1/export", {"ref": card["id"]})
    assert after_noise.body == first.body

    assert (await client.patch(f"/api/v1/tasks/{card['id']}", {"title": "Write better docs"})).status == 200
    edited = await client.post("/api/v1/export", {"ref": card["id"]})
    assert edited.body["markdown"] != first.body["markdown"]
    assert edited.body["task"]["revision"] > first.body["task"]["revision"]
    assert 'updated title: "Write the docs" → "Write better docs"' in edited.body["markdown"]


async def test_blocked_by_names_the_open_blockers_and_relations_keep_every_one(client: BoardClient) -> None:
    """``blocked_by`` is the one rule's answer (``GET /tasks/{ref}`` says the same); the Relations
    section still lists the relation after the blocker is done, and a reopen blocks again."""
    blocker = await make_task(client, "Land the schema", acceptance_mode="none")
    card = await make_task(client, "Write the docs")
    assert (blocker["identifier"], card["identifier"]) == ("DEMO-0001", "DEMO-0002")
    reply = await client.post(f"/api/v1/tasks/{blocker['id']}/relations", {"type": "blocks", "target": card["id"]})
    assert reply.status == 201, reply.body

    async def brief_of() -> tuple[str, list[str], str]:
        markdown = (await client.post("/api/v1/export", {"ref": card["id"]})).body["markdown"]
        front = dict(line.split(": ", 1) for line in markdown.split("---\n")[1].strip().split("\n"))
        view = (await client.get(f"/api/v1/tasks/{card['id']}")).body["blocked_by"]
        relations = markdown.split("\n## Relations\n\n", 1)[1].split("\n\n## ", 1)[0]
        return front["blocked_by"], view, relations

    assert await brief_of() == ("[DEMO-0001]", ["DEMO-0001"], "- blocked by DEMO-0001")
    worker = client.as_actor("claude", "worker-1")
    for path, body in (("claim", {}), ("deliver", {"body": REPORT}), ("move", {"to": "done"})):
        reply = await worker.post(f"/api/v1/tasks/{blocker['id']}/{path}", body)
        assert reply.status == 200, (path, reply.body)
    # The card's own row did not move, but its open blockers did: the brief says so.
    assert await brief_of() == ("[]", [], "- blocked by DEMO-0001")
    reply = await client.post(f"/api/v1/tasks/{blocker['id']}/reopen", {"reason": "the schema needs another column"})
    assert reply.status == 200, reply.body
    assert await brief_of() == ("[DEMO-0001]", ["DEMO-0001"], "- blocked by DEMO-0001")
    assert (await client.post(f"/api/v1/tasks/{blocker['id']}/move", {"to": "canceled"})).status == 200
    assert await brief_of() == ("[]", [], "- blocked by DEMO-0001")


async def test_the_brief_reads_what_the_real_commands_write(client: BoardClient, board: RunningBoard) -> None:
    """The renderer against rows written by the comment/relation/acceptance/session/report routes."""
    card = await make_task(client, "Write the docs")
    blocker = await make_task(client, "Land the schema")
    worker = client.as_actor("claude", "worker-1")
    ref = f"/api/v1/tasks/{card['identifier']}"
    steps = [
        await client.post(f"{ref}/acceptance", {"items": ["Every section explained", "Exit codes listed"]}),
        await client.post(f"/api/v1/tasks/{blocker['identifier']}/relations", {"type": "blocks", "target": card["id"]}),
        await worker.post(f"{ref}/claim", {"force": True, "reason": "the docs can go first"}),
        await worker.post(f"{ref}/sessions", {"seg": 1, "phase": "work"}),
        await worker.post(f"{ref}/ask", {"body": "Cover the project flag too"}),
        await client.post(f"{ref}/comments", {"body": "Yes, cover it."}),
        await worker.post(f"{ref}/claim", {"force": True, "reason": "the docs can go first"}),
        await worker.post(f"{ref}/deliver", {"body": "## Summary\n\nDone.\n\n## Changes\n\n- docs\n\n## Verification\n\nRead it.",
                                             "force": True, "reason": "the docs can go first"}),
    ]
    assert [reply.status for reply in steps] == [200, 201, 200, 201, 200, 201, 200, 200], [r.body for r in steps]
    markdown = (await client.post("/api/v1/export", {"ref": card["id"]})).body["markdown"]
    history = markdown.split("\n## History\n\n", 1)[1]
    assert "?" not in history and "{" not in history  # no missing keys, no raw fallback rows
    for phrase in ("added acceptance criteria: \"Every section explained\"; \"Exit codes listed\"",
                   "added relation: blocked by DEMO-0002", "registered session", "asked: \"Cover the project flag too\"",
                   "moved in_progress → awaiting", "resumed (awaiting → todo) on that answer",
                   "wrote the report for round 1", "delivered round 1 (in_progress → in_review)",
                   'forced past open blockers: "the docs can go first"'):
        assert phrase in history, phrase
    assert "blocked_by: [DEMO-0002]" in markdown
    assert "##### Summary" in markdown and "\n## Summary" not in markdown


async def test_export_is_a_read_and_needs_no_actor(client: BoardClient, board: RunningBoard) -> None:
    card = await make_task(client, "Write the docs")
    before = await activity_count(board)
    reply = await client.post("/api/v1/export", {"ref": card["id"]}, actor=None)
    assert reply.status == 200 and reply.body["task"]["identifier"] == "DEMO-0001"
    assert await activity_count(board) == before


async def test_unknown_ref_is_404_and_writes_nothing(client: BoardClient, board: RunningBoard) -> None:
    await make_task(client, "Write the docs")
    before = await activity_count(board)
    for ref in ("DEMO-0999", "00000000-0000-0000-0000-000000000000"):
        reply = await client.post("/api/v1/export", {"ref": ref})
        assert reply.status == 404 and reply.error == "NOT_FOUND"
        assert reply.body["error"]["details"] == {"task": ref}
    assert await activity_count(board) == before


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({"ref": "DEMO-0001", "out": "/tmp/taskloom-export-must-not-exist.md"}, {"unknown": ["out"]}),
        ({}, {"field": "ref"}),
        ({"ref": 7}, {"field": "ref", "value": 7}),
        ({"ref": "   "}, {"field": "ref"}),
        ([], None),
    ],
    ids=["unknown-field", "missing-ref", "ref-not-a-string", "blank-ref", "not-an-object"],
)
async def test_bad_bodies_are_400_and_write_nothing(
    client: BoardClient, board: RunningBoard, body: Any, named: dict[str, Any] | None
) -> None:
    await make_task(client, "Write the docs")
    before = await activity_count(board)
    reply = await client.request("POST", "/api/v1/export", json_body=body)
    assert reply.status == 400 and reply.error == "VALIDATION_FAILED"
    if named is not None:
        assert reply.body["error"]["details"] == named
    assert await activity_count(board) == before
    assert not Path("/tmp/taskloom-export-must-not-exist.md").exists()


async def test_export_is_in_the_openapi_document(client: BoardClient) -> None:
    reply = await client.get("/api/v1/openapi.json")
    assert reply.status == 200
    assert "post" in reply.body["paths"]["/api/v1/export"]


# -- taskctl export md against a real taskd -----------------------------------------------------


def taskctl_export(taskd: TaskdProcess, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**taskd.env(), "TASKLOOM_URL": taskd.url, "TASKLOOM_TOKEN": taskd.token, "TASKLOOM_NO_AUTOSTART": "1"}
    return subprocess.run(
        [str(VENV_BIN / "taskctl"), "export", *args],
        env=env, cwd=cwd, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )


def snapshot(directory: Path) -> dict[str, tuple[bytes, int]]:
    return {path.name: (path.read_bytes(), path.stat().st_mtime_ns) for path in sorted(directory.iterdir())}


def test_export_md_round_trip_and_check(taskd: TaskdProcess, tmp_path: Path) -> None:
    taskd.start()
    headers = {"Authorization": f"Bearer {taskd.token}", "X-Taskloom-Actor": "ann", "X-Taskloom-Actor-Kind": "human"}
    with httpx.Client(base_url=taskd.url, headers=headers, timeout=10) as http:
        for project in ("demo", "ops"):
            assert http.post("/api/v1/projects", json={"id": project, "name": project}).status_code == 201
        for title in ("Write the docs", "Ship it"):
            assert http.post("/api/v1/tasks", json={"project": "demo", "title": title}).status_code == 201
        assert http.post("/api/v1/tasks", json={"project": "ops", "title": "Rotate keys"}).status_code == 201
        gone = http.post("/api/v1/tasks", json={"project": "demo", "title": "Old idea"}).json()
        assert http.post(f"/api/v1/tasks/{gone['id']}/move", json={"to": "canceled"}).status_code == 200
        assert http.post(f"/api/v1/tasks/{gone['id']}/archive", json={}).status_code == 200

        out = tmp_path / "briefs"
        nothing_yet = taskctl_export(taskd, "md", "--out", str(out), "--check", cwd=tmp_path)
        assert nothing_yet.returncode == 3, nothing_yet.stdout + nothing_yet.stderr
        assert nothing_yet.stdout.splitlines() == [f"missing  {out / name}.md" for name in ("DEMO-0001", "DEMO-0002", "OPS-0001")]
        assert not out.exists()

        done = taskctl_export(taskd, "md", "--out", str(out), cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert sorted(path.name for path in out.iterdir()) == ["DEMO-0001.md", "DEMO-0002.md", "OPS-0001.md"]
        for name in ("DEMO-0001", "DEMO-0002", "OPS-0001"):
            expected = http.post("/api/v1/export", json={"ref": name}).json()["markdown"]
            assert (out / f"{name}.md").read_text(encoding="utf-8") == expected

        before = snapshot(out)
        clean = taskctl_export(taskd, "md", "--out", str(out), "--check", cwd=tmp_path)
        assert clean.returncode == 0, clean.stdout + clean.stderr
        again = taskctl_export(taskd, "md", "--out", str(out), cwd=tmp_path)
        assert again.returncode == 0 and "0 written, 3 unchanged" in again.stderr
        assert snapshot(out) == before  # up-to-date files are not rewritten

        assert http.patch("/api/v1/tasks/DEMO-0002", json={"title": "Ship it today"}).status_code == 200
        (out / "OPS-0001.md").unlink()
        before = snapshot(out)
        stale = taskctl_export(taskd, "md", "--out", str(out), "--check", cwd=tmp_path)
        assert stale.returncode == 3, stale.stdout + stale.stderr
        assert stale.stdout.splitlines() == [f"missing  {out / 'OPS-0001.md'}", f"differs  {out / 'DEMO-0002.md'}"]
        assert snapshot(out) == before  # --check writes nothing

        as_json = taskctl_export(taskd, "md", "--out", str(out), "--check", "--json", cwd=tmp_path)
        assert as_json.returncode == 3
        data = json.loads(as_json.stdout)["data"]
        assert data["differs"] == [str(out / "DEMO-0002.md")] and data["missing"] == [str(out / "OPS-0001.md")]

        only_demo = tmp_path / "demo-only"
        scoped = taskctl_export(taskd, "md", "--out", str(only_demo), "--project", "demo", cwd=tmp_path)
        assert scoped.returncode == 0, scoped.stderr
        assert sorted(path.name for path in only_demo.iterdir()) == ["DEMO-0001.md", "DEMO-0002.md"]

        fixed = taskctl_export(taskd, "md", "--out", str(out), cwd=tmp_path)
        assert fixed.returncode == 0 and "2 written, 1 unchanged" in fixed.stderr
        assert taskctl_export(taskd, "md", "--out", str(out), "--check", cwd=tmp_path).returncode == 0
        assert not [path for path in out.iterdir() if path.name.startswith(".")]  # no temp files left behind


def test_export_md_without_a_board_fails_clearly(tmp_path: Path) -> None:
    env = {**os.environ, "TASKLOOM_URL": "http://127.0.0.1:9", "TASKLOOM_TOKEN": "tl_x", "TASKLOOM_NO_AUTOSTART": "1"}
    done = subprocess.run(
        [str(VENV_BIN / "taskctl"), "export", "md", "--out", str(tmp_path / "briefs")],
        env=env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 1
    assert "BOARD_UNREACHABLE" in done.stderr and "cannot reach the board" in done.stderr
    assert not (tmp_path / "briefs").exists()
