"""A task ref is one path segment: taskctl encodes it (``http.segment``), never splices it into the URL as is.

``taskctl/task_cmd.py`` built ``/tasks/{ref}`` by string interpolation (``taskctl mcp`` quoted
the same ref). So the characters that mean something in a URL changed what the command did:

- ``#`` starts a fragment: ``task update 'DEMO-0001#x'`` — a ref no task holds — patched
  DEMO-0001 and exited 0, where the board must have been asked about the ref given (NOT_FOUND);
- ``/`` reached another route: ``task show 'DEMO-0001/comments'`` exited 0 having fetched the
  comment list;
- a space (a title typed where a ref belongs) was refused by ``http.client`` before sending, and
  taskctl reported ``BOARD_UNREACHABLE: … is it running?`` about a board that is running.

Each ref below names no task: the answer must be exit 1 with ``NOT_FOUND`` and nothing written.
"""

from __future__ import annotations

import pytest

from tests.cli.conftest import Taskctl, activity_count, new_project


@pytest.fixture(scope="module")
def card(tc: Taskctl) -> str:
    project = new_project(tc, "ref")
    return tc.data("task", "create", "-p", project, "The only card")["identifier"]


CASES = {
    "fragment in an update": ("task", "update", "{card}#not-this-one", "--title", "renamed by accident"),
    "fragment in a move": ("task", "move", "{card}#not-this-one", "canceled"),
    "slash in a show": ("task", "show", "{card}/comments"),
    "space in a show": ("task", "show", "fix the login page"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_ref_no_task_holds_is_not_found_and_writes_nothing(tc: Taskctl, card: str, case: str) -> None:
    before = activity_count(tc.data_dir)
    shown = tc.data("task", "show", card)

    run = tc("--json", *(arg.replace("{card}", card) for arg in CASES[case]))

    assert run.code == 1, f"{case}: a ref naming no task must fail, got exit {run.code}: {run}"
    assert run.json["error"]["code"] == "NOT_FOUND", f"{case}: expected NOT_FOUND: {run}"
    assert activity_count(tc.data_dir) == before, f"{case}: nothing may be written"
    after = tc.data("task", "show", card)
    assert (after["title"], after["status"], after["version"]) == (shown["title"], shown["status"], shown["version"])
