"""A client without a token cannot make the board write its log at the rate it sends garbage.

Every request aiohttp's parser refuses is answered before any authentication, and a board that
``taskctl`` autostarted writes its log to ``<data_dir>/logs/taskd.log``, which nothing rotates.
One line per refusal let any local user grow that file -- on the board owner's disk and quota --
as fast as it could send bare-LF requests. The refusals are logged like ``idle_connections_closed``:
the first at once, then at most one ``request_unparseable`` line per interval carrying how many
there were (``count``) and of which kind (``kinds``), so every refusal is still accounted for.
"""

from __future__ import annotations

import json
from pathlib import Path

from services.board.httpserver import LOG_INTERVAL
from tests.support.board import TaskdProcess
from tests.support.other_user import OtherUser, other_user  # noqa: F401 (fixture)
from tests.support.waiting import wait_until

REQUESTS = 2000
#: 2000 refusals in a few seconds: the first line, then one per LOG_INTERVAL.
LINES_AT_MOST = 10

#: Another uid: REQUESTS bare-LF requests, one per connection, each read to the board's answer.
SPAM = r"""
import socket, sys
port, count = int(sys.argv[1]), int(sys.argv[2])
answered = 0
for _ in range(count):
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"GET / HTTP/1.1\nHost: 127.0.0.1\n\n")
        if s.recv(65536).split(b" ", 2)[1:2] == [b"400"]:
            answered += 1
print("ANSWERED", answered, flush=True)
"""


def refusal_lines(log_path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in log_path.read_text().splitlines() if '"request_unparseable"' in line]


def test_unparseable_requests_from_another_user_are_logged_at_most_once_per_interval(
    tmp_path: Path, other_user: OtherUser  # noqa: F811
) -> None:
    board = TaskdProcess(data_dir=tmp_path / "data", runtime_dir=tmp_path / "run",
                         log_path=tmp_path / "data" / "logs" / "taskd.log")
    (tmp_path / "data" / "logs").mkdir(parents=True, mode=0o700)
    board.start()
    try:
        done = other_user.run(SPAM, board.url.rsplit(":", 1)[1], str(REQUESTS), timeout=120)
        assert done.returncode == 0 and f"ANSWERED {REQUESTS}" in done.stdout, (done.stdout, done.stderr)

        # The refusals after the first are written when their interval ends: wait for all of them.
        def all_counted() -> list[dict[str, object]] | None:
            lines = refusal_lines(board.log_path)
            return lines if sum(int(line.get("count", 1)) for line in lines) >= REQUESTS else None  # type: ignore[call-overload]

        lines = wait_until(all_counted, timeout=LOG_INTERVAL * 3, what="every refusal to be counted in the log")
        assert len(lines) <= LINES_AT_MOST, (
            f"{REQUESTS} malformed requests from uid {other_user.uid} wrote {len(lines)} request_unparseable lines"
        )
        assert sum(int(line.get("count", 1)) for line in lines) == REQUESTS  # type: ignore[call-overload]
        for line in lines:
            kinds = line["kinds"]
            assert isinstance(kinds, dict) and sum(kinds.values()) == line["count"], line
            assert line["level"] == "warning" and line["remote"] == "127.0.0.1", line
        assert board.api("GET", "/api/v1/meta")["board_id"].startswith("brd_"), "the board still serves"
    finally:
        board.stop()
