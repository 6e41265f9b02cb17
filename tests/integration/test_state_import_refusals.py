"""Every bad state file is refused with a clear error naming its line, and nothing is written."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable

import pytest

from services.board.queries.state import KINDS
from shared.limits import WORKSPACE_PATH_MAX_BYTES
from tests.support.board import API, BoardClient, RunningBoard, row_counts
from tests.support.state_builder import build_random_board
from tests.support.state_files import IMPORTED_TABLES, assert_nothing_imported, encode, exported

pytestmark = pytest.mark.asyncio


@pytest.fixture
async def source(client: BoardClient) -> list[dict]:
    await build_random_board(client, 31, projects=1, tasks=6)
    return await exported(client)


def first(records: list[dict], kind: str) -> int:
    return next(i for i, record in enumerate(records) if record["kind"] == kind)


def _unknown_kind(records: list[dict]) -> list[dict]:
    return [records[0], {"kind": "widget", "row": {}}, *records[1:]]


def _duplicate_task(records: list[dict]) -> list[dict]:
    at = first(records, "task")
    return [*records[:at + 1], records[at], *records[at + 1:]]


def _missing_task(records: list[dict]) -> list[dict]:
    at = first(records, "comment")
    records[at]["row"]["task_id"] = "00000000-0000-0000-0000-000000000000"
    return records


def _bytes_do_not_match(records: list[dict]) -> list[dict]:
    at = first(records, "attachment")
    records[at]["data"] = base64.b64encode(b"not the uploaded bytes").decode()
    return records


def _unknown_version(records: list[dict]) -> list[dict]:
    records[0]["version"] = 2
    return records


def _no_end_line(records: list[dict]) -> list[dict]:
    return records[:-1]


def _counter_behind(records: list[dict]) -> list[dict]:
    records[first(records, "project")]["row"]["next_number"] = 1
    return records


def _unknown_field(records: list[dict]) -> list[dict]:
    records[first(records, "task")]["row"]["owner"] = "mallory"
    return records


def _out_of_order(records: list[dict]) -> list[dict]:
    actor = records.pop(first(records, "actor"))
    at = first(records, "task")
    return [*records[:at + 1], actor, *records[at + 1:]]


def _bad_status(records: list[dict]) -> list[dict]:
    records[first(records, "task")]["row"]["status"] = "finished"
    return records


def _workspace_path_past_its_bytes(records: list[dict]) -> list[dict]:
    """Fewer characters than the bound, more UTF-8 bytes: what no command could have written."""
    records[first(records, "project")]["row"]["workspace_path"] = "/" + "é" * WORKSPACE_PATH_MAX_BYTES
    return records


def _label_holding_nul(records: list[dict]) -> list[dict]:
    """PostgreSQL filters by label through jsonb, which cannot hold U+0000: once imported, every
    ``GET /tasks?label=`` over the card was a 400 in the driver's words there."""
    records[first(records, "task")]["row"]["labels"] = ["a\u0000b"]
    return records


def with_relations(records: list[dict], *wanted: tuple[str, int, int]) -> list[dict]:
    """``records`` with only the relations ``wanted`` (type, source, target: indexes into its
    non-epic tasks, the first of which becomes an epic), the end line's count kept right."""
    records = [record for record in records if record["kind"] != "relation"]
    records[-1]["counts"]["relation"] = 0
    tasks = [record["row"] for record in records if record["kind"] == "task" and record["row"]["kind"] != "epic"]
    tasks[0]["kind"] = "epic"
    order = [kind.name for kind in KINDS]
    at = next(i for i, record in enumerate(records[1:], start=1)
              if record["kind"] not in order or order.index(record["kind"]) > order.index("relation"))
    relations = [
        {"kind": "relation", "row": {"id": f"00000000-0000-4000-8000-00000000000{n}", "type": type_,
                                     "source_id": tasks[source]["id"], "target_id": tasks[target]["id"],
                                     "created_at": "2026-01-01T00:00:00.000Z"}}
        for n, (type_, source, target) in enumerate(wanted)
    ]
    records[-1]["counts"]["relation"] += len(relations)
    return [*records[:at], *relations, *records[at:]]


def _epic_blocks_its_child(records: list[dict]) -> list[dict]:
    """As a board older than the rule against it could export: the two cards wait for each other."""
    return with_relations(records, ("parent", 0, 1), ("blocks", 0, 1))


def _longer_waiting_ring(records: list[dict]) -> list[dict]:
    """The epic waits for its child, the child for its blocker, the blocker for the epic."""
    return with_relations(records, ("parent", 0, 1), ("blocks", 2, 1), ("blocks", 0, 2))


def last_relation(records: list[dict]) -> int:
    return max(i for i, record in enumerate(records) if record["kind"] == "relation") + 1


CASES: dict[str, tuple[Callable[[list[dict]], list[dict]], str, Callable[[list[dict]], int] | None]] = {
    "unknown kind": (_unknown_kind, "unknown kind 'widget'", lambda r: 2),
    "duplicate id": (_duplicate_task, "duplicate task", lambda r: first(r, "task") + 2),
    "missing task": (_missing_task, "refers to task", lambda r: first(r, "comment") + 1),
    "hash mismatch": (_bytes_do_not_match, "do not match its sha256", lambda r: first(r, "attachment") + 1),
    "unknown version": (_unknown_version, "unknown export version 2", lambda r: 1),
    "no end line": (_no_end_line, "truncated", None),
    "counter behind its tasks": (_counter_behind, "next_number 1 is not past its tasks", None),
    "unknown field": (_unknown_field, "unknown: owner", lambda r: first(r, "task") + 1),
    "kinds out of order": (_out_of_order, "kinds come in file order", lambda r: first(r, "actor") + 1),
    "a status the board does not have": (_bad_status, "task.status must be one of", lambda r: first(r, "task") + 1),
    "an epic blocking its own child": (_epic_blocks_its_child, "wait for each other", last_relation),
    "a longer ring of waits": (_longer_waiting_ring, "wait for each other", last_relation),
    "a task label holding U+0000": (_label_holding_nul, "texts of 1 to 64 characters without U+0000",
                                    lambda r: first(r, "task") + 1),
    "a workspace path past its bytes": (_workspace_path_past_its_bytes, "project.workspace_path is larger than",
                                        lambda r: first(r, "project") + 1),
}


@pytest.mark.parametrize("case", sorted(CASES))
async def test_a_bad_file_is_refused_by_line_and_writes_nothing(
    source: list[dict], empty_board: tuple[RunningBoard, BoardClient], case: str
) -> None:
    change, words, line_of = CASES[case]
    records = change(json.loads(json.dumps(source)))
    board, client = empty_board
    reply = await client.request("POST", f"{API}/state", data=encode(records))
    assert reply.status == 400 and reply.error == "VALIDATION_FAILED", reply.body
    message = reply.body["error"]["message"]
    assert words in message and "nothing was imported" in message, message
    if line_of is not None:
        assert reply.body["error"]["details"]["line"] == line_of(records), reply.body
        assert message.startswith(f"line {line_of(records)}: ")
    await assert_nothing_imported(board)


async def test_a_file_the_schema_refuses_writes_no_blob(source: list[dict], empty_board: tuple[RunningBoard, BoardClient]) -> None:
    """``parse_state`` checks types, references and digests; the schema's own CHECKs (a title of
    1–500 characters) are judged inside the import's transaction, after the attachments' bytes were
    written. The rows roll back and the route removes the bytes again: they stayed, named by no row."""
    records = json.loads(json.dumps(source))
    assert any(record["kind"] == "attachment" for record in records), "no attachment: the test proves nothing"
    records[max(i for i, record in enumerate(records) if record["kind"] == "task")]["row"]["title"] = ""
    board, client = empty_board
    reply = await client.request("POST", f"{API}/state", data=encode(records))
    assert reply.status == 400 and reply.error == "VALIDATION_FAILED", reply.body
    await assert_nothing_imported(board)


async def test_a_file_cut_in_the_middle_of_a_line_is_refused(
    source: list[dict], empty_board: tuple[RunningBoard, BoardClient]
) -> None:
    data = encode(source)
    cut = data[: len(data) // 2]
    board, client = empty_board
    reply = await client.request("POST", f"{API}/state", data=cut)
    assert reply.status == 400 and reply.error == "VALIDATION_FAILED"
    assert reply.body["error"]["details"]["line"] == cut.count(b"\n") + 1
    await assert_nothing_imported(board)


async def test_an_empty_body_is_refused(empty_board: tuple[RunningBoard, BoardClient]) -> None:
    board, client = empty_board
    reply = await client.request("POST", f"{API}/state", data=b"")
    assert reply.status == 400 and "empty" in reply.body["error"]["message"]
    await assert_nothing_imported(board)


async def test_a_board_with_projects_is_refused_with_409(
    source: list[dict], client: BoardClient, board: RunningBoard
) -> None:
    before = await row_counts(board, *IMPORTED_TABLES)
    reply = await client.request("POST", f"{API}/state", data=encode(source))
    assert reply.status == 409 and reply.error == "BOARD_NOT_EMPTY", reply.body
    assert reply.body["error"]["details"]["projects"] == 1
    assert await row_counts(board, *IMPORTED_TABLES) == before


async def test_an_import_without_an_actor_is_refused(source: list[dict], empty_board: tuple[RunningBoard, BoardClient]) -> None:
    board, client = empty_board
    reply = await client.request("POST", f"{API}/state", data=encode(source), actor=None)
    assert reply.status == 403 and reply.error == "ACTOR_REQUIRED"
    await assert_nothing_imported(board)


async def test_a_child_blocking_its_own_epic_is_no_ring_and_is_imported(
    source: list[dict], empty_board: tuple[RunningBoard, BoardClient]
) -> None:
    """The epic waits for its child twice over (as its child, and blocked by it): no card waits for
    itself, and the board allows the relation, so the import does too."""
    records = with_relations(json.loads(json.dumps(source)), ("parent", 0, 1), ("blocks", 1, 0))
    board, client = empty_board
    reply = await client.request("POST", f"{API}/state", data=encode(records))
    assert reply.status == 201, reply.body


async def test_a_task_label_holding_nul_is_refused_on_either_engine(
    source: list[dict], empty_board: tuple[RunningBoard, BoardClient]
) -> None:
    """The case above, without the look at the blob directory that keeps that test to SQLite: on
    PostgreSQL the card would have been imported, and every label filter over it refused."""
    board, client = empty_board
    reply = await client.request("POST", f"{API}/state", data=encode(_label_holding_nul(json.loads(json.dumps(source)))))
    assert reply.status == 400 and reply.error == "VALIDATION_FAILED", reply.body
    assert await row_counts(board, *IMPORTED_TABLES) == (0,) * len(IMPORTED_TABLES)
