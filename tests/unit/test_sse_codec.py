"""SSE codec: encoders, the incremental parser, and their round trip under any byte split."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared.sse import (
    MAX_LINE,
    PING,
    SSEComment,
    SSEItem,
    SSEMessage,
    SSEParser,
    SSEProtocolError,
    encode_event,
    encode_id_only,
    encode_named,
    encode_retry,
)


def parse(*chunks: bytes, parser: SSEParser | None = None) -> list[SSEItem]:
    parser = parser or SSEParser()
    items: list[SSEItem] = []
    for chunk in chunks:
        items += parser.feed(chunk)
    return items


def one_byte_pieces(stream: bytes) -> list[bytes]:
    return [stream[i : i + 1] for i in range(len(stream))]


# -- encoders -----------------------------------------------------------------------------------


def test_encoders_produce_the_spec_frames() -> None:
    assert encode_event(7, b'{"a":1}') == b'id: 7\ndata: {"a":1}\n\n'
    assert encode_id_only(42) == b"id: 42\n\n"
    assert encode_named("shutdown", b'{"reason":"server_stopping"}') == (
        b'event: shutdown\ndata: {"reason":"server_stopping"}\n\n'
    )
    assert encode_retry(3000) == b"retry: 3000\n\n"
    assert PING == b": ping\n\n"


def test_activity_frames_carry_no_event_field() -> None:
    # A named frame would never reach a browser's onmessage handler (SPEC §6.1).
    assert b"event:" not in encode_event(1, b"{}")
    assert parse(encode_event(1, b"{}")) == [SSEMessage(data="{}", id="1")]


def test_named_frames_carry_no_id() -> None:
    assert parse(encode_named("signal", b"{}")) == [SSEMessage(event="signal", data="{}")]


def test_data_with_newlines_is_split_into_data_lines() -> None:
    assert encode_event(1, b"a\nb\n") == b"id: 1\ndata: a\ndata: b\ndata: \n\n"
    assert parse(encode_event(1, b"a\nb\n")) == [SSEMessage(data="a\nb\n", id="1")]


def test_data_cr_and_crlf_come_back_as_lf() -> None:
    # A bare CR would end the line early and let data inject a field; SSE cannot carry it.
    frame = encode_named("x", b"a\rb\r\nc\rid: 9")
    assert b"\r" not in frame
    assert parse(frame) == [SSEMessage(event="x", data="a\nb\nc\nid: 9")]


def test_empty_data_is_one_empty_data_line() -> None:
    assert encode_event(3, b"") == b"id: 3\ndata: \n\n"
    assert parse(encode_event(3, b"")) == [SSEMessage(data="", id="3")]


@pytest.mark.parametrize("name", ["a\nb", "a\rb", "shutdown\n"])
def test_event_name_must_be_one_line(name: str) -> None:
    with pytest.raises(ValueError):
        encode_named(name, b"{}")


def test_negative_retry_is_refused() -> None:
    with pytest.raises(ValueError):
        encode_retry(-1)


# -- hypothesis round trip --------------------------------------------------------------------

# Any text but surrogates (not encodable) and CR (normalised to LF by design, tested above).
_text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\r"))
_line_text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n"))
_revision = st.integers(min_value=0, max_value=2**63 - 1)

Frame = tuple[bytes, SSEItem]

_frames: st.SearchStrategy[Frame] = st.one_of(
    st.builds(lambda rev, data: (encode_event(rev, data.encode()), SSEMessage(data=data, id=str(rev))), _revision, _text),
    st.builds(lambda rev: (encode_id_only(rev), SSEMessage(id=str(rev))), _revision),
    st.builds(
        lambda name, data: (encode_named(name, data.encode()), SSEMessage(event=name, data=data)), _line_text, _text
    ),
    st.builds(lambda ms: (encode_retry(ms), SSEMessage(retry=ms)), st.integers(min_value=0, max_value=10**12)),
    st.just((PING, SSEComment("ping"))),
    st.builds(lambda text: (b": " + text.encode() + b"\n", SSEComment(text)), _line_text),
)


@st.composite
def _splits(draw: st.DrawFn, stream: bytes) -> list[bytes]:
    """Cut ``stream`` at arbitrary points, or into 1-byte pieces."""
    if draw(st.booleans()):
        return one_byte_pieces(stream)
    cuts = sorted(draw(st.sets(st.integers(min_value=0, max_value=len(stream)))))
    bounds = [0, *cuts, len(stream)]
    return [stream[a:b] for a, b in zip(bounds, bounds[1:])]


@given(frames=st.lists(_frames, max_size=12), bom=st.booleans(), data=st.data())
def test_round_trip_under_any_split(frames: list[Frame], bom: bool, data: st.DataObject) -> None:
    stream = (b"\xef\xbb\xbf" if bom else b"") + b"".join(frame for frame, _ in frames)
    parser = SSEParser()
    assert parse(*data.draw(_splits(stream)), parser=parser) == [item for _, item in frames]
    ids = [item.id for _, item in frames if isinstance(item, SSEMessage) and item.id is not None]
    assert parser.last_event_id == (ids[-1] if ids else "")


@given(frames=st.lists(_frames, max_size=12))
def test_crlf_and_cr_streams_parse_the_same(frames: list[Frame]) -> None:
    stream = b"".join(frame for frame, _ in frames)
    expected = [item for _, item in frames]
    assert parse(*one_byte_pieces(stream.replace(b"\n", b"\r\n"))) == expected
    assert parse(*one_byte_pieces(stream.replace(b"\n", b"\r"))) == expected


# Bytes biased toward the grammar's sharp edges: terminators, colons, BOM, split UTF-8, NUL.
_tokens = st.sampled_from(
    [b"\r", b"\n", b"\r\n", b":", b" ", b"data", b"id", b"event", b"retry", b"7", b"\x00", b"\xef\xbb\xbf", b"\xc3\xa9",
     b"\xf0\x9f\x98\x80", b"\xff", b"x"]
)  # fmt: skip


@given(stream=st.lists(_tokens, max_size=60).map(b"".join), data=st.data())
def test_any_stream_parses_the_same_whatever_the_split(stream: bytes, data: st.DataObject) -> None:
    whole = SSEParser()
    pieces = SSEParser()
    assert parse(*data.draw(_splits(stream)), parser=pieces) == parse(stream, parser=whole)
    assert (pieces.last_event_id, pieces.retry) == (whole.last_event_id, whole.retry)


# -- line endings -------------------------------------------------------------------------------


def test_crlf_line_endings() -> None:
    assert parse(b"id: 1\r\ndata: a\r\ndata: b\r\n\r\n") == [SSEMessage(data="a\nb", id="1")]


def test_cr_line_endings() -> None:
    assert parse(b"id: 1\rdata: a\rdata: b\r\r") == [SSEMessage(data="a\nb", id="1")]


def test_lf_then_cr_are_two_line_endings() -> None:
    assert parse(b"data: a\n\rdata: b\n\n") == [SSEMessage(data="a"), SSEMessage(data="b")]


def test_crlf_split_between_chunks_is_one_line_ending() -> None:
    # Were the LF read as its own (blank) line, "x" would dispatch alone.
    assert parse(b"data: x\r", b"\ndata: y\r\n\r\n") == [SSEMessage(data="x\ny")]


def test_cr_at_end_of_chunk_dispatches_without_waiting() -> None:
    parser = SSEParser()
    assert parser.feed(b"data: x\r\r") == [SSEMessage(data="x")]
    assert parser.feed(b"\ndata: y\n\n") == [SSEMessage(data="y")]


# -- BOM and encoding -------------------------------------------------------------------------


def test_leading_bom_is_skipped_even_when_split() -> None:
    assert parse(b"\xef\xbb\xbfdata: hi\n\n") == [SSEMessage(data="hi")]
    assert parse(b"\xef", b"\xbb", b"\xbfdata: hi\n\n") == [SSEMessage(data="hi")]


def test_only_the_first_bom_is_skipped() -> None:
    # A second BOM becomes part of the field name "\ufeffdata", which is unknown and ignored.
    assert parse(b"\xef\xbb\xbf\xef\xbb\xbfdata: x\n\n") == []
    assert parse(b"data: a\n\n", b"\xef\xbb\xbfdata: b\n\n") == [SSEMessage(data="a")]


def test_short_first_chunk_that_is_not_a_bom() -> None:
    assert parse(b":\n") == [SSEComment("")]
    assert parse(b"\xef", b"x\n") == []  # "\ufffdx" is an unknown field, not a BOM


def test_multibyte_characters_split_across_chunks() -> None:
    text = "é€😀 naïve"
    assert parse(*one_byte_pieces(f"data: {text}\n\n".encode())) == [SSEMessage(data=text)]


def test_invalid_utf8_decodes_to_replacement_characters() -> None:
    assert parse(b"data: a\xffb\n\n") == [SSEMessage(data="a\ufffdb")]


# -- comments ---------------------------------------------------------------------------------


def test_comments_are_surfaced_in_order_without_dispatching() -> None:
    assert parse(b"data: a\n: ping\ndata: b\n\n") == [SSEComment("ping"), SSEMessage(data="a\nb")]


@pytest.mark.parametrize(
    ("line", "text"), [(b":ping", "ping"), (b": ping", "ping"), (b":  two", " two"), (b":", ""), (b": a: b", "a: b")]
)
def test_comment_text_drops_one_leading_space(line: bytes, text: str) -> None:
    assert parse(line + b"\n") == [SSEComment(text)]


def test_ping_parses_as_a_comment() -> None:
    assert parse(PING) == [SSEComment("ping")]


# -- fields -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "data"),
    [(b"data", ""), (b"data:", ""), (b"data: x", "x"), (b"data:x", "x"), (b"data:  x", " x"), (b"data: a:b", "a:b")],
)
def test_one_optional_space_after_the_colon(line: bytes, data: str) -> None:
    assert parse(line + b"\n\n") == [SSEMessage(data=data)]


def test_multiple_data_lines_join_with_lf() -> None:
    assert parse(b"data: a\ndata:\ndata: c\n\n") == [SSEMessage(data="a\n\nc")]


def test_field_without_colon_has_empty_value() -> None:
    assert parse(b"event\ndata\n\n") == [SSEMessage(event="", data="")]


def test_unknown_fields_are_ignored() -> None:
    assert parse(b"foo: bar\nDATA: no\ndata: x\n\n") == [SSEMessage(data="x")]


def test_event_type_does_not_leak_into_the_next_message() -> None:
    assert parse(b"event: a\ndata: 1\n\ndata: 2\n\n") == [SSEMessage(event="a", data="1"), SSEMessage(data="2")]


def test_blank_lines_with_nothing_set_dispatch_nothing() -> None:
    assert parse(b"\n\n\r\n\r") == []


def test_event_without_data_or_id_is_dropped_as_the_spec_says() -> None:
    assert parse(b"event: foo\n\n") == []


def test_unterminated_block_is_not_dispatched() -> None:
    parser = SSEParser()
    assert parser.feed(b"id: 5\ndata: x\n") == []
    assert parser.last_event_id == ""


# -- id -------------------------------------------------------------------------------------------


def test_id_only_frame_is_reported_and_moves_the_cursor() -> None:
    parser = SSEParser()
    assert parser.feed(b"id: 42\n\n") == [SSEMessage(id="42")]
    assert parser.last_event_id == "42"


def test_message_id_is_only_what_this_block_set() -> None:
    parser = SSEParser()
    assert parse(b"id: 1\ndata: a\n\ndata: b\n\n", parser=parser) == [SSEMessage(data="a", id="1"), SSEMessage(data="b")]
    assert parser.last_event_id == "1"  # sticky


def test_last_event_id_moves_at_dispatch_not_at_the_id_line() -> None:
    # A connection lost mid-block must not resume past data it never delivered.
    parser = SSEParser()
    parser.feed(b"id: 7\ndata: x\n")
    assert parser.last_event_id == ""
    parser.feed(b"\n")
    assert parser.last_event_id == "7"


def test_last_event_id_survives_a_reconnect() -> None:
    parser = SSEParser(last_event_id="12")
    assert parser.feed(b"data: x\n\n") == [SSEMessage(data="x")]
    assert parser.last_event_id == "12"


def test_empty_id_resets_the_cursor() -> None:
    parser = SSEParser(last_event_id="9")
    assert parser.feed(b"id\n\n") == [SSEMessage(id="")]
    assert parser.last_event_id == ""


def test_id_containing_nul_is_ignored() -> None:
    parser = SSEParser()
    assert parser.feed(b"id: 4\x002\n\n") == []
    assert parser.last_event_id == ""
    assert parser.feed(b"id: 1\nid: 2\x00\ndata: x\n\n") == [SSEMessage(data="x", id="1")]
    assert parser.last_event_id == "1"


def test_last_id_line_in_a_block_wins() -> None:
    assert parse(b"id: 1\nid: 2\n\n") == [SSEMessage(id="2")]


# -- retry ----------------------------------------------------------------------------------------


def test_retry_frame_is_reported_and_remembered() -> None:
    parser = SSEParser()
    assert parser.feed(b"retry: 3000\n\n") == [SSEMessage(retry=3000)]
    assert parser.retry == 3000


def test_retry_applies_as_soon_as_its_line_arrives() -> None:
    parser = SSEParser()
    parser.feed(b"retry: 5\n")
    assert parser.retry == 5


@pytest.mark.parametrize("value", [b"", b"-1", b"1.5", b"30a", b" 10", b"\xc2\xb3", b"\xd9\xa3"])
def test_retry_must_be_ascii_digits(value: bytes) -> None:
    parser = SSEParser()
    assert parser.feed(b"retry: " + value + b"\n\n") == []
    assert parser.retry is None


def test_retry_with_data_rides_on_the_message() -> None:
    assert parse(b"retry: 10\ndata: x\n\n") == [SSEMessage(data="x", retry=10)]


# -- limits -------------------------------------------------------------------------------------


def test_line_of_exactly_max_line_is_accepted() -> None:
    assert parse(b"data: 0123\n\n", parser=SSEParser(max_line=10)) == [SSEMessage(data="0123")]


def test_unterminated_oversize_line_is_refused_before_its_end() -> None:
    parser = SSEParser()
    chunk = b"x" * 65536
    fed = 0
    with pytest.raises(SSEProtocolError):
        for _ in range(32):  # 2 MiB with no line ending
            parser.feed(chunk)
            fed += len(chunk)
    assert MAX_LINE <= fed + len(chunk) <= MAX_LINE + len(chunk)


def test_terminated_oversize_line_is_refused_too() -> None:
    # The limit must not depend on how the stream happened to be split.
    with pytest.raises(SSEProtocolError):
        SSEParser(max_line=10).feed(b"data: 0123456789\n\n")


def test_messages_before_the_fault_are_handed_back() -> None:
    parser = SSEParser(max_line=10)
    with pytest.raises(SSEProtocolError) as caught:
        parser.feed(b"id: 1\ndata: a\n\n: c\n" + b"x" * 11)
    assert caught.value.items == [SSEMessage(data="a", id="1"), SSEComment("c")]
    assert parser.last_event_id == "1"


def test_data_accumulated_over_many_lines_is_capped() -> None:
    parser = SSEParser(max_line=100)
    with pytest.raises(SSEProtocolError):
        for _ in range(50):
            parser.feed(b"data: x\n")
