"""``POST /api/v1/state`` (``taskctl import state``) of hand-edited files: refused by line, or harmless.

docs/operations.md: "The import checks every line before it writes anything, and a bad line is
named"; SPEC §1.8: "Bad input gets a clear error and loses nothing. Every refusal names a stable
code". Each test below edits one field of a real export and holds the import to that: either the
file is refused whole (400 naming the line, nothing written), or the board it leaves works.
"""

from __future__ import annotations

from urllib.parse import quote

import pytest

from tests.support.board import API, BoardClient, RunningBoard, make_task
from tests.support.state_files import assert_refused, exported

pytestmark = pytest.mark.asyncio


def task_lines(records: list[dict]) -> list[dict]:
    return [record["row"] for record in records if record["kind"] == "task"]


def task_line(records: list[dict]) -> int:
    """The line number of the first task in the file, as a refusal names it."""
    return next(number for number, record in enumerate(records, start=1) if record["kind"] == "task")


async def test_an_identifier_that_is_not_its_number_is_refused_naming_its_line(
    client: BoardClient, empty_board: tuple[RunningBoard, BoardClient]
) -> None:
    """A task line whose identifier names a number the project has not reached yet (DEMO-0002 on
    task number 1, next_number 2): refused, naming the line. It used to be accepted, and every later
    create in the project collided with the identifier UNIQUE constraint (409) for ever: the
    counter never moves past the taken identifier."""
    await make_task(client)
    records = await exported(client)
    task = task_lines(records)[0]
    assert task["number"] == 1 and task["identifier"] == "DEMO-0001"
    task["identifier"] = "DEMO-0002"
    await assert_refused(empty_board, records, line=task_line(records))


async def test_a_heartbeat_that_is_not_a_timestamp_is_refused_naming_its_line(
    client: BoardClient, empty_board: tuple[RunningBoard, BoardClient]
) -> None:
    """An in_progress card whose heartbeat_at is not a timestamp: a bad line, so 400 naming it and
    nothing written. The parse used to let any text through and the conditions' judgement inside
    the import's transaction raises ValueError: 500 INTERNAL, "see the board log"."""
    task = await make_task(client)
    assert (await client.post(f"{API}/tasks/{task['id']}/claim", {})).status == 200
    records = await exported(client)
    task_lines(records)[0]["heartbeat_at"] = "yesterday"
    await assert_refused(empty_board, records, line=task_line(records))


async def test_a_terminal_at_that_is_not_a_timestamp_is_refused_naming_its_line(
    client: BoardClient, empty_board: tuple[RunningBoard, BoardClient]
) -> None:
    """A canceled card whose terminal_at is not a timestamp: refused, naming the line. The import
    used to take it (201), and every ``task archive`` of the card was 500 INTERNAL (strptime in
    commands/tasks.py _age_seconds)."""
    task = await make_task(client)
    assert (await client.post(f"{API}/tasks/{task['id']}/move", {"to": "canceled"})).status == 200
    records = await exported(client)
    row = task_lines(records)[0]
    assert row["status"] == "canceled" and row["terminal_at"] is not None
    row["terminal_at"] = "last week"
    await assert_refused(empty_board, records, line=task_line(records))


async def test_a_holder_past_the_actor_limit_is_refused_naming_its_line(
    client: BoardClient, empty_board: tuple[RunningBoard, BoardClient]
) -> None:
    """claimed_by is at most ACTOR_ID_MAX_CHARS (200) characters through every write command. A file
    with a 100,000-character holder and a heartbeat from 2020 (a stale claim anyone may take,
    SPEC §4.4): refused, naming the line. The import used to take it, and bob's claim was refused
    for ever: the task_claimed row it would write names the holder (stoleFrom) and is larger than a
    frame (400, "send less text at once": bob sent nothing)."""
    task = await make_task(client)
    assert (await client.post(f"{API}/tasks/{task['id']}/claim", {})).status == 200
    records = await exported(client)
    row = task_lines(records)[0]
    row["claimed_by"] = "x" * 100_000
    row["heartbeat_at"] = "2020-01-01T00:00:00.000Z"
    await assert_refused(empty_board, records, line=task_line(records))


async def test_an_attachment_name_with_a_path_is_refused_whole(
    client: BoardClient, empty_board: tuple[RunningBoard, BoardClient]
) -> None:
    """The board refuses an attachment filename with '/' or '..' on upload and on replace
    (commands/attachments.py check_filename). A state file naming one ("../../x") must be refused
    whole with nothing written; it used to be imported as it was (201)."""
    task = await make_task(client)
    added = await client.request("POST", f"{API}/tasks/{task['id']}/attachments?filename={quote('notes.txt')}",
                                 data=b"the notes", headers={"Content-Type": "text/plain"})
    assert added.status == 201, added.body
    records = await exported(client)
    attachment = next(record for record in records if record["kind"] == "attachment")
    attachment["row"]["filename"] = "../../x"
    refused = await client.request("PUT", f"{API}/attachments/{added.body['id']}?filename={quote('../../x')}",
                                   data=b"the notes", headers={"Content-Type": "text/plain"})
    assert refused.status == 400, "the board's own write refuses that name: the test stands on it"
    await assert_refused(empty_board, records, line=None)


@pytest.mark.parametrize("content_type", ["", "  text/plain  "])
async def test_a_content_type_no_upload_stores_is_refused_whole(
    client: BoardClient, empty_board: tuple[RunningBoard, BoardClient], content_type: str
) -> None:
    """An upload stores its Content-Type trimmed, and none at all as application/octet-stream
    (commands/attachments.py check_content_type). A file holding an empty or padded one was
    imported as it was, and every download of it then answered ``Content-Type:`` with nothing."""
    task = await make_task(client)
    added = await client.request("POST", f"{API}/tasks/{task['id']}/attachments?filename=notes.txt",
                                 data=b"the notes", headers={"Content-Type": "text/plain"})
    assert added.status == 201, added.body
    records = await exported(client)
    attachment = next(record for record in records if record["kind"] == "attachment")
    attachment["row"]["content_type"] = content_type
    line = next(number for number, record in enumerate(records, start=1) if record["kind"] == "attachment")
    await assert_refused(empty_board, records, line=line)


async def test_a_task_id_that_is_not_a_board_made_id_is_refused_naming_its_line(
    client: BoardClient, empty_board: tuple[RunningBoard, BoardClient]
) -> None:
    """A task is found by id before identifier (queries/tasks.find_task), and the board makes every
    id itself (a lowercase uuid). A file whose second card had the id 'DEMO-0001' was imported, and
    then ``GET /tasks/DEMO-0001`` answered that card, not the one numbered DEMO-0001."""
    await make_task(client, title="first")
    await make_task(client, title="second")
    records = await exported(client)
    first, second = task_lines(records)[:2]
    old_id = second["id"]
    for record in records:
        for name, value in record.get("row", {}).items():
            if value == old_id:
                record["row"][name] = first["identifier"]
    await assert_refused(empty_board, records, line=task_line(records) + 1)


@pytest.mark.parametrize("labels", [["UI"], [" ui"], ["ui", "ui"], ["école"]])
async def test_task_labels_no_write_stores_are_refused_naming_the_line(
    client: BoardClient, empty_board: tuple[RunningBoard, BoardClient], labels: list[str]
) -> None:
    """A write stores a card's labels normalised (commands/common.normalise_labels: trimmed, lower
    case, of letters, digits and ``. _ : / -``, each once) and so does ``GET /tasks?label=`` with
    the name it filters by. A file holding 'UI' was imported as it was: no filter could ever find
    that card by its label ('UI' is read as 'ui', which the card does not hold)."""
    await make_task(client, labels=["ui"])
    records = await exported(client)
    task_lines(records)[0]["labels"] = labels
    await assert_refused(empty_board, records, line=task_line(records))


async def test_a_label_name_no_write_stores_is_refused_naming_the_line(
    client: BoardClient, empty_board: tuple[RunningBoard, BoardClient]
) -> None:
    await make_task(client, labels=["ui"])
    records = await exported(client)
    at = next(number for number, record in enumerate(records, start=1) if record["kind"] == "label")
    records[at - 1]["row"]["name"] = "é"  # lower(trim()) leaves it be: the schema's check passes it
    await assert_refused(empty_board, records, line=at)


@pytest.mark.parametrize("half", [{"claimed_by_kind": None}, {"claimed_by": None}])
async def test_a_holder_without_its_kind_is_refused_naming_its_line(
    client: BoardClient, empty_board: tuple[RunningBoard, BoardClient], half: dict[str, None]
) -> None:
    """A claim writes its holder's kind and id together and a release clears both, as the schema
    holds the assignee's and the reporter's pairs. A file with one half was imported, and left a
    card held by nobody a claim or heartbeat could name."""
    task = await make_task(client)
    claimed = await client.as_actor("claude", "worker-1").post(f"{API}/tasks/{task['id']}/claim", {})
    assert claimed.status == 200, claimed.body
    records = await exported(client)
    task_lines(records)[0].update(half)
    await assert_refused(empty_board, records, line=task_line(records))


#: One field of one line set to a value no write leaves, each with the kind of the line it is on.
NO_WRITE_LEAVES = [
    ("task", {"title": "   "}),
    ("task", {"version": 0}),
    ("task", {"number": 0, "identifier": "DEMO-0000"}),
    ("task", {"reporter_id": " ", "reporter_kind": "human"}),
    ("task", {"archived_at": "2026-01-01T00:00:00.000Z"}),
    ("comment", {"body": "\t"}),
    ("comment", {"round": 0}),
    ("comment", {"actor_kind": ""}),
    ("acceptance_item", {"position": -1}),
    ("actor", {"use_count": -3}),
]


@pytest.mark.parametrize(("kind", "edit"), NO_WRITE_LEAVES, ids=[f"{kind}-{next(iter(edit))}" for kind, edit in NO_WRITE_LEAVES])
async def test_a_value_no_write_leaves_is_refused_naming_its_line(
    client: BoardClient, empty_board: tuple[RunningBoard, BoardClient], kind: str, edit: dict[str, object]
) -> None:
    """Values the board's own writes never leave: a blank title, comment or actor name, a version
    or round below 1, a negative position or use count, and an archived card that is not done or
    canceled (archiving needs one, and an archived card is never moved again: a live one with the
    mark is stuck out of every list). Each was imported as it was, on both engines."""
    task = await make_task(client, assignee_kind="human", assignee_id="ann")
    assert (await client.post(f"{API}/tasks/{task['id']}/comments", {"body": "a note"})).status == 201
    assert (await client.post(f"{API}/tasks/{task['id']}/acceptance", {"items": ["it works"]})).status in (200, 201)
    records = await exported(client)
    at = next(number for number, record in enumerate(records, start=1) if record["kind"] == kind)
    records[at - 1]["row"].update(edit)
    await assert_refused(empty_board, records, line=at)
