"""The hub's own HTTP/1.1 reader of the board's event stream (``services/hub/board_stream.py``):
the body decoder in every split, its refusals, and the hub behind a relay that splits the board's
bytes one by one."""

from __future__ import annotations

import asyncio

import pytest

from services.hub.board_stream import MAX_CHUNK_LINE, BodyDecoder, Head, StreamFailed, parse_head
from tests.support.board import BoardClient, RunningBoard

from .conftest import RawClient, hub_caught_up, make_task, start_hub, write_rows

CHUNKED = Head(200, {"transfer-encoding": "chunked"})
#: Two chunks (one with an extension), the last chunk and a trailer: what HTTP/1.1 allows.
BODY = b"f\r\nid: 7\ndata: {}\n\r\n6;ext=1\r\n\n: pi\n\r\n0\r\nX-Trailer: 1\r\n\r\n"
PAYLOAD = b"id: 7\ndata: {}\n\n: pi\n"


def feed_in_pieces(decoder: BodyDecoder, body: bytes, *cuts: int) -> bytes:
    out = b""
    start = 0
    for cut in (*cuts, len(body)):
        out += decoder.feed(body[start:cut])
        start = cut
    return out


@pytest.mark.parametrize("cut", range(len(BODY) + 1))
def test_a_chunked_body_decodes_the_same_at_every_split(cut: int) -> None:
    decoder = BodyDecoder(CHUNKED)
    assert feed_in_pieces(decoder, BODY, cut) == PAYLOAD
    assert decoder.done
    assert decoder.feed(b"5\r\nlater\r\n") == b""  # nothing after the last chunk is payload


def test_a_chunked_body_fed_byte_by_byte() -> None:
    decoder = BodyDecoder(CHUNKED)
    assert feed_in_pieces(decoder, BODY, *range(1, len(BODY))) == PAYLOAD and decoder.done


def test_a_body_by_length_or_to_the_close() -> None:
    by_length = BodyDecoder(Head(200, {"content-length": "5"}))
    assert by_length.feed(b"abc") == b"abc" and not by_length.done
    assert by_length.feed(b"defgh") == b"de" and by_length.done
    to_close = BodyDecoder(Head(200, {}))
    assert to_close.feed(b"abc") == b"abc" and not to_close.done


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (b"zz\r\n", "bad chunk size: b'zz'"),
        (b"-1\r\n", "bad chunk size"),
        (b"3\r\nabcdef\r\n", "chunk data longer than its size"),
        (b"1" * (MAX_CHUNK_LINE + 2), "chunk-size line too long"),
    ],
)
def test_a_broken_chunked_body_is_refused_with_what_broke(body: bytes, error: str) -> None:
    decoder = BodyDecoder(CHUNKED)
    with pytest.raises(StreamFailed, match=error.replace("(", r"\(").replace("[", r"\[")):
        decoder.feed(body)


@pytest.mark.parametrize(
    ("raw", "error"),
    [
        (b"SSH-2.0-OpenSSH_9.6", "not an HTTP/1.x status line"),
        (b"HTTP/1.1 OK", "not an HTTP/1.x status line"),
        (b"HTTP/1.1 200 OK\r\nno colon here", "not an HTTP header line"),
    ],
)
def test_a_head_that_is_not_http_is_refused(raw: bytes, error: str) -> None:
    with pytest.raises(StreamFailed, match=error):
        parse_head(raw)


def test_a_bad_content_length_is_refused() -> None:
    with pytest.raises(StreamFailed, match="bad Content-Length"):
        BodyDecoder(Head(200, {"content-length": "-3"}))


class OneByteRelay:
    """A TCP relay that hands the board's answer on one byte per write: every split the network may make."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.writers: list[asyncio.StreamWriter] = []

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        self.writers += [writer, up_writer]

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter, step: int) -> None:
            try:
                while data := await src.read(65536):
                    for at in range(0, len(data), step):
                        dst.write(data[at : at + step])
                        await dst.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                dst.close()

        await asyncio.gather(pump(reader, up_writer, 65536), pump(up_reader, writer, 1))

    async def close(self) -> None:
        self.server.close()
        for writer in self.writers:
            writer.transport.abort()


@pytest.mark.asyncio
async def test_a_board_stream_split_at_every_byte_delivers_every_event_once_in_order(
    board: RunningBoard, client: BoardClient
) -> None:
    relay = OneByteRelay(int(board.url.rsplit(":", 1)[1]))
    port = await relay.start()
    hub = await start_hub(f"http://127.0.0.1:{port}", board.token)
    try:
        task = await make_task(client)
        await hub_caught_up(hub, board)
        raw = await RawClient.following(hub)
        written = await write_rows(board, task, 20, size=100)
        assert [m["revision"] for m in await raw.events(20)] == written
        assert hub._link.connects == 1  # noqa: SLF001 - no reconnect was needed to get there
        await raw.close()
    finally:
        await hub.stop()
        await relay.close()
