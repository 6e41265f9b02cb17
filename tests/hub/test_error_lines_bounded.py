"""An ``error`` line always fits a line and always encodes, whatever the request it answers.

The hub quotes the offending value back (``details.value``, ``details.got``, the message). A value
nested deeper than orjson writes (254 levels; it reads 1024) made the answer unencodable: the
session's reader died, the peer heard nothing, and a ``hello`` lost its deadline. A type or path
just under the 1 MiB line limit was answered with a line of twice that. ``hub_protocol.error`` now
cuts every quote down (``hub_protocol.echo``).
"""

from __future__ import annotations

import pytest

from services.hub.server import Hub
from shared import hub_protocol as hp
from shared.limits import HUB_MAX_LINE
from tests.hub.conftest import Closed, RawClient

#: Deeper than orjson encodes (254 levels), shallower than it decodes (1024).
DEEP = 300


def nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


@pytest.mark.parametrize(
    "line",
    [
        b'{"type":"follow","after":' + nested(DEEP) + b"}\n",
        b'{"type":"follow","signals":' + nested(DEEP) + b"}\n",
        b'{"type":"watch","ref":' + nested(DEEP) + b',"out":"/tmp/x.md"}\n',
        b'{"type":"watch-stop","registration_id":' + nested(DEEP) + b"}\n",
    ],
    ids=["follow.after", "follow.signals", "watch.ref", "watch-stop.registration_id"],
)
async def test_a_deeply_nested_bad_field_gets_an_error_and_the_session_goes_on(hub: Hub, line: bytes) -> None:
    """A bad field is ``VALIDATION_FAILED`` and the session stays (docs/hub-protocol.md, *Errors*).

    The hub echoes the bad value in ``details.value``; a value nested deeper than orjson can encode
    makes that answer unencodable, the reader task dies on the TypeError, and the peer hears nothing
    more: no error, no close, and its next ``ping`` is never read.
    """
    client = await RawClient.greeted(hub)
    try:
        await client.send(line)
        answer = await client.recv(timeout=5.0)
        assert answer["type"] == "error" and answer["code"] == hp.VALIDATION_FAILED, answer
        await client.send(hp.ping())
        assert (await client.recv(timeout=5.0))["type"] == "pong"
    finally:
        await client.close()


async def test_a_hello_with_a_deeply_nested_protocol_is_refused_and_closed(hub: Hub) -> None:
    """Before ``hello``: another generation is ``PROTOCOL_MISMATCH`` then close, and any session
    that has not said hello is closed after the hello timeout (0.3 s here). A nested ``protocol``
    (echoed in ``details.got``) kills the reader instead, and with it the hello deadline: the
    connection, which holds no token, stays open and unanswered."""
    client = await RawClient.connect(hub.port)
    try:
        await client.send(b'{"type":"hello","protocol":' + nested(DEEP) + b',"token":"nope"}\n')
        try:
            answer = await client.recv(timeout=5.0)
        except Closed:
            answer = None
        except TimeoutError:
            pytest.fail("no answer and no close 5 s after a bad hello (hello timeout is 0.3 s)")
        if answer is not None:
            assert answer["type"] == "error" and answer["code"] in hp.FATAL_ERRORS, answer
        assert await client.closed(timeout=5.0)
    finally:
        await client.close()


async def test_a_dead_session_is_not_counted_as_a_client(hub: Hub) -> None:
    """``pong.clients`` counts only live sessions. A session whose reader died on an unencodable
    answer is still counted, for as long as its socket stays open."""
    victim = await RawClient.greeted(hub)
    observer = await RawClient.greeted(hub)
    try:
        await victim.send(b'{"type":"follow","after":' + nested(DEEP) + b"}\n")
        # The victim is told something (an error) within the deadline, or the session is gone.
        try:
            answer = await victim.recv(timeout=3.0)
        except (TimeoutError, Closed):
            answer = None
        await observer.send(hp.ping())
        pong = await observer.recv()
        if answer is None:
            assert pong["clients"] == 1, f"a silent, dead session is still counted: {pong}"
        else:
            assert answer["type"] == "error", answer
    finally:
        await victim.close()
        await observer.close()


async def test_an_unknown_type_just_under_the_limit_is_answered_within_the_limit(hub: Hub) -> None:
    """Lines are at most 1 MiB *either way* (docs/hub-protocol.md, *Sessions*). The ``UNKNOWN_TYPE``
    answer repeats the type twice (in ``message`` and ``details.type``), so a request just under
    the limit is answered with a line of about 2 MiB, which the hub's own framer refuses."""
    client = await RawClient.greeted(hub)
    try:
        kind = "x" * (HUB_MAX_LINE - 64)
        line = b'{"type":"' + kind.encode() + b'"}\n'
        assert len(line) - 1 <= HUB_MAX_LINE
        await client.send(line)
        raw = await client.reader.readline()
        assert raw, "the hub closed instead of answering"
        assert len(raw) - 1 <= HUB_MAX_LINE, f"the hub sent a {len(raw) - 1}-byte line (limit {HUB_MAX_LINE})"
    finally:
        await client.close()


def test_an_error_quotes_at_most_a_bounded_excerpt_of_any_value() -> None:
    """The rule itself, on the values a request can carry: every error encodes, and within a
    size that does not grow with what was sent."""
    import orjson

    deep: list[object] = []
    for _ in range(1000):
        deep = [deep]
    values: list[object] = [
        deep, "x" * HUB_MAX_LINE, 1 << 70, -(1 << 70), list(range(100_000)), {str(n): [n] * 10 for n in range(10_000)},
        {"k" * 10_000: "v" * 10_000}, [{"a": [1, 2]}, [[3]]], None, True, 1.5, 7,
    ]
    for value in values:
        line = orjson.dumps(hp.error(hp.VALIDATION_FAILED, "m" * HUB_MAX_LINE, value=value, got=value, type=value))
        assert len(line) < 100_000, (type(value), len(line))
    assert hp.echo(7) == 7 and hp.echo(None) is None and hp.echo(True) is True and hp.echo("short") == "short"
    assert hp.echo([1, [2, 3], {"a": 1}]) == [1, "<a list of 2>", "<an object of 1>"]
    assert hp.echo(list(range(hp.ECHO_ITEMS + 5)))[-1] == "<5 more>"
    assert len(hp.echo("y" * 10_000)) == hp.ECHO_TEXT_CHARS
