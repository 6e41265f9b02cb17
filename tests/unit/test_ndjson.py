"""NDJSON framing for the hub protocol: encode, frame under any split, decode, refuse bad lines."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared.errors import ERROR_STATUS, TaskloomError
from shared.ndjson import MAX_LINE, LineFramer, LineTooLong, MessageError, decode_line, encode_line


def frame(*chunks: bytes, framer: LineFramer | None = None) -> list[bytes]:
    framer = framer or LineFramer()
    lines: list[bytes] = []
    for chunk in chunks:
        lines += framer.feed(chunk)
    return lines


@st.composite
def _splits(draw: st.DrawFn, stream: bytes) -> list[bytes]:
    """Cut ``stream`` at arbitrary points, or into 1-byte pieces."""
    if draw(st.booleans()):
        return [stream[i : i + 1] for i in range(len(stream))]
    cuts = sorted(draw(st.sets(st.integers(min_value=0, max_value=len(stream)))))
    bounds = [0, *cuts, len(stream)]
    return [stream[a:b] for a, b in zip(bounds, bounds[1:])]


_text = st.text(st.characters(blacklist_categories=("Cs",)))
_json = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**63), max_value=2**63 - 1) | _text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_text, inner, max_size=4),
    max_leaves=10,
)
_messages = st.builds(lambda kind, body: {**body, "type": kind}, _text.filter(bool), st.dictionaries(_text, _json, max_size=4))


# -- encode / decode ----------------------------------------------------------------------------


def test_encode_line_is_one_compact_line() -> None:
    assert encode_line({"type": "ping"}) == b'{"type":"ping"}\n'


@given(message=_messages)
def test_encode_line_never_embeds_a_newline(message: dict[str, Any]) -> None:
    line = encode_line(message)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert decode_line(line[:-1]) == message


@given(messages=st.lists(_messages, max_size=8), crlf=st.booleans(), data=st.data())
def test_round_trip_under_any_split(messages: list[dict[str, Any]], crlf: bool, data: st.DataObject) -> None:
    stream = b"".join(encode_line(m) for m in messages)
    if crlf:  # what a hand-typed nc session on some terminals sends
        stream = stream.replace(b"\n", b"\r\n")
    lines = frame(*data.draw(_splits(stream)))
    assert [decode_line(line) for line in lines] == messages


_tokens = st.sampled_from([b"\n", b"\r", b"\r\n", b" ", b"x", b"{}", b"\xc3\xa9", b"\xff"])


@given(stream=st.lists(_tokens, max_size=60).map(b"".join), max_line=st.integers(1, 12), data=st.data())
def test_any_stream_frames_the_same_whatever_the_split(stream: bytes, max_line: int, data: st.DataObject) -> None:
    def run(chunks: list[bytes]) -> tuple[list[bytes], bool]:
        framer = LineFramer(max_line)
        lines: list[bytes] = []
        try:
            for chunk in chunks:
                lines += framer.feed(chunk)
        except LineTooLong as exc:
            return lines + exc.lines, True
        return lines, False

    assert run(data.draw(_splits(stream))) == run([stream])


# -- framing details ----------------------------------------------------------------------------


def test_partial_line_waits_for_its_newline() -> None:
    framer = LineFramer()
    assert framer.feed(b'{"ty') == []
    assert framer.feed(b'pe":"a"}\n{"type"') == [b'{"type":"a"}']
    assert framer.feed(b':"b"}\n') == [b'{"type":"b"}']


def test_trailing_cr_is_tolerated_once() -> None:
    assert frame(b"a\r\nb\n") == [b"a", b"b"]
    assert frame(b"a\r", b"\n") == [b"a"]
    assert frame(b"a\r\r\n") == [b"a\r"]


def test_blank_lines_are_skipped() -> None:
    assert frame(b"\n\r\n  \n\t\r\na\n\n") == [b"a"]


# -- the line cap -------------------------------------------------------------------------------


def test_line_of_exactly_max_line_is_accepted() -> None:
    assert frame(b"x" * 10 + b"\n", framer=LineFramer(10)) == [b"x" * 10]


def test_cap_counts_every_byte_before_the_newline() -> None:
    with pytest.raises(LineTooLong):
        frame(b"x" * 10 + b"\r\n", framer=LineFramer(10))


def test_long_line_without_newline_is_refused_after_about_max_line() -> None:
    framer = LineFramer()
    chunk = b"x" * 65536
    fed = 0
    with pytest.raises(LineTooLong) as caught:
        for _ in range(32):  # 2 MiB, never a newline
            framer.feed(chunk)
            fed += len(chunk)
    assert MAX_LINE <= fed + len(chunk) <= MAX_LINE + len(chunk)
    assert caught.value.code == "PAYLOAD_TOO_LARGE"


def test_complete_long_line_in_one_chunk_is_refused_too() -> None:
    with pytest.raises(LineTooLong):
        LineFramer().feed(b"x" * (MAX_LINE + 1) + b"\n")


def test_lines_before_the_long_one_are_handed_back() -> None:
    with pytest.raises(LineTooLong) as caught:
        LineFramer(10).feed(b"a\nb\n" + b"x" * 11)
    assert caught.value.lines == [b"a", b"b"]


def test_line_too_long_is_a_message_error_with_a_declared_code() -> None:
    exc = LineTooLong(10, [])
    assert isinstance(exc, MessageError) and isinstance(exc, TaskloomError)
    assert exc.code in ERROR_STATUS
    assert exc.details == {"max_line": 10}


# -- refusals -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        b"not json",
        b"",
        b'{"type":"a"',
        b'{"type":"\xff"}',
        b"[1, 2]",
        b"42",
        b"null",
        b'"hello"',
        b"{}",
        b'{"kind":"ping"}',
        b'{"type":1}',
        b'{"type":null}',
        b'{"type":["ping"]}',
        b'{"type":""}',
    ],
)
def test_bad_lines_raise_message_error(line: bytes) -> None:
    with pytest.raises(MessageError) as caught:
        decode_line(line)
    assert caught.value.code == "VALIDATION_FAILED"
    assert caught.value.message


def test_decode_line_returns_the_object() -> None:
    assert decode_line(b'{"type":"follow","after":3}') == {"type": "follow", "after": 3}
    assert decode_line(b' {"type":"ping"} \r') == {"type": "ping"}


def test_non_object_error_names_the_json_type() -> None:
    with pytest.raises(MessageError, match="an array"):
        decode_line(b"[]")
