"""Lines on ``taskctl mcp``'s stdin that the SDK cannot read as a message, answered.

The SDK's stdio transport hands the server an exception for such a line, and the server drops
it: a client whose request it was then waits for an answer that never comes, and so does the
model behind it. The commonest is a lone surrogate (``"\\ud800"``: half of a UTF-16 pair, which
a model splitting an emoji can write). Python's ``json`` reads it, the SDK's strict parser does
not, and no board text could hold it anyway. JSON-RPC 2.0 answers each of these lines instead:

* a ``tools/call`` holding a lone surrogate: the tool's refusal, ``VALIDATION_FAILED`` naming the
  argument, a tool result as every other refusal is (docs/agents.md);
* any other request that is JSON with an ``id``: an error response to that id (invalid params
  for a lone surrogate, invalid request for a message of the wrong shape);
* a line that is not JSON at all: a parse error with a null id, as JSON-RPC says.

A notification (no ``id``) is never answered, whatever is wrong with it.

Imported only when the server starts, as the SDK is (``taskloom[mcp]``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Any

import anyio
import mcp_types as types
import pydantic
from mcp.shared._stream_protocols import ReadStream, WriteStream
from mcp.shared.message import SessionMessage

from .errors import TaskctlError, quotable

#: A request's id as JSON-RPC allows it (a bool is not one, though Python calls it an int).
RequestId = int | str
#: Where a tool call's arguments sit in its message, as ``lone_surrogates`` names places.
ARGUMENT = "params.arguments."


def lone_surrogates(value: Any, where: str = "") -> Iterator[str]:
    """Where in a JSON value a string (or a key) holds half of a UTF-16 pair: ``params.arguments.ref``."""
    if isinstance(value, str):
        if any("\ud800" <= char <= "\udfff" for char in value):
            yield where or "the message"
    elif isinstance(value, dict):
        for key, item in value.items():
            inside = f"{where}.{key}" if where else str(key)
            yield from lone_surrogates(key, inside)
            yield from lone_surrogates(item, inside)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from lone_surrogates(item, f"{where}[{index}]")


def _unread(error: pydantic.ValidationError) -> tuple[bool, Any]:
    """(whether the line was JSON the SDK could read, what we read of it: the message or None)."""
    errors = error.errors()
    first = errors[0]
    if first["type"] != "json_invalid":
        # JSON of the wrong shape. Each error holds the value it is about, often a part of the
        # message (``params``); a field missing for one kind of message holds the whole of it.
        objects = [each for each in errors if isinstance(each.get("input"), dict)]
        outermost = min(objects or errors, key=lambda each: len(each["loc"]))
        return True, outermost.get("input")
    line = first.get("input")
    if not isinstance(line, str):
        return False, None
    try:
        return False, json.loads(line)
    except ValueError:
        return False, None


def answer(error: Exception, tool_refusal: Callable[[TaskctlError], dict[str, Any]]) -> SessionMessage | None:
    """The answer to a line the transport could not read (``error``), or None when none is owed."""
    if not isinstance(error, pydantic.ValidationError):
        return None
    shaped, message = _unread(error)
    if not shaped and message is None:
        return _error(None, types.PARSE_ERROR, "Parse error: the line is not JSON")
    if not isinstance(message, dict):
        return _error(None, types.INVALID_REQUEST, "Invalid request: a message is a JSON object")
    if "id" not in message:
        return None  # a notification: never answered
    request_id = message["id"]
    if isinstance(request_id, bool) or not isinstance(request_id, RequestId) or any(lone_surrogates(request_id)):
        # An id we cannot send back (a surrogate would not encode) is no id: JSON-RPC answers null.
        return _error(None, types.INVALID_REQUEST, "Invalid request: the id is not a number or a string of characters")
    halves = list(lone_surrogates(message))
    if halves:
        held = ("holds a lone surrogate (half of a UTF-16 pair such as \\ud800, which is not a character):"
                " no board text can hold one")
        params = message.get("params")
        if message.get("method") == "tools/call" and isinstance(params, dict) and halves[0].startswith(ARGUMENT):
            where = f"the argument {quotable(halves[0].removeprefix(ARGUMENT))} of {quotable(str(params.get('name')))}"
            refused = TaskctlError("VALIDATION_FAILED", f"{where} {held}",
                                   hint="send the text as whole characters (a surrogate pair joined, or the character itself)")
            return SessionMessage(types.JSONRPCResponse(jsonrpc="2.0", id=request_id, result=tool_refusal(refused)))
        return _error(request_id, types.INVALID_PARAMS, f"Invalid params: {quotable(halves[0])} {held}")
    if shaped:
        return _error(request_id, types.INVALID_REQUEST, "Invalid request: not a JSON-RPC 2.0 message MCP reads")
    return _error(request_id, types.PARSE_ERROR, "Parse error: the line is not JSON as MCP reads it")


def _error(request_id: RequestId | None, code: int, message: str) -> SessionMessage:
    return SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=request_id, error=types.ErrorData(code=code, message=message)))


class AnswerUnreadable:
    """The transport's read stream, with each line it could not read answered on ``replies``
    instead of being handed to the server (which would drop it)."""

    def __init__(self, inner: ReadStream[SessionMessage | Exception], replies: WriteStream[SessionMessage],
                 tool_refusal: Callable[[TaskctlError], dict[str, Any]]) -> None:
        self._inner = inner
        self._replies = replies
        self._tool_refusal = tool_refusal

    async def receive(self) -> SessionMessage | Exception:
        while True:
            item = await self._inner.receive()
            if not isinstance(item, Exception):
                return item
            reply = answer(item, self._tool_refusal)
            if reply is None:
                return item  # the server logs it, as before
            await self._replies.send(reply)

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> AnswerUnreadable:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    @property
    def last_context(self) -> Any:
        """The sender's context of the last item, which the server reads off the stream it is given."""
        return getattr(self._inner, "last_context", None)

    async def __aenter__(self) -> AnswerUnreadable:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc_val: BaseException | None,
                        exc_tb: TracebackType | None) -> bool | None:
        await self.aclose()
        return None
