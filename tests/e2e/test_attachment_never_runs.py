"""An attachment is never a script or a stylesheet of the board's page, whatever type it was
uploaded with (real Chromium).

The page's Content-Security-Policy lets it run scripts and styles from its own origin only
(``script-src 'self'``), and attachments are served from that same origin. So one uploaded as
``text/javascript`` — by an agent, or with a state import — was a script the policy allowed: any
markup that got into the page could load ``/api/v1/attachments/<id>`` as ``<script src>`` and run
with the person's session. Such types are now served as ``application/octet-stream``, which
``nosniff`` forbids as a script or a stylesheet; the attachment's recorded type is unchanged.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.support_page import Board, open_page, start_board
from tests.support.board import TaskdProcess

pytestmark = pytest.mark.e2e

SCRIPT = b"window.__ran = (window.__ran || []).concat(['attachment']);"
STYLE = b"body { background-color: rgb(1, 2, 3) !important; }"


def upload(board: Board, task: dict[str, Any], name: str, content_type: str, data: bytes) -> dict[str, Any]:
    reply = board.api.http.post(f"/api/v1/tasks/{task['id']}/attachments", params={"filename": name},
                                content=data, headers={"Content-Type": content_type})
    assert reply.status_code == 201, reply.text
    return reply.json()


@pytest.fixture
def board(taskd: TaskdProcess) -> Board:
    return start_board(taskd)


@pytest.mark.parametrize("content_type", ["text/javascript", "application/javascript; charset=utf-8",
                                          "Text/ECMAScript", "application/x-javascript"])
def test_an_attachment_uploaded_as_a_script_never_runs_in_the_page(browser: Any, board: Board,
                                                                    content_type: str) -> None:
    task = board.task("Carries files")
    script = upload(board, task, "payload.js", content_type, SCRIPT)
    style = upload(board, task, "payload.css", "text/css", STYLE)
    page = open_page(browser, board)
    background = page.evaluate("getComputedStyle(document.body).backgroundColor")
    for attachment, tag in ((script, "script"), (style, "link")):
        url = f"{board.url}/api/v1/attachments/{attachment['id']}"
        # What markup that got into the page would do: name the attachment as its own script or style.
        loaded = page.evaluate("""([tag, url]) => new Promise((resolve) => {
            const el = document.createElement(tag);
            if (tag === 'link') { el.rel = 'stylesheet'; el.href = url; } else { el.src = url; }
            el.onload = () => resolve('loaded'); el.onerror = () => resolve('refused');
            document.head.appendChild(el);
        })""", [tag, url])
        assert loaded == "refused", (tag, content_type)
    assert page.evaluate("window.__ran") is None, "the attachment ran as a script"
    assert page.evaluate("getComputedStyle(document.body).backgroundColor") == background
    page.context.close()

    # Downloaded, the bytes and the recorded type are the ones uploaded.
    reply = board.api.http.get(f"/api/v1/attachments/{script['id']}")
    assert reply.content == SCRIPT and reply.headers["content-type"] == "application/octet-stream"
    assert reply.headers["x-content-type-options"] == "nosniff"
    assert reply.headers["content-security-policy"] == "sandbox; default-src 'none'"
    assert "attachment;" in reply.headers["content-disposition"]
    listed = board.api.get(f"/tasks/{task['id']}/attachments")
    assert {item["content_type"] for item in listed["items"]} == {script["content_type"], "text/css"}
