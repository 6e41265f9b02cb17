"""The token a rotation on one ``taskd`` process answered with is good at once on every other
process on the database (docs/operations.md, "Several boards on one PostgreSQL database"): behind
a load balancer the very next request of whoever rotated may go to another process. That process
used to refuse it (401) until the rotation's notification reached it, a few milliseconds later,
and a 401 is final for the hub (exit 77) and for ``taskctl``."""

from __future__ import annotations

from pathlib import Path

import aiohttp

from tests.postgres.support_taskd import board_process
from tests.support.board import BoardClient

#: Rotations, each followed at once by a write on the other process with the new token: most
#: used to meet the 401.
ROUNDS = 10


async def test_a_token_rotated_on_one_process_is_accepted_at_once_on_the_other(
    tmp_path: Path, postgres_url: str,
) -> None:
    a = board_process(tmp_path, "a", postgres_url)
    b = board_process(tmp_path, "b", postgres_url)
    try:
        async with aiohttp.ClientSession() as session:
            for round_ in range(ROUNDS):
                rotated = await BoardClient(a.url, a.token, session).post("/api/v1/token/rotate", {})
                assert rotated.status == 200, rotated.body
                new = a.token
                written = await BoardClient(b.url, new, session).post("/api/v1/projects", {"id": f"p{round_}"})
                assert written.status == 201, (round_, written.body)
            wrong = await BoardClient(b.url, "tl_" + "0" * 64, session).get("/api/v1/board/status")
            assert wrong.status == 401, "a token the database does not hold is still refused"
    finally:
        a.stop()
        b.stop()
