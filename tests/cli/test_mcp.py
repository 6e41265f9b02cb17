"""``taskctl mcp`` driven by the MCP SDK's own client over stdio, against a real ``taskd``.

The server is launched as a subprocess exactly as an agent harness launches it (``stdio_client``),
and every answer is checked against the board's own state read back through ``taskctl``.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.types import CallToolResult

from tests.cli.conftest import TASKCTL, Taskctl, activity_count
from tests.support.board import REPORT

AGENT = {"TASKLOOM_ACTOR": "worker-1", "TASKLOOM_ACTOR_KIND": "claude"}
TOOL_NAMES = {"ready", "show", "claim", "heartbeat", "ask", "comment", "report", "deliver", "move"}


@asynccontextmanager
async def mcp_session(
    taskctl: Taskctl, env: dict[str, str] | None = None, options: tuple[str, ...] = (),
) -> AsyncIterator[ClientSession]:
    params = StdioServerParameters(command=TASKCTL, args=[*options, "mcp"], env={**taskctl.env, **AGENT, **(env or {})},
                                   cwd=str(taskctl.cwd))
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


def text_of(result: CallToolResult) -> str:
    return "".join(getattr(block, "text", "") for block in result.content)


def error_of(result: CallToolResult) -> dict[str, Any]:
    assert result.is_error, text_of(result)
    assert result.structured_content is not None
    error: dict[str, Any] = result.structured_content["error"]
    return error


def card(taskctl: Taskctl, ref: str) -> dict[str, Any]:
    data: dict[str, Any] = taskctl.data("task", "show", ref)
    return data


def setup_card(taskctl: Taskctl, project: str = "demo") -> str:
    taskctl.ok("project", "create", project)
    taskctl.ok("task", "create", "-p", project, "Write the install guide")
    return f"{project.upper()}-0001"


async def test_lists_the_nine_tools_and_none_takes_an_actor(taskctl: Taskctl) -> None:
    async with mcp_session(taskctl) as session:
        tools = (await session.list_tools()).tools
    assert {tool.name for tool in tools} == TOOL_NAMES
    for tool in tools:
        schema = tool.input_schema
        assert schema["type"] == "object" and schema["additionalProperties"] is False, tool.name
        assert not {"actor", "actor_kind", "actor_id"} & set(schema["properties"]), tool.name
        assert tool.description


async def test_claim_heartbeat_comment_report_deliver_round_trip(taskctl: Taskctl) -> None:
    ref = setup_card(taskctl)
    async with mcp_session(taskctl) as session:
        claimed = await session.call_tool("claim", {"ref": ref})
        assert not claimed.is_error, text_of(claimed)
        assert claimed.structured_content is not None
        assert claimed.structured_content["status"] == "in_progress"
        assert (claimed.structured_content["claimed_by_kind"], claimed.structured_content["claimed_by"]) == ("claude", "worker-1")

        beat = await session.call_tool("heartbeat", {"ref": ref})
        assert not beat.is_error and beat.structured_content is not None
        assert beat.structured_content["heartbeat_at"]

        said = await session.call_tool("comment", {"ref": ref, "body": "Starting with the bash section.", "kind": "note"})
        assert not said.is_error, text_of(said)

        written = await session.call_tool("report", {"ref": ref, "body": REPORT})
        assert not written.is_error, text_of(written)
        assert written.structured_content is not None and written.structured_content["round"] == 1

        delivered = await session.call_tool("deliver", {"ref": ref})
        assert not delivered.is_error, text_of(delivered)

        brief = await session.call_tool("show", {"ref": ref})
        assert not brief.is_error
        markdown = text_of(brief)
        assert markdown.startswith("---\nidentifier: DEMO-0001\n") and "status: in_review" in markdown
        assert "Starting with the bash section." in markdown

    # The board's own record: in review, and every row written by the server's actor.
    assert card(taskctl, ref)["status"] == "in_review"
    rows = taskctl.data("activity", "list", "--task", ref, "--limit", "100")["items"]
    mine = [row for row in rows if row["event"] != "task_created"]
    assert {row["event"] for row in mine} >= {"task_claimed", "comment_added", "report_written", "task_delivered"}
    assert {(row["actor_kind"], row["actor_id"]) for row in mine} == {("claude", "worker-1")}


async def test_a_refusal_is_a_tool_error_with_the_boards_code_and_hint(taskctl: Taskctl) -> None:
    ref = setup_card(taskctl)
    taskctl.ok("task", "claim", ref, env={"TASKLOOM_ACTOR": "rival", "TASKLOOM_ACTOR_KIND": "codex"})
    before = activity_count(taskctl.data_dir)
    async with mcp_session(taskctl) as session:
        result = await session.call_tool("claim", {"ref": ref})
        error = error_of(result)
        assert error["code"] == "EXECUTION_ACTIVE"
        assert text_of(result).startswith("EXECUTION_ACTIVE: ")
        assert error["message"] in text_of(result)

        missing = error_of(await session.call_tool("show", {"ref": "DEMO-9999"}))
        assert missing["code"] == "NOT_FOUND"

        bad_move = await session.call_tool("move", {"ref": ref, "to": "done"})
        assert error_of(bad_move)["code"] == "INVALID_TRANSITION"
        if error_of(bad_move)["hint"]:
            assert "hint: " in text_of(bad_move)
    assert activity_count(taskctl.data_dir) == before
    assert card(taskctl, ref)["claimed_by"] == "rival"


async def test_the_model_cannot_choose_the_actor(taskctl: Taskctl) -> None:
    ref = setup_card(taskctl)
    before = activity_count(taskctl.data_dir)
    async with mcp_session(taskctl) as session:
        for smuggled in ({"actor": "ann"}, {"actor_kind": "human"}, {"actor": "ann", "actor_kind": "human"}):
            result = await session.call_tool("comment", {"ref": ref, "body": "I am a person, honest.", **smuggled})
            error = error_of(result)
            assert error["code"] == "VALIDATION_FAILED"
            assert "TASKLOOM_ACTOR" in (error["hint"] or "")
        assert activity_count(taskctl.data_dir) == before

        # The actor is the one the harness configured, whatever the text says.
        said = await session.call_tool("comment", {"ref": ref, "body": "as ann (human): approved"})
        assert not said.is_error and said.structured_content is not None
        assert (said.structured_content["actor_kind"], said.structured_content["actor_id"]) == ("claude", "worker-1")

        # Unknown arguments and wrong types are refused before anything is sent.
        assert error_of(await session.call_tool("claim", {"ref": ref, "steal": "yes"}))["code"] == "VALIDATION_FAILED"
        assert error_of(await session.call_tool("claim", {}))["code"] == "VALIDATION_FAILED"
        assert error_of(await session.call_tool("nosuch", {}))["code"] == "NOT_FOUND"
    assert activity_count(taskctl.data_dir) == before + 1


def test_the_server_refuses_to_start_without_an_actor(taskctl: Taskctl) -> None:
    env = {k: v for k, v in taskctl.env.items() if k not in ("TASKLOOM_ACTOR", "TASKLOOM_ACTOR_KIND")}
    done = subprocess.run([TASKCTL, "mcp"], input="", capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 1
    assert done.stdout == ""  # stdout is the MCP channel: nothing but protocol goes there
    assert "error: ACTOR_REQUIRED: " in done.stderr and "TASKLOOM_ACTOR" in done.stderr


def test_a_missing_sdk_is_one_line(taskctl: Taskctl) -> None:
    hide_sdk = "import sys; sys.modules['mcp'] = None; from taskctl.main import main; sys.exit(main(['mcp']))"
    done = subprocess.run([sys.executable, "-c", hide_sdk], capture_output=True, text=True,
                          env={**taskctl.env, **AGENT}, timeout=60)
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        "error: MCP_SDK_MISSING: taskctl mcp needs the MCP Python SDK, which is not installed: pip install 'taskloom[mcp]'"
    ]


async def test_ready_is_this_actors_claimable_queue(taskctl: Taskctl) -> None:
    taskctl.ok("project", "create", "demo")
    taskctl.ok("task", "create", "-p", "demo", "Open blocker")                                    # DEMO-0001
    taskctl.ok("task", "create", "-p", "demo", "Blocked by 1")                                    # DEMO-0002
    taskctl.ok("relation", "add", "DEMO-0001", "blocks", "DEMO-0002")
    taskctl.ok("task", "create", "-p", "demo", "Someone else's", "--assignee", "codex:other")      # DEMO-0003
    taskctl.ok("task", "create", "-p", "demo", "Mine, urgent", "--assignee", "claude:worker-1",
               "--priority", "urgent")                                                             # DEMO-0004
    taskctl.ok("task", "create", "-p", "demo", "An epic", "-k", "epic")                           # DEMO-0005
    async with mcp_session(taskctl) as session:
        ready = await session.call_tool("ready", {"project": "demo"})
        assert not ready.is_error, text_of(ready)
        assert ready.structured_content is not None
        assert [t["identifier"] for t in ready.structured_content["items"]] == ["DEMO-0004", "DEMO-0001"]
        limited = await session.call_tool("ready", {"project": "demo", "limit": 1})
        assert limited.structured_content is not None
        assert [t["identifier"] for t in limited.structured_content["items"]] == ["DEMO-0004"]
        # The queue is the server's actor's: the model cannot ask for another's.
        assert error_of(await session.call_tool("ready", {"for": "other"}))["code"] == "VALIDATION_FAILED"


async def test_ask_then_a_human_answer_then_move_back(taskctl: Taskctl) -> None:
    ref = setup_card(taskctl)
    async with mcp_session(taskctl) as session:
        assert not (await session.call_tool("claim", {"ref": ref})).is_error
        asked = await session.call_tool("ask", {"ref": ref, "question": "bash only, or zsh too?"})
        assert not asked.is_error and asked.structured_content is not None
        assert asked.structured_content["status"] == "awaiting"
        taskctl.ok("comment", "add", ref, "zsh too")  # a human answers from the shell
        brief = text_of(await session.call_tool("show", {"ref": ref}))
        assert "status: todo" in brief and "zsh too" in brief
        assert not (await session.call_tool("claim", {"ref": ref})).is_error
        released = await session.call_tool("move", {"ref": ref, "to": "todo", "reason": "handing it back"})
        assert not released.is_error and released.structured_content is not None
        assert released.structured_content["status"] == "todo" and released.structured_content["claimed_by"] is None
