"""Fixed: before, ``taskctl mcp`` holds one keep-alive connection to the board for its whole life. When
the board restarts between two tool calls, the next write-tool call (every tool but ``ready`` is a
POST) is sent on the dead connection, is never retried, and the model is told BOARD_UNREACHABLE
"is it running?" although a board is up and answering. docs/agents.md promises BOARD_UNREACHABLE
only "when no board answers"."""

from __future__ import annotations

from tests.cli.conftest import Taskctl
from tests.cli.test_mcp import mcp_session, setup_card, text_of
from tests.support.board import TaskdProcess


async def test_a_board_restart_between_calls_is_not_reported_as_unreachable(taskctl: Taskctl, taskd: TaskdProcess) -> None:
    ref = setup_card(taskctl)
    async with mcp_session(taskctl) as session:
        first = await session.call_tool("show", {"ref": ref})
        assert not first.is_error, text_of(first)
        taskd.stop()
        taskd.start()
        taskctl.ok("task", "show", ref)  # the board is up: a shell taskctl reaches it
        after = await session.call_tool("show", {"ref": ref})
        assert not after.is_error, f"the board is running, yet the tool said: {text_of(after)}"
