"""The client's record of which board its cursor comes from (``follow.board_id``), pure."""

from __future__ import annotations

from typing import Any

from services.hub.client import CursorBoard, HubSession
from shared import hub_protocol as hp


def session(board_id: str | None) -> HubSession:
    welcome = hp.welcome(board_url="http://127.0.0.1:7431", board_id=board_id, revision=3)
    return HubSession(None, None, welcome)  # type: ignore[arg-type]  # only the welcome is read


def follow_after(history: CursorBoard, after: int | None) -> dict[str, Any]:
    return history.follow(after=after, idle_ms=0)


def test_a_resume_names_the_board_whose_records_moved_the_cursor() -> None:
    history = CursorBoard()
    assert follow_after(history, 7) == hp.follow(after=7, idle_ms=0)  # a cursor from elsewhere: no claim
    history.opened(session("brd_a"))
    assert history.board_id is None  # nothing read on this session yet
    history.saw(hp.event(revision=8, activity={}))
    assert follow_after(history, 8) == hp.follow(after=8, idle_ms=0, board_id="brd_a")
    assert follow_after(history, None) == hp.follow(idle_ms=0)  # live: no cursor, no board


def test_after_a_reset_no_board_is_claimed_until_the_next_welcome() -> None:
    history = CursorBoard()
    history.opened(session("brd_a"))
    history.saw(hp.heartbeat(revision=9))
    history.saw(hp.reset(reason=hp.RESET_BOARD_CHANGED, revision=4))
    history.saw(hp.event(revision=5, activity={}))
    assert history.board_id is None  # the hub may follow another board now, whose id the stream does not say
    history.opened(session("brd_b"))
    history.saw(hp.event(revision=6, activity={}))
    assert history.board_id == "brd_b"


def test_a_saved_cursor_names_its_board_in_the_first_follow() -> None:
    history = CursorBoard(board_id="brd_a")  # what a restarted loop subscriber read from its state file
    history.opened(session("brd_b"))
    assert follow_after(history, 8) == hp.follow(after=8, idle_ms=0, board_id="brd_a")
    history.saw(hp.reset(reason=hp.RESET_BOARD_CHANGED, revision=3))
    assert history.board_id is None


def test_a_named_board_the_hub_had_not_reached_yet_stands_until_a_reset() -> None:
    history = CursorBoard(board_id="brd_a")
    history.opened(session(None))  # welcomed before the hub's first contact with the board
    assert follow_after(history, 8) == hp.follow(after=8, idle_ms=0, board_id="brd_a")
    history.saw(hp.heartbeat(revision=8))  # no reset at first contact: the board is the one named
    assert history.board_id == "brd_a"
