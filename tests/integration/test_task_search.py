"""``GET /tasks?q=``: text search over title, identifier and description, on a real board.

The FTS5 index (migration 0007) and the portable LIKE path must give the same answer; the index is
kept by triggers, so raw writers and edits are searchable at once; bad input is a clear 400.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import pytest

from services.board.queries import tasks as task_queries
from tests.support.board import API, BoardClient, RunningBoard, activity_count, make_project, make_task, raw_connection

pytestmark = pytest.mark.asyncio


async def found(client: BoardClient, q: str, **params: str) -> list[str]:
    query = "&".join([f"q={quote(q)}", *(f"{k}={quote(v)}" for k, v in params.items())])
    reply = await client.get(f"{API}/tasks?{query}&limit=1000")
    assert reply.status == 200, reply.body
    return [task["identifier"] for task in reply.body["items"]]


async def portable(board: RunningBoard, q: str) -> list[str]:
    """The same question through the portable LIKE path, on the same file."""
    words = task_queries.search_words(q)
    clause, params, _ = task_queries.portable_text_match(words)
    rows = await board.store.query(
        lambda conn: conn.execute(
            f"SELECT identifier FROM tasks WHERE {clause} AND archived_at IS NULL ORDER BY rowid", params
        ).fetchall()
    )
    return [row[0] for row in rows]


@pytest.fixture
async def tasks(client: BoardClient) -> dict[str, dict[str, Any]]:
    made = {
        "guide": await make_task(client, title="Write the onboarding guide", description="Cover the hub and the CLI."),
        "login": await make_task(
            client, title="Login page explains itself", description="A used link says how to get a new one: taskctl open."
        ),
        "emoji": await make_task(client, title="Ship 🚀 the release", description="Tag 100% of the crates_io packages"),
        "bug": await make_task(client, title="Flaky test", kind="bug", description="Fails one run in fifty on CI"),
        "accents": await make_task(client, title="Écoles d'été", description="Übersicht der Kurse"),
    }
    await make_project(client, "other")
    made["other"] = await make_task(client, project="other", title="Onboarding for the other team")
    return made


CASES = [
    ("onboarding", ["DEMO-0001", "OTHER-0001"]),  # title, across projects
    ("ONBOARD", ["DEMO-0001", "OTHER-0001"]),  # case-insensitive, a part of a word
    ("taskctl open", ["DEMO-0002"]),  # every word, from the description
    ("guide hub", ["DEMO-0001"]),  # words from title and description together
    ("guide login", []),  # every word must occur
    ("demo-0003", ["DEMO-0003"]),  # the identifier
    ("0004", ["DEMO-0004"]),
    ("🚀", ["DEMO-0003"]),  # one character: below a trigram, the LIKE path answers
    ("CI", ["DEMO-0004"]),  # two characters ("CLI" does not hold them)
    ("100%", ["DEMO-0003"]),  # LIKE's wildcards are the person's text
    ("crates_io", ["DEMO-0003"]),
    ("p_c", []),  # `_` is not "any character" ("packages" would match it)
    ('"hub" OR NEAR(x', []),  # FTS5 syntax is text, never a query
    ("hub)", []),
    ("*", []),
    # Letters outside A-Z: found as written on either engine (the exact text always finds itself),
    # case-insensitive only in their ASCII letters, the one folding both engines' SQL shares.
    ("Écoles", ["DEMO-0005"]),
    ("ÉCOLES", ["DEMO-0005"]),
    ("Ü", ["DEMO-0005"]),
    ("Übersicht", ["DEMO-0005"]),
    ("été", ["DEMO-0005"]),
    ("écoles", []),
    ("ü", []),
    ("übersicht", []),
]


@pytest.mark.parametrize(("q", "expected"), CASES, ids=[case[0] for case in CASES])
async def test_q_finds_every_word_in_title_identifier_or_description(
    client: BoardClient, board: RunningBoard, tasks: dict[str, Any], q: str, expected: list[str]
) -> None:
    assert await found(client, q) == expected
    assert await portable(board, q) == expected, "the portable path answers the same"


async def test_q_combines_with_the_other_filters_and_pages(client: BoardClient, tasks: dict[str, Any]) -> None:
    assert await found(client, "onboarding", project="demo") == ["DEMO-0001"]
    assert await found(client, "CI", kind="bug") == ["DEMO-0004"]
    first = await client.get(f"{API}/tasks?q=onboarding&limit=1")
    assert [t["identifier"] for t in first.body["items"]] == ["DEMO-0001"] and first.body["next_cursor"]
    second = await client.get(f"{API}/tasks?q=onboarding&limit=1&cursor={first.body['next_cursor']}")
    assert [t["identifier"] for t in second.body["items"]] == ["OTHER-0001"]


async def test_the_index_follows_edits_and_raw_writes(client: BoardClient, board: RunningBoard, tasks: dict[str, Any]) -> None:
    guide = tasks["guide"]
    await client.patch(f"{API}/tasks/{guide['id']}", {"title": "Write the setup guide"})
    assert await found(client, "onboarding") == ["OTHER-0001"]
    assert await found(client, "setup") == ["DEMO-0001"]
    await client.patch(f"{API}/tasks/{guide['id']}", {"description": "Now about zeppelins"})
    assert await found(client, "zeppelin") == ["DEMO-0001"]
    assert await found(client, "hub") == []
    # A script writing the file directly is indexed by the triggers too.
    with raw_connection(board) as conn:
        conn.execute("UPDATE tasks SET title = 'Raw quokka title' WHERE identifier = 'DEMO-0004'")
    assert await found(client, "quokka") == ["DEMO-0004"]
    with raw_connection(board) as conn:
        # FTS5 compares the index with the table it indexes; any drift raises here.
        conn.execute("INSERT INTO tasks_search (tasks_search, rank) VALUES ('integrity-check', 1)")


BAD = [
    ("", "q must hold some text"),
    ("   ", "q must hold some text"),
    ("x" * 201, "at most 200 characters"),
    (" ".join(f"w{i}" for i in range(9)), "at most 8 words"),
    ("a\x00b", "U+0000"),
]


@pytest.mark.parametrize(("q", "message"), BAD, ids=["empty", "blank", "too-long", "too-many-words", "nul"])
async def test_bad_q_is_a_clear_400_and_writes_nothing(
    client: BoardClient, board: RunningBoard, tasks: dict[str, Any], q: str, message: str
) -> None:
    before = await activity_count(board)
    reply = await client.get(f"{API}/tasks?q={quote(q)}")
    assert reply.status == 400 and reply.error == "VALIDATION_FAILED", reply.body
    assert message in reply.body["error"]["message"]
    assert reply.body["error"]["details"]["field"] == "q"
    assert await activity_count(board) == before


async def test_q_given_twice_is_refused(client: BoardClient, tasks: dict[str, Any]) -> None:
    reply = await client.get(f"{API}/tasks?q=guide&q=hub")
    assert reply.status == 400 and reply.error == "VALIDATION_FAILED"
