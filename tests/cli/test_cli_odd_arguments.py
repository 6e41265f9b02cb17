"""``taskctl``'s argument handling: actors, refs and URLs a user types, and bytes that are not UTF-8.

Each test runs the real ``taskctl`` against a real ``taskd``; the board side of every claim is shown
with a request that does not go through taskctl's own client.
"""

from __future__ import annotations

import http.client
import json
import urllib.parse

import pytest

from tests.cli.conftest import Taskctl, new_project


def _raw_comment(url: str, token: str, ref: str, actor_id: bytes, body: str) -> tuple[int, dict]:
    """POST a comment with the actor header as the UTF-8 bytes given (not through taskctl)."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    try:
        conn.putrequest("POST", f"/api/v1/tasks/{urllib.parse.quote(ref, safe='')}/comments")
        payload = json.dumps({"body": body}).encode()
        conn.putheader("Authorization", f"Bearer {token}")
        conn.putheader("Content-Type", "application/json")
        conn.putheader("Content-Length", str(len(payload)))
        conn.putheader("X-Taskloom-Actor", actor_id)
        conn.putheader("X-Taskloom-Actor-Kind", b"human")
        conn.endheaders(payload)
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


@pytest.mark.parametrize("actor", ["josé", "工人"])
def test_a_non_ascii_actor_id_is_one_the_board_accepts(tc: Taskctl, shared_taskd, actor: str) -> None:
    project = new_project(tc, "uni")
    ref = tc.data("task", "create", "-p", project, "Unicode actors")["identifier"]
    # The board takes the id as UTF-8 header bytes and stores it as given.
    status, body = _raw_comment(shared_taskd.url, shared_taskd.token, ref, actor.encode("utf-8"), "direct")
    assert status == 201 and body["actor_id"] == actor, (status, body)
    # taskctl, given the same actor, must write as it too (not INTERNAL, not "must be UTF-8 text").
    run = tc("--json", "comment", "add", ref, "through taskctl", env={"TASKLOOM_ACTOR": actor})
    assert run.code == 0, str(run)
    assert run.json["data"]["actor_id"] == actor, str(run)


def test_a_uuid_prefix_with_a_dash_and_short_digit_group_is_a_prefix(tc: Taskctl) -> None:
    """README: "a unique prefix of it will do (taskctl task show 3f2a, like git's short hashes)"."""
    project = new_project(tc, "uuidp")
    target = None
    for _ in range(64):  # each uuid has a digit after its first dash with probability 10/16
        task = tc.data("task", "create", "-p", project, "Find me by a uuid prefix")
        if task["id"][9].isdigit():
            target = task
            break
    assert target is not None, "no uuid with a digit after the first dash in 64 tasks"
    prefix = target["id"][:10]  # e.g. "e6bc31c4-7": eight hex digits, the dash, one digit
    assert tc.data("task", "show", target["id"][:8])["id"] == target["id"]  # the dashless prefix works
    run = tc("--json", "task", "show", prefix)
    assert run.code == 0, f"the uuid prefix {prefix!r} was not found: {run}"
    assert run.json["data"]["id"] == target["id"]


@pytest.mark.parametrize("url", ["http://[::1", "http://127.0.0.1:99999", "http://127.0.0.1:port"])
def test_a_malformed_board_url_is_a_refusal_not_an_internal_error(tc: Taskctl, url: str) -> None:
    """``--url ftp://x`` is VALIDATION_FAILED "not a board URL"; these are no less the user's typo."""
    run = tc("--json", "--url", url, "task", "list", env={"TASKLOOM_TOKEN": "tl_" + "0" * 64})
    assert run.code == 1, str(run)
    error = run.json["error"]
    assert error["code"] != "INTERNAL", str(run)
    assert error["code"] == "VALIDATION_FAILED", str(run)


def test_a_value_spelled_json_does_not_switch_errors_to_json(tc: Taskctl) -> None:
    """``--json`` after ``--`` is a comment's text, not the flag: the refusal is for a person (stderr)."""
    run = tc("comment", "add", "NOPE-0042", "--", "--json")
    assert run.code == 1, str(run)
    assert run.stdout == "", f"a human-mode error went to stdout as JSON: {run}"
    assert "error: NOT_FOUND:" in run.stderr, str(run)


#: A byte that is not UTF-8 (0xFF) as Python passes it in argv: subprocess encodes the lone
#: surrogate back to the raw byte with os.fsencode, exactly what a shell's $'\xff' gives.
NOT_UTF8 = "\udcff"


@pytest.mark.parametrize("args", [("task", "show", "A" + NOT_UTF8), ("task", "list", "-p", "p" + NOT_UTF8)],
                         ids=["ref", "query"])
def test_an_argument_that_is_not_utf8_is_refused_not_an_internal_error(tc: Taskctl, args: tuple[str, ...]) -> None:
    run = tc("--json", *args)
    assert run.code in (1, 2), str(run)
    assert run.json["ok"] is False, str(run)
    assert run.json["error"]["code"] != "INTERNAL", f"a user's odd byte is reported as a taskctl bug: {run}"
