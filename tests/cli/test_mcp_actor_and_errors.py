"""``taskctl mcp``: a blank actor is a missing one (the model never writes as a person), any actor
the board stores is served, and every failure of a tool call stays a tool result.

docs/agents.md: the actor is the server's; both TASKLOOM_ACTOR and TASKLOOM_ACTOR_KIND "must be
given: the server refuses to start without them (ACTOR_REQUIRED, exit 1)", because the shell
fallback would "let the model pass for a person". And: "A refusal is a tool result with
isError: true, not a protocol error, so the model reads it".
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp.shared.exceptions import MCPError

from tests.cli.conftest import TASKCTL, Taskctl, taskctl_for
from tests.cli.test_mcp import mcp_session, setup_card, text_of
from tests.support.board import TaskdProcess


def comments(taskctl: Taskctl, ref: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = taskctl.data("comment", "list", ref)["items"]
    return items


async def comment_through_mcp(taskctl: Taskctl, ref: str, env: dict[str, str]) -> str:
    """Try one comment through a server started with ``env``; what happened, for the message."""
    try:
        async with mcp_session(taskctl, env=env) as session:
            result = await session.call_tool("comment", {"ref": ref, "body": "the model speaking"})
            return f"tool answered is_error={result.is_error}: {text_of(result)}"
    except Exception as exc:  # noqa: BLE001 - a server that refuses to start is the right outcome
        return f"the server did not serve: {type(exc).__name__}"


@pytest.mark.parametrize("env", [{"TASKLOOM_ACTOR_KIND": " "}, {"TASKLOOM_ACTOR": " "}, {"TASKLOOM_ACTOR": "\t"}],
                         ids=["blank-kind", "blank-id", "tab-id"])
def test_a_blank_actor_is_refused_at_start_like_a_missing_one(taskctl: Taskctl, env: dict[str, str]) -> None:
    full = {**taskctl.env, "TASKLOOM_ACTOR": "worker-1", "TASKLOOM_ACTOR_KIND": "claude", **env}
    done = subprocess.run([TASKCTL, "mcp"], input="", capture_output=True, text=True, env=full, timeout=60)
    assert done.returncode == 1, (done.returncode, done.stderr)
    assert "error: ACTOR_REQUIRED: " in done.stderr, done.stderr


async def test_a_blank_actor_kind_never_lets_the_model_write_as_a_human(taskctl: Taskctl) -> None:
    ref = setup_card(taskctl)
    outcome = await comment_through_mcp(taskctl, ref, {"TASKLOOM_ACTOR": "worker-1", "TASKLOOM_ACTOR_KIND": " "})
    written = comments(taskctl, ref)
    assert not [c for c in written if c["actor_kind"] == "human"], (
        f"the model's comment is recorded as a person's ({outcome}): {written}")


@pytest.fixture
def board_with_default_actor(taskd: TaskdProcess, pycache: Path, tmp_path: Path) -> Iterator[Taskctl]:
    """A board whose writes without X-Taskloom-Actor are ann's (``--default-actor human:ann``)."""
    taskd.start("--default-actor", "human:ann")
    runner = taskctl_for(taskd, pycache, tmp_path)
    yield runner
    runner.assert_no_secret(taskd.token)


async def test_a_blank_actor_id_never_lets_the_model_write_as_the_boards_default_person(
    board_with_default_actor: Taskctl,
) -> None:
    taskctl = board_with_default_actor
    ref = setup_card(taskctl)
    outcome = await comment_through_mcp(taskctl, ref, {"TASKLOOM_ACTOR": " ", "TASKLOOM_ACTOR_KIND": "claude"})
    written = comments(taskctl, ref)
    assert not [c for c in written if c["actor_kind"] == "human"], (
        f"the model's comment is recorded as the board's default person ({outcome}): {written}")


async def test_a_non_ascii_actor_is_served_and_errors_stay_tool_results(taskctl: Taskctl) -> None:
    """The board stores UTF-8 actor ids (see test_cli_odd_arguments.py): the server sends them as UTF-8."""
    ref = setup_card(taskctl)
    async with mcp_session(taskctl, env={"TASKLOOM_ACTOR": "工人", "TASKLOOM_ACTOR_KIND": "claude"}) as session:
        try:
            result = await session.call_tool("comment", {"ref": ref, "body": "hello"})
        except MCPError as exc:
            pytest.fail(f"a tool call answered a JSON-RPC error, not a tool result: {exc}")
        assert not result.is_error, text_of(result)
        assert result.structured_content is not None and result.structured_content["actor_id"] == "工人"
        # The next call on the same server is not told the (running) board is unreachable.
        again = await session.call_tool("show", {"ref": ref})
        assert not again.is_error, text_of(again)


async def test_a_malformed_url_is_a_tool_error_not_a_protocol_error(taskctl: Taskctl) -> None:
    async with mcp_session(taskctl, options=("--url", "http://127.0.0.1:99999")) as session:
        try:
            result = await session.call_tool("ready", {})
        except MCPError as exc:
            pytest.fail(f"a tool call answered a JSON-RPC error, not a tool result: {exc}")
        assert result.is_error
        assert result.structured_content is not None
        assert result.structured_content["error"]["code"] in ("VALIDATION_FAILED", "BOARD_UNREACHABLE")
