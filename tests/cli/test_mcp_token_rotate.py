"""Fixed: before, ``taskctl mcp`` keeps the token it found at start; a ``taskctl token rotate`` while it
runs leaves every later tool call refused with UNAUTHORIZED until the harness restarts it, while
every other long-lived taskctl command re-reads the token file (discovery.current_token)."""

from __future__ import annotations

from pathlib import Path

from tests.cli.conftest import Taskctl
from tests.cli.test_mcp import error_of, mcp_session, setup_card, text_of


async def test_a_token_rotation_reaches_a_running_mcp_server(taskctl: Taskctl) -> None:
    ref = setup_card(taskctl)
    async with mcp_session(taskctl) as session:
        first = await session.call_tool("show", {"ref": ref})
        assert not first.is_error, text_of(first)
        taskctl.ok("token", "rotate")
        # The shell's taskctl reads the new token from the file at once.
        taskctl.ok("task", "show", ref)
        after = await session.call_tool("show", {"ref": ref})
        again = await session.call_tool("show", {"ref": ref})
        assert not after.is_error and not again.is_error, (
            f"after a rotation the server still sends the old token: {error_of(after)}")


async def test_a_running_mcp_server_reads_its_token_file_again_after_a_rotation(taskctl: Taskctl, tmp_path: Path) -> None:
    """Given ``--token-file FILE``, the server read it once: after a rotation and the new token
    written into FILE, every tool call stayed refused until the harness restarted it."""
    ref = setup_card(taskctl)
    token_file = tmp_path / "board.token"
    token_file.write_text((taskctl.data_dir / "token").read_text())
    token_file.chmod(0o600)
    async with mcp_session(taskctl, options=("--token-file", str(token_file))) as session:
        assert not (first := await session.call_tool("show", {"ref": ref})).is_error, text_of(first)
        taskctl.ok("token", "rotate")
        stale = await session.call_tool("show", {"ref": ref})
        assert error_of(stale)["code"] == "UNAUTHORIZED"  # the file still holds the old token
        token_file.write_text((taskctl.data_dir / "token").read_text())
        after = await session.call_tool("show", {"ref": ref})
        assert not after.is_error, f"the server did not read its token file again: {error_of(after)}"
