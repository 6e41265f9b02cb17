"""The hub's wire schema in shared/: key derivation and message constructors."""

from __future__ import annotations

import pytest

from shared import hub_protocol as hp

TOKEN = "tl_" + "ab" * 32


def test_key_is_stable_per_resolved_url_and_token() -> None:
    key = hp.hub_key("http://127.0.0.1:7431", TOKEN)
    assert len(key) == 16 and TOKEN not in key
    assert hp.hub_key("HTTP://127.0.0.1:7431/", TOKEN) == key
    assert hp.hub_key("http://127.0.0.1:7432", TOKEN) != key
    assert hp.hub_key("http://127.0.0.1:7431", "tl_" + "cd" * 32) != key  # a rotated token: another hub
    assert hp.resolve_board_url("http://LOCALHOST") == "http://localhost:80"


def test_key_refuses_what_is_not_a_url() -> None:
    with pytest.raises(ValueError):
        hp.hub_key("127.0.0.1:7431", TOKEN)


def test_fingerprint_matches_the_boards() -> None:
    from services.board.auth import token_fingerprint

    assert hp.token_fingerprint(TOKEN) == token_fingerprint(TOKEN)


def test_constructors_refuse_undeclared_values() -> None:
    with pytest.raises(ValueError):
        hp.error("NOPE", "x")
    with pytest.raises(ValueError):
        hp.reset(reason="because", revision=1)
    with pytest.raises(ValueError):
        hp.open_(revision=1, replay="db")
    assert hp.FATAL_ERRORS <= hp.HUB_ERRORS


def test_messages_have_the_documented_shape() -> None:
    assert hp.hello("t") == {"type": "hello", "protocol": hp.HUB_PROTOCOL, "token": "t"}
    assert hp.welcome(board_url="http://h:1", board_id="brd_x", revision=4) == {
        "type": "welcome", "protocol": hp.HUB_PROTOCOL, "board": {"url": "http://h:1", "board_id": "brd_x"}, "revision": 4,
    }
    assert hp.follow() == {"type": "follow"}
    assert hp.follow(after=3, idle_ms=0) == {"type": "follow", "after": 3, "idle_ms": 0}
    assert hp.error("UNKNOWN_TYPE", "m", type="x") == {
        "type": "error", "code": "UNKNOWN_TYPE", "message": "m", "details": {"type": "x"},
    }
