"""``taskctl mcp`` answers every request line, even one the SDK cannot read (taskctl/mcp_wire.py).

The SDK's stdio transport drops such a line, so its caller waited for ever: most likely a lone
surrogate (``"\\ud800"``, half of a UTF-16 pair, as a model splitting an emoji writes it), which
Python's ``json`` reads and the SDK's parser refuses. The official client cannot send these lines,
so this test speaks JSON-RPC on the server's stdin itself.
"""

from __future__ import annotations

import json
import queue
import subprocess
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from tests.cli.conftest import TASKCTL, Taskctl
from tests.cli.test_mcp import AGENT, setup_card

ANSWER_WITHIN_S = 20.0


class RawMcp:
    """``taskctl mcp`` as a subprocess, one JSON-RPC line at a time."""

    def __init__(self, taskctl: Taskctl) -> None:
        self.process = subprocess.Popen([TASKCTL, "mcp"], env={**taskctl.env, **AGENT}, cwd=taskctl.cwd,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.lines: queue.Queue[bytes] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line)

    def send(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line.encode() + b"\n")
        self.process.stdin.flush()

    def answer(self) -> dict[str, Any]:
        try:
            line = self.lines.get(timeout=ANSWER_WITHIN_S)
        except queue.Empty:
            raise AssertionError(f"no answer within {ANSWER_WITHIN_S} s") from None
        answer: dict[str, Any] = json.loads(line)
        return answer

    def ask(self, line: str) -> dict[str, Any]:
        self.send(line)
        return self.answer()

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        finally:
            if self.process.poll() is None:
                self.process.kill()


@pytest.fixture
def raw_mcp(taskctl: Taskctl) -> Iterator[RawMcp]:
    server = RawMcp(taskctl)
    try:
        hello = server.ask(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}}))
        assert "result" in hello, hello
        server.send(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        yield server
    finally:
        server.close()


def tool_call(request_id: int, name: str, arguments: str) -> str:
    """A tools/call line whose arguments are written as JSON text by the caller (escapes kept)."""
    return f'{{"jsonrpc":"2.0","id":{request_id},"method":"tools/call","params":{{"name":"{name}","arguments":{arguments}}}}}'


def test_a_lone_surrogate_in_a_tool_call_is_refused_as_a_tool_result_and_writes_nothing(
    taskctl: Taskctl, raw_mcp: RawMcp,
) -> None:
    ref = setup_card(taskctl)
    shown = raw_mcp.ask(tool_call(2, "show", '{"ref":"\\ud800"}'))
    assert shown["id"] == 2 and shown["result"]["isError"] is True, shown
    error = shown["result"]["structuredContent"]["error"]
    assert error["code"] == "VALIDATION_FAILED" and "ref of show" in error["message"], error
    assert shown["result"]["content"][0]["text"].startswith("VALIDATION_FAILED: "), shown

    commented = raw_mcp.ask(tool_call(3, "comment", f'{{"ref":"{ref}","body":"half an emoji \\ud83d here"}}'))
    assert commented["result"]["structuredContent"]["error"]["code"] == "VALIDATION_FAILED", commented
    assert "body of comment" in commented["result"]["structuredContent"]["error"]["message"], commented
    assert taskctl.data("comment", "list", ref)["items"] == []

    # The server is still serving: a whole pair is one character and is written.
    written = raw_mcp.ask(tool_call(4, "comment", f'{{"ref":"{ref}","body":"a whole emoji \\ud83d\\ude00"}}'))
    assert written["id"] == 4 and not written["result"].get("isError"), written
    assert [item["body"] for item in taskctl.data("comment", "list", ref)["items"]] == ["a whole emoji \U0001f600"]


def test_every_other_unreadable_request_gets_the_json_rpc_error_it_is_owed(raw_mcp: RawMcp) -> None:
    assert raw_mcp.ask("this is not json") == {
        "jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error: the line is not JSON"}}
    shapeless = raw_mcp.ask('{"id": 5, "method": "tools/list"}')  # no "jsonrpc"
    assert shapeless["id"] == 5 and shapeless["error"]["code"] == -32600, shapeless
    # The id is found even where what is wrong is deeper in the message than the id.
    bad_params = raw_mcp.ask('{"jsonrpc":"2.0","id":8,"method":"tools/call","params":"show"}')
    assert bad_params["id"] == 8 and bad_params["error"]["code"] == -32600, bad_params
    for not_an_object in ("[1, 2]", "null", "42"):
        answered = raw_mcp.ask(not_an_object)
        assert answered["id"] is None and answered["error"]["code"] == -32600, (not_an_object, answered)
    # Not in an argument: a JSON-RPC error, not a tool result.
    odd_name = raw_mcp.ask(tool_call(9, "show\\ud800", "{}"))
    assert odd_name["id"] == 9 and odd_name["error"]["code"] == -32602, odd_name
    listed = raw_mcp.ask('{"jsonrpc":"2.0","id":6,"method":"tools/list","params":{"cursor":"\\udc00"}}')
    assert listed["id"] == 6 and listed["error"]["code"] == -32602, listed
    unsendable_id = raw_mcp.ask('{"jsonrpc":"2.0","id":"\\ud800","method":"tools/list"}')
    assert unsendable_id["id"] is None and unsendable_id["error"]["code"] == -32600, unsendable_id
    # A notification is never answered: the next answer is the next request's.
    raw_mcp.send('{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"reason":"\\ud800"}}')
    after = raw_mcp.ask('{"jsonrpc":"2.0","id":7,"method":"tools/list"}')
    assert after["id"] == 7 and len(after["result"]["tools"]) == 9, after
