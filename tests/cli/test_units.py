"""taskctl's pure pieces: discovery order, redaction, refs, queries, ranking, tables, help."""

from __future__ import annotations

import io
import json
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from shared.paths import board_pointer_for
from taskctl.actors import resolve_actor
from taskctl.attachment_cmd import filename_from
from taskctl.command import REF, actor_ref
from taskctl.discovery import normalise_url, resolve_board
from taskctl.errors import TaskctlError, redact, remember_secret
from taskctl.http import Reply, encode_query
from taskctl.main import LAZY_COMMANDS, cli
from taskctl.output import Column, Output


def test_redact_masks_known_secrets_and_anything_token_shaped() -> None:
    remember_secret("hunter2-not-a-token")
    assert redact("pw=hunter2-not-a-token") == "pw=[redacted]"
    token = "tl_" + "0a" * 32
    assert redact(f"Bearer {token}.") == "Bearer tl_[redacted]."
    error = TaskctlError("X", f"bad {token}", hint=f"use {token}")
    assert token not in error.message and token not in (error.hint or "")


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("DEMO-0001", "DEMO-0001"),
        ("demo-1", "DEMO-0001"),
        ("demo-42", "DEMO-0042"),
        ("my-proj-3", "MYPROJ-0003"),
        ("DEMO-12345", "DEMO-12345"),
        ("0b6c1c9e-6a35-4d5e-9f0a-3e5e2d1c0b9a", "0b6c1c9e-6a35-4d5e-9f0a-3e5e2d1c0b9a"),
    ],
)
def test_task_refs_accept_short_identifiers(given: str, expected: str) -> None:
    assert REF.convert(given, None, None) == expected


def test_actor_refs() -> None:
    assert actor_ref("bob", "--assignee") == ("human", "bob")
    assert actor_ref("claude:worker-1", "--assignee") == ("claude", "worker-1")
    with pytest.raises(click.BadParameter):
        actor_ref(":x", "--assignee")


def test_actor_resolution_order() -> None:
    env = {"TASKLOOM_ACTOR": "env-id", "TASKLOOM_ACTOR_KIND": "codex"}
    assert str(resolve_actor("flag-id", "claude", environ=env)) == "claude:flag-id"
    assert str(resolve_actor(None, None, environ=env)) == "codex:env-id"
    assert resolve_actor(None, None, environ={}).kind == "human"


def test_query_encoding_drops_nothing_it_should_keep() -> None:
    assert encode_query({"status": ["todo", "blocked"], "archived": True, "cursor": None, "limit": 5}) == (
        "?status=todo%2Cblocked&archived=true&limit=5"
    )
    assert encode_query({"x": None, "y": []}) == ""


def test_board_urls_are_normalised_or_refused() -> None:
    assert normalise_url("127.0.0.1:7431/") == "http://127.0.0.1:7431"
    with pytest.raises(TaskctlError) as refused:
        normalise_url("ftp://example")
    assert refused.value.code == "VALIDATION_FAILED"


def test_token_order_option_env_then_the_pointers_file(tmp_path: Path) -> None:
    runtime, data = tmp_path / "run", tmp_path / "data"
    runtime.mkdir()
    data.mkdir()
    (data / "token").write_text("tl_" + "1" * 64 + "\n")
    elsewhere = tmp_path / "elsewhere-token"
    elsewhere.write_text("tl_" + "2" * 64)
    for token_file in (data / "token", elsewhere):
        token_file.chmod(0o600)  # a token file others may read is not believed (test_pointer_ownership.py)
    # The pointer of the board serving the data directory this client names.
    (runtime / board_pointer_for(data.resolve())).write_text(
        json.dumps({"url": "http://127.0.0.1:5555", "pid": 1, "token_file": str(elsewhere)}))
    env = {"TASKLOOM_RUNTIME_DIR": str(runtime), "TASKLOOM_DATA_DIR": str(data)}
    # The URL is the pointer's: its token file is used.
    assert resolve_board("http://127.0.0.1:5555", environ=env).token == "tl_" + "2" * 64
    # Another URL: the data dir's token file.
    other = resolve_board("http://127.0.0.1:6666", environ=env)
    assert (other.token, other.source) == ("tl_" + "1" * 64, "option")
    assert "tl_" not in repr(other)
    assert resolve_board("http://127.0.0.1:6666", environ={**env, "TASKLOOM_TOKEN": "tl_env"}).token == "tl_env"
    assert resolve_board("http://127.0.0.1:6666", "tl_flag", environ={**env, "TASKLOOM_TOKEN": "tl_env"}).token == "tl_flag"
    assert resolve_board(None, environ={**env, "TASKLOOM_URL": "127.0.0.1:7777"}).source == "env"


def test_download_names_come_from_content_disposition_as_base_names() -> None:
    reply = Reply(200, b"", {"content-disposition": "attachment; filename=\"x.txt\"; filename*=UTF-8''r%C3%A9sum%C3%A9.txt"})
    assert filename_from(reply, "fallback") == "résumé.txt"
    assert filename_from(Reply(200, b"", {"content-disposition": 'attachment; filename="../../etc/passwd"'}), "f") == "passwd"
    assert filename_from(Reply(200, b"", {}), "fallback") == "fallback"


class FakeTty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_tables_align_and_colour_only_on_a_tty(monkeypatch: pytest.MonkeyPatch) -> None:
    columns = [Column("ID", lambda r: r["id"]), Column("STATUS", lambda r: r["status"], lambda s: "green")]
    rows = [{"id": "DEMO-0001", "status": "done"}, {"id": "X-1", "status": None}]
    plain = io.StringIO()
    Output(stdout=plain, stderr=io.StringIO()).table(rows, columns)
    assert plain.getvalue().splitlines() == ["ID         STATUS", "DEMO-0001  done", "X-1        -"]

    monkeypatch.delenv("NO_COLOR", raising=False)
    tty = FakeTty()
    Output(stdout=tty, stderr=io.StringIO()).table(rows, columns)
    assert "\x1b[" in tty.getvalue()
    monkeypatch.setenv("NO_COLOR", "1")
    quiet = FakeTty()
    Output(stdout=quiet, stderr=io.StringIO()).table(rows, columns)
    assert "\x1b[" not in quiet.getvalue()


def test_json_envelopes() -> None:
    out = io.StringIO()
    Output(json=True, stdout=out).result({"a": 1})
    Output(json=True, stdout=out).failure(TaskctlError("NOT_FOUND", "nope", details={"task": "X"}, hint="look"))
    first, second = out.getvalue().splitlines()
    assert json.loads(first) == {"ok": True, "data": {"a": 1}}
    assert json.loads(second) == {"ok": False, "error": {"code": "NOT_FOUND", "message": "nope",
                                                         "details": {"task": "X"}, "hint": "look"}}


SPEC_GROUPS = ["project", "task", "comment", "relation", "report", "acceptance", "session", "attachment", "labels",
               "actors", "activity", "token", "open", "board"]


@pytest.mark.parametrize("name", SPEC_GROUPS)
def test_every_group_documents_itself(name: str) -> None:
    result = CliRunner().invoke(cli, [name, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage: cli " in result.output or "Usage: " in result.output
    group = cli.get_command(click.Context(cli), name)
    assert group is not None and (group.help or "").strip()
    for sub in getattr(group, "commands", {}).values():
        assert (sub.help or "").strip(), f"{name} {sub.name} has no help"


def test_the_listing_uses_static_help_for_every_lazy_command() -> None:
    assert set(SPEC_GROUPS) <= set(LAZY_COMMANDS)
    result = CliRunner().invoke(cli, ["--help"])
    for name in SPEC_GROUPS:
        assert f"  {name} " in result.output


def test_a_damaged_pointer_is_ignored(tmp_path: Path) -> None:
    import os

    (tmp_path / "board.json").write_text(json.dumps({"url": "ftp://nowhere", "pid": os.getpid()}))
    env = {"TASKLOOM_RUNTIME_DIR": str(tmp_path), "TASKLOOM_NO_AUTOSTART": "1"}
    with pytest.raises(TaskctlError) as refused:
        resolve_board(environ=env)
    assert refused.value.code == "NO_BOARD"
