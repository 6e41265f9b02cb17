"""``taskctl mcp`` hides a secret in what the model reads as data as it does in the text: the
board's token pasted into a card, or echoed in a refusal's details, never reaches the model
through ``structuredContent`` either (docs/agents.md: a tool answers the board's JSON twice)."""

from __future__ import annotations

import json

from tests.cli.conftest import Taskctl
from tests.cli.test_mcp import mcp_session, text_of
from tests.support.board import TaskdProcess


async def test_the_token_in_a_card_or_a_refusal_is_hidden_from_both_forms(taskctl: Taskctl, taskd: TaskdProcess) -> None:
    token = taskd.token
    taskctl.ok("project", "create", "demo")
    taskctl.ok("task", "create", "-p", "demo", f"Rotate {token} after the demo")
    async with mcp_session(taskctl) as session:
        listed = await session.call_tool("ready", {})
        refused = await session.call_tool("show", {"ref": f"DEMO-0001{token}"})
    assert not listed.is_error, text_of(listed)
    assert listed.structured_content is not None
    answer = json.dumps(listed.structured_content)
    assert "Rotate [redacted] after the demo" in answer, answer
    assert token not in answer and token not in text_of(listed)
    assert refused.is_error and refused.structured_content is not None
    assert token not in json.dumps(refused.structured_content) and token not in text_of(refused)
