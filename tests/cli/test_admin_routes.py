"""The board side of ``taskctl token rotate`` and ``taskctl board status`` (services/board/routes/admin.py)."""

from __future__ import annotations

import os

import pytest

from services.board.keys import CREDENTIALS
from tests.support.board import BoardClient, RunningBoard

pytestmark = pytest.mark.asyncio


async def activity_count(board: RunningBoard) -> int:
    return await board.store.query(lambda conn: conn.execute("SELECT count(*) FROM task_activities").fetchone()[0])


async def test_rotation_swaps_the_token_file_first_and_never_answers_it(client: BoardClient, board: RunningBoard) -> None:
    old = board.token
    before = await activity_count(board)
    reply = await client.post("/api/v1/token/rotate")
    assert reply.status == 200 and reply.body == {"rotated": True, "token_file": str(board.data_dir / "token")}
    new = (board.data_dir / "token").read_text().strip()
    assert new != old and new.startswith("tl_") and new not in str(reply.body) and new not in str(dict(reply.headers))
    assert (board.data_dir / "token").stat().st_mode & 0o777 == 0o600
    assert (await client.get("/api/v1/meta")).error == "UNAUTHORIZED"  # the old token, at once
    fresh = BoardClient(board.url, new, client.session)
    assert (await fresh.get("/api/v1/meta")).status == 200
    assert await activity_count(board) == before  # not an event


async def test_rotation_kills_browser_sessions(client: BoardClient, board: RunningBoard) -> None:
    link = (await client.post("/api/v1/login-links")).body["url"]
    login = await client.session.get(link, allow_redirects=False)
    name = board.app[CREDENTIALS].cookie_name  # taskloom_session_<board id>
    cookie = login.cookies[name].value
    cookie_header = {"Cookie": f"{name}={cookie}"}
    assert (await client.get("/api/v1/meta", token=False, headers=cookie_header)).status == 200
    assert (await client.post("/api/v1/token/rotate")).status == 200
    assert (await client.get("/api/v1/meta", token=False, headers=cookie_header)).error == "UNAUTHORIZED"


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        ({"actor": None}, "ACTOR_REQUIRED"),
        ({"token": False}, "UNAUTHORIZED"),
        ({"json_body": {"token": "tl_" + "0" * 64}}, "VALIDATION_FAILED"),
    ],
    ids=["no actor", "no token", "a body"],
)
async def test_refused_rotations_leave_the_token_alone(
    client: BoardClient, board: RunningBoard, kwargs: dict, code: str
) -> None:
    before = (board.data_dir / "token").read_text()
    stamp = os.stat(board.data_dir / "token").st_mtime_ns
    reply = await client.request("POST", "/api/v1/token/rotate", **{"json_body": {}, **kwargs})
    assert reply.error == code
    assert (board.data_dir / "token").read_text() == before
    assert os.stat(board.data_dir / "token").st_mtime_ns == stamp
    assert (await client.get("/api/v1/meta")).status == 200


async def test_status_names_where_the_board_runs_never_the_token(client: BoardClient, board: RunningBoard) -> None:
    reply = await client.get("/api/v1/board/status")
    assert reply.status == 200
    body = reply.body
    assert body["pid"] == os.getpid()
    assert (body["data_dir"], body["database"], body["token_file"]) == (
        str(board.data_dir), str(board.data_dir / "board.sqlite"), str(board.data_dir / "token"),
    )
    assert body["board_id"].startswith("brd_") and body["revision"] == 0 and body["uptime_seconds"] >= 0
    assert board.token not in str(body)
    assert (await client.get("/api/v1/board/status", token=False)).error == "UNAUTHORIZED"
    assert (await client.get("/api/v1/board/status?verbose=1")).error == "VALIDATION_FAILED"
