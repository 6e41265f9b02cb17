"""Usage errors exit 2 with a helpful message; board refusals exit 1 naming the code; neither writes."""

from __future__ import annotations

import pytest

from tests.cli.conftest import Taskctl, activity_count, new_project


@pytest.fixture(scope="module")
def card(tc: Taskctl) -> str:
    """A todo task in a fresh project, shared: every test here proves it is left unchanged."""
    project = new_project(tc, "err")
    return tc.data("task", "create", "-p", project, "Something to refuse")["identifier"]


USAGE_CASES = [
    (("nosuch",), "No such command 'nosuch'"),
    (("task", "show"), "Missing argument 'REF'"),
    (("task", "move", "{card}", "sideways"), "'sideways' is not one of"),
    (("task", "claim", "{card}", "--steal"), "--steal needs --reason"),
    (("task", "list", "--status", "todo,bogus"), "unknown status bogus"),
    (("task", "list", "--limit", "0"), "0 is not in the range 1<=x<=1000"),
    (("task", "update", "{card}"), "nothing to update"),
    (("task", "update", "{card}", "--meta", "[1, 2]"), "--meta must be a JSON object"),
    (("task", "update", "{card}", "--label", "a", "--add-label", "b"), "do not mix it with --add-label"),
    (("task", "create", "--project", "x", "T", "--assignee", "human:"), "--assignee must be ID or KIND:ID"),
    (("task", "ask", "{card}"), "the question is missing"),
    (("task", "deliver", "{card}", "--report-file", "/nonexistent/report.md"), "cannot read report"),
    (("comment", "add", "{card}", "text", "-f", "-"), "inline or with --file, not both"),
    (("comment", "add", "{card}", "--kind", "shout", "x"), "'shout' is not one of"),
    (("task", "reopen", "{card}"), "the reason is missing: give it as the argument or with --reason"),
    (("relation", "add", "{card}", "depends", "{card}"), "'depends' is not one of"),
    (("attachment", "upload", "{card}", "/nonexistent/file.bin"), "does not exist"),
    (("task", "list", "--mine", "--assignee", "bob"), "name the assignee twice"),
]


@pytest.mark.parametrize(("args", "message"), USAGE_CASES, ids=[" ".join(a) for a, _ in USAGE_CASES])
def test_usage_errors_exit_2_and_write_nothing(tc: Taskctl, card: str, args: tuple[str, ...], message: str) -> None:
    before = activity_count(tc.data_dir)
    run = tc(*(arg.replace("{card}", card) for arg in args))
    assert run.code == 2, str(run)
    assert message in run.stderr, str(run)
    assert "Try 'taskctl" in run.stderr or "Usage:" in run.stderr, str(run)
    assert run.stdout == ""
    assert activity_count(tc.data_dir) == before


REFUSALS = [
    (("task", "show", "NOPE-0042"), "NOT_FOUND", None),
    (("task", "move", "{card}", "in_progress"), "INVALID_TRANSITION", "hint: taskctl task claim"),
    (("task", "move", "{card}", "in_review"), "INVALID_TRANSITION", None),
    (("task", "update", "{card}", "--title", "New", "--if-version", "7"), "VERSION_CONFLICT",
     "hint: re-read the task (taskctl task show"),
    (("task", "heartbeat", "{card}"), "CLAIM_LOST", "hint: claim it again"),
    (("task", "waive", "{card}", "--reason", "tiny"), "VALIDATION_FAILED", None),
    (("task", "create", "--project", "no-such-project", "A title"), "NOT_FOUND", None),
    (("comment", "add", "{card}", "   "), "VALIDATION_FAILED", None),
    (("project", "create", "Not A Slug"), "VALIDATION_FAILED", None),
    (("task", "update", "{card}", "--label", "bad label!"), "VALIDATION_FAILED", None),
]


@pytest.mark.parametrize(("args", "code", "hint"), REFUSALS, ids=[" ".join(a) for a, _, _ in REFUSALS])
def test_board_refusals_exit_1_with_the_code_and_write_nothing(
    tc: Taskctl, card: str, args: tuple[str, ...], code: str, hint: str | None
) -> None:
    before = activity_count(tc.data_dir)
    argv = [arg.replace("{card}", card) for arg in args]
    run = tc.refused(code, *argv)
    assert run.stdout == ""
    if hint:
        assert hint in run.stderr, str(run)
    as_json = tc("--json", *argv)
    assert as_json.code == 1 and as_json.stderr == "", str(as_json)
    assert as_json.json["ok"] is False and as_json.json["error"]["code"] == code
    assert activity_count(tc.data_dir) == before


def test_wrong_token_is_unauthorized_and_never_echoed(tc: Taskctl, card: str) -> None:
    forged = "tl_" + "ab" * 32
    before = activity_count(tc.data_dir)
    run = tc.refused("UNAUTHORIZED", "task", "claim", card, "--token", "-", input=forged)
    assert forged not in run.stdout + run.stderr
    run = tc("--json", "task", "show", card, env={"TASKLOOM_TOKEN": forged})
    assert run.code == 1 and run.json["error"]["code"] == "UNAUTHORIZED"
    assert forged not in run.stdout + run.stderr
    assert activity_count(tc.data_dir) == before


def test_missing_token_names_where_it_looked(tc: Taskctl, card: str, tmp_path) -> None:
    board_url = tc.data("board", "status")["url"]
    # A URL given explicitly and a data dir without a token file: no token at all.
    run = tc.refused("UNAUTHORIZED", "task", "show", card, "--url", board_url,
                     env={"TASKLOOM_DATA_DIR": str(tmp_path / "empty"), "TASKLOOM_RUNTIME_DIR": str(tmp_path / "run")})
    assert "no token found" in run.stderr and str(tmp_path / "empty" / "token") in run.stderr


def test_unreachable_board_is_a_clear_failure(tc: Taskctl, tmp_path) -> None:
    run = tc.refused("BOARD_UNREACHABLE", "task", "list", "--url", "http://127.0.0.1:9",
                     env={"TASKLOOM_TOKEN": "tl_" + "0" * 64})
    assert "cannot reach the board at http://127.0.0.1:9" in run.stderr
    assert "hint:" in run.stderr


def test_the_actor_defaults_to_the_user_as_human(tc: Taskctl, card: str) -> None:
    run = tc.data("comment", "add", card, "who am I?", env={"TASKLOOM_ACTOR": None, "TASKLOOM_ACTOR_KIND": None})
    import getpass

    assert (run["actor_kind"], run["actor_id"]) == ("human", getpass.getuser())
    flagged = tc.data("--actor", "bot-7", "--actor-kind", "codex", "comment", "add", card, "and now?")
    assert (flagged["actor_kind"], flagged["actor_id"]) == ("codex", "bot-7")
    # The command's own option wins over the group's.
    inner = tc.data("--actor", "outer", "comment", "add", card, "inner wins", "--actor", "inner")
    assert inner["actor_id"] == "inner"


def test_a_short_reopen_reason_is_refused_and_writes_nothing(tc: Taskctl) -> None:
    project = new_project(tc, "short")
    ref = tc.data("task", "create", "-p", project, "No review needed", "--acceptance-mode", "none")["identifier"]
    tc.ok("task", "claim", ref)
    tc.ok("task", "waive", ref, "--reason", "a one-line fix")
    assert tc.data("task", "move", ref, "done")["status"] == "done"
    before = activity_count(tc.data_dir)
    run = tc.refused("VALIDATION_FAILED", "task", "reopen", ref, "--reason", "oops")
    assert "at least 8 characters" in run.stderr
    assert activity_count(tc.data_dir) == before
    assert tc.data("task", "show", ref)["status"] == "done"
