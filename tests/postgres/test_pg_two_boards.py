"""Two ``taskd`` processes on one PostgreSQL database serve one board: one log, one token, one
set of blobs, login links and browser sessions good on either (docs/operations.md)."""

from __future__ import annotations

import time
from pathlib import Path

import aiohttp

from tests.postgres.support_taskd import Follower, board_process
from tests.support.board import BoardClient
from tests.support.waiting import async_wait_until


async def test_two_processes_serve_one_board(tmp_path: Path, postgres_url: str) -> None:
    a = board_process(tmp_path, "a", postgres_url)
    b = board_process(tmp_path, "b", postgres_url)
    try:
        # Each keeps its own data directory, with the database's one token in its token file.
        assert a.data_dir != b.data_dir and a.token == b.token
        assert not (b.data_dir / "board.sqlite").exists()
        async with aiohttp.ClientSession() as session:
            on_a, on_b = BoardClient(a.url, a.token, session), BoardClient(b.url, b.token, session)
            assert (await on_a.post("/api/v1/projects", {"id": "demo", "name": "Demo"})).status == 201

            # A write on A reaches a stream open on B, woken by NOTIFY (not the slow safety poll).
            follower = Follower(session, b.url, b.token, after=0).start()
            await follower.opened.wait()
            sent = time.perf_counter()
            task = (await on_a.post("/api/v1/tasks", {"project": "demo", "title": "Shared"})).body
            await follower.until(task["revision"], timeout=10)
            assert follower.arrivals[max(follower.arrivals)] - sent < 1.5, "the frame came by the safety poll, not NOTIFY"
            await follower.close()

            # Bytes uploaded through A are served by B.
            upload = await on_a.request("POST", f"/api/v1/tasks/{task['identifier']}/attachments?filename=notes.txt",
                                        data=b"shared bytes", headers={"Content-Type": "text/plain"})
            assert upload.status == 201, upload.body
            download = await on_b.request("GET", f"/api/v1/attachments/{upload.body['id']}")
            assert download.status == 200 and download.body == b"shared bytes"

            # A login link minted by A works on B, once.
            link = (await on_a.post("/api/v1/login-links", {})).body["url"]
            code = link.split("code=", 1)[1]
            async with session.get(f"{b.url}/login?code={code}", allow_redirects=False) as response:
                assert response.status == 302
                assert any(name.startswith("taskloom_session_") for name in response.cookies)
            async with session.get(f"{a.url}/login?code={code}", allow_redirects=False) as response:
                assert response.status == 401, "a code is good once, on any process"

            # A rotation on A reaches B: the new token works there, the old one stops working.
            old = a.token
            assert (await on_a.post("/api/v1/token/rotate", {})).status == 200
            new = a.token
            assert new != old

            async def b_took_the_new_token() -> bool:
                with_new = await BoardClient(b.url, new, session).get("/api/v1/board/status")
                with_old = await BoardClient(b.url, old, session).get("/api/v1/board/status")
                return with_new.status == 200 and with_old.status == 401

            await async_wait_until(b_took_the_new_token, timeout=10, what="process B to take the rotated token")
            assert b.token == new, "B rewrote its own token file for local taskctl"
    finally:
        a.stop()
        b.stop()
