"""The pure session logic: bytes in, actions out, no sockets (services/hub/protocol.py)."""

from __future__ import annotations

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from services.hub.protocol import REQUEST_VALIDATORS, Close, Request, Send, Session
from shared import hub_protocol as hp

TOKEN = "th_secret"


def line(message: object) -> bytes:
    return orjson.dumps(message) + b"\n"


def greeted() -> Session:
    session = Session(TOKEN)
    assert session.feed(line(hp.hello(TOKEN))) == [Request("hello", {"proof": None})]
    return session


def error_code(actions: list) -> str:
    sends = [a for a in actions if isinstance(a, Send)]
    assert len(sends) == 1 and sends[0].message["type"] == "error", actions
    return sends[0].message["code"]


def test_hello_then_requests() -> None:
    session = greeted()
    assert session.greeted
    assert session.feed(line({"type": "ping"})) == [Request("ping")]
    assert session.feed(line({"type": "follow", "after": 7, "idle_ms": 0})) == [
        Request("follow", {"after": 7, "idle_ms": 0, "signals": True, "board_id": None})
    ]


def test_a_hello_with_a_nonce_proves_the_token_without_sending_it_and_is_answered_with_the_hubs_proof() -> None:
    """A client library sends an HMAC of its nonce, never the token (a listener that is not the
    hub must not learn it), and the welcome's proof is one only a holder of the token computes."""
    nonce = hp.new_nonce()
    hello = hp.hello(TOKEN, nonce=nonce)
    assert "token" not in hello and TOKEN not in orjson.dumps(hello).decode()
    assert Session(TOKEN).feed(line(hello)) == [Request("hello", {"proof": hp.welcome_proof(TOKEN, nonce)})]
    assert hp.welcome_proof(TOKEN, nonce) != hp.hello_proof(TOKEN, nonce)  # no reflecting a proof back
    # A person with nc may add a nonce to the clear token and check the answer too.
    clear = {**hp.hello(TOKEN), "nonce": nonce}
    assert Session(TOKEN).feed(line(clear)) == [Request("hello", {"proof": hp.welcome_proof(TOKEN, nonce)})]


def test_a_wrong_proof_or_a_malformed_nonce_is_unauthorized() -> None:
    nonce = hp.new_nonce()
    for hello in (
        hp.hello("th_other", nonce=nonce),
        {**hp.hello(TOKEN, nonce=nonce), "nonce": hp.new_nonce()},  # a proof of another nonce
        {"type": "hello", "protocol": hp.HUB_PROTOCOL, "proof": hp.hello_proof(TOKEN, nonce)},  # no nonce
        {**hp.hello(TOKEN), "nonce": "short"},
        {**hp.hello(TOKEN), "nonce": 7},
    ):
        session = Session(TOKEN)
        actions = session.feed(line(hello))
        assert error_code(actions) == hp.UNAUTHORIZED and actions[-1] == Close(hp.UNAUTHORIZED), hello
        assert not session.greeted


def test_follow_may_name_the_board_of_its_cursor() -> None:
    session = greeted()
    assert session.feed(line(hp.follow(after=3, board_id="brd_1"))) == [
        Request("follow", {"after": 3, "idle_ms": hp.DEFAULT_IDLE_MS, "signals": True, "board_id": "brd_1"})
    ]
    for bad in ("", 7, "b" * (hp.MAX_BOARD_ID + 1)):
        assert error_code(greeted().feed(line({"type": "follow", "after": 3, "board_id": bad}))) == hp.VALIDATION_FAILED


def test_follow_defaults_idle_to_45_s() -> None:
    session = greeted()
    assert session.feed(line({"type": "follow"})) == [
        Request("follow", {"after": None, "idle_ms": hp.DEFAULT_IDLE_MS, "signals": True, "board_id": None})
    ]


def test_any_split_of_the_stream_gives_the_same_actions() -> None:
    stream = line(hp.hello(TOKEN)) + b"\r\n\n" + line({"type": "ping"}) + line({"type": "follow", "after": 3})
    whole = Session(TOKEN).feed(stream)
    assert [type(a) for a in whole] == [Request, Request, Request]

    @settings(max_examples=200)
    @given(st.lists(st.integers(min_value=0, max_value=len(stream)), max_size=12))
    def check(cuts: list[int]) -> None:
        session = Session(TOKEN)
        actions = []
        points = [0, *sorted(cuts), len(stream)]
        for start, end in zip(points, points[1:], strict=False):
            actions += session.feed(stream[start:end])
        assert actions == whole

    check()


def test_first_message_must_be_hello() -> None:
    session = Session(TOKEN)
    actions = session.feed(line({"type": "ping"}))
    assert error_code(actions) == hp.HELLO_REQUIRED and isinstance(actions[-1], Close)
    assert session.closed and session.feed(line(hp.hello(TOKEN))) == []


def test_wrong_token_is_unauthorized_and_closes() -> None:
    session = Session(TOKEN)
    actions = session.feed(line(hp.hello("th_wrong")))
    assert error_code(actions) == hp.UNAUTHORIZED and isinstance(actions[-1], Close)
    assert session.closed and not session.greeted


def test_missing_token_is_unauthorized() -> None:
    actions = Session(TOKEN).feed(line({"type": "hello", "protocol": hp.HUB_PROTOCOL}))
    assert error_code(actions) == hp.UNAUTHORIZED


def test_other_generation_is_a_protocol_mismatch() -> None:
    for protocol in (hp.HUB_PROTOCOL + 1, 0, "1", True, None):
        session = Session(TOKEN)
        actions = session.feed(line({"type": "hello", "protocol": protocol, "token": TOKEN}))
        assert error_code(actions) == hp.PROTOCOL_MISMATCH, protocol
        assert isinstance(actions[-1], Close) and session.closed


def test_not_json_closes_the_session() -> None:
    session = greeted()
    for bad in (b"this is not json\n", b"[1,2]\n", b'{"no":"type"}\n'):
        session = greeted()
        actions = session.feed(bad)
        assert error_code(actions) == hp.MALFORMED_LINE and isinstance(actions[-1], Close)
        assert session.closed


def test_unknown_type_keeps_the_session() -> None:
    session = greeted()
    actions = session.feed(line({"type": "subscribe"}))
    assert error_code(actions) == hp.UNKNOWN_TYPE and not session.closed
    assert session.feed(line({"type": "ping"})) == [Request("ping")]


def test_a_declared_request_without_a_validator_is_not_available() -> None:
    validators = {name: check for name, check in REQUEST_VALIDATORS.items() if name != "watch-stop"}
    session = Session(TOKEN, validators=validators)
    session.feed(line(hp.hello(TOKEN)))
    assert error_code(session.feed(line({"type": "watch-stop", "registration_id": "w_1"}))) == hp.NOT_AVAILABLE
    assert not session.closed


def test_bad_follow_fields_keep_the_session() -> None:
    session = greeted()
    for bad in ({"after": -1}, {"after": "7"}, {"after": True}, {"idle_ms": 1.5}, {"since": 3}):
        actions = session.feed(line({"type": "follow", **bad}))
        assert error_code(actions) == hp.VALIDATION_FAILED, bad
    assert not session.following and not session.closed
    assert session.feed(line({"type": "follow"}))[0].type == "follow"


def test_second_follow_is_refused() -> None:
    session = greeted()
    session.feed(line({"type": "follow"}))
    assert error_code(session.feed(line({"type": "follow"}))) == hp.ALREADY_FOLLOWING
    assert not session.closed


def test_second_hello_is_refused_without_closing() -> None:
    session = greeted()
    assert error_code(session.feed(line(hp.hello(TOKEN)))) == hp.VALIDATION_FAILED
    assert not session.closed


def test_a_line_over_one_mib_closes_after_the_lines_before_it() -> None:
    session = greeted()
    actions = session.feed(line({"type": "ping"}) + b"x" * (2 << 20))
    assert actions[0] == Request("ping")
    assert error_code(actions[1:]) == hp.PAYLOAD_TOO_LARGE and isinstance(actions[-1], Close)
    assert session.closed


def test_a_long_line_fed_in_pieces_is_caught_before_its_newline() -> None:
    session = greeted()
    actions: list = []
    for _ in range(40):
        actions += session.feed(b"y" * 65536)
        if session.closed:
            break
    assert session.closed and error_code(actions) == hp.PAYLOAD_TOO_LARGE


def test_hello_timeout_only_before_hello() -> None:
    waiting = Session(TOKEN)
    actions = waiting.hello_timed_out()
    assert error_code(actions) == hp.HELLO_TIMEOUT_CODE and isinstance(actions[-1], Close)
    assert greeted().hello_timed_out() == []


def test_end_of_input() -> None:
    assert Session(TOKEN).feed_eof() == [Close("eof")]
    idle = greeted()
    assert idle.feed_eof() == [Send(hp.eof()), Close("eof")]
    streaming = greeted()
    streaming.feed(line({"type": "follow"}))
    assert streaming.feed_eof() == []  # nc -N half-closes; the stream goes on


def test_a_last_request_without_a_newline_is_answered_before_eof() -> None:
    """``printf '{"type":"ping"}' | nc -N``: the request is served, then ``eof`` says all was answered."""
    session = greeted()
    assert session.feed(orjson.dumps(hp.ping())) == []
    actions = session.feed_eof()
    assert [type(action) for action in actions] == [Request, Send, Close]
    assert actions[0].type == "ping" and actions[1].message == hp.eof()
    following = greeted()
    following.feed(orjson.dumps({"type": "follow"}))
    assert [action.type for action in following.feed_eof() if isinstance(action, Request)] == ["follow"]
    assert following.following  # and the stream goes on past the half-close
