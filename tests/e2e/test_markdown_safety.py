"""Markdown in real Chromium: descriptions, comments and reports render as markdown, and nothing a
field holds ever runs — `<script>`, `javascript:` links, `onerror=`/`ontoggle=` attributes, raw
HTML. A spy counts what would run (a page global the payloads call, CSP violations the browser
reports, dialogs), and the drawn DOM is searched for anything executable."""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.support_page import Board, card, open_page, start_board
from tests.support.board import TaskdProcess

pytestmark = pytest.mark.e2e

#: Each payload calls the spy, so running it anywhere shows.
PAYLOADS = [
    "<script>window.__ran.push('script')</script>",
    "<img src=x onerror=\"window.__ran.push('onerror')\">",
    "<svg onload=\"window.__ran.push('svg')\"></svg>",
    "<details open ontoggle=\"window.__ran.push('ontoggle')\"><summary>x</summary></details>",
    "<iframe src=\"javascript:window.__ran.push('iframe')\"></iframe>",
    "<a href=\"javascript:window.__ran.push('raw-link')\">raw link</a>",
    "[md link](javascript:window.__ran.push('md-link'))",
    "[mixed case](JaVaScRiPt:window.__ran.push('case'))",
    "[data link](data:text/html,<script>window.__ran.push('data')</script>)",
    "<javascript:window.__ran.push('autolink')>",
    "![alt\" onerror=\"window.__ran.push('alt')](x\" onerror=\"window.__ran.push('src'))",
    "<style>body{display:none}</style>",
    "<form action=\"javascript:window.__ran.push('form')\"><button>go</button></form>",
]
HOSTILE = "\n\n".join(PAYLOADS)

SPY = """
window.__ran = [];
window.__violations = [];
document.addEventListener('securitypolicyviolation', (e) => window.__violations.push(e.violatedDirective + ' ' + e.blockedURI));
window.alert = window.confirm = window.prompt = () => window.__ran.push('dialog');
"""

#: What the drawn page must not hold anywhere: executable elements, handlers, script URLs.
FIND_EXECUTABLE = """() => {
  const found = [];
  for (const el of document.querySelectorAll('#app *, #drawer *')) {
    const drawnText = el.closest('.prose, .card, .feed-list, .marker');
    if (drawnText && ['SCRIPT', 'IFRAME', 'OBJECT', 'EMBED', 'SVG', 'STYLE', 'FORM'].includes(el.tagName.toUpperCase()))
      found.push(el.tagName);
    for (const attr of el.attributes) {
      if (/^on/i.test(attr.name)) found.push(`${el.tagName}[${attr.name}]`);
      if (/^(href|src|action|formaction|xlink:href)$/i.test(attr.name) && /^\\s*(javascript|data|vbscript):/i.test(attr.value))
        found.push(`${el.tagName}[${attr.name}=${attr.value}]`);
    }
  }
  return found;
}"""


@pytest.fixture
def board(taskd: TaskdProcess) -> Board:
    return start_board(taskd)


def report(extra: str) -> str:
    return f"## Summary\n\nShipped **it**.\n\n{extra}\n\n## Changes\n\n- one\n- two\n\n## Verification\n\n`make test`\n"


def test_nothing_in_any_field_runs_and_markdown_still_renders(browser: Any, board: Board) -> None:
    api = board.api
    api.patch("/projects/demo", {"name": "Demo <img src=x onerror=\"window.__ran.push('project')\">"})
    task = board.task(
        "<script>window.__ran.push('title')</script> <img src=x onerror=\"window.__ran.push('title-img')\">",
        description=f"## Plan\n\nSome **bold** text and a [safe link](https://example.com/docs).\n\n{HOSTILE}",
        labels=["docs"],
    )
    hostile_name = "<b onmouseover=\"window.__ran.push('assignee')\">ann</b>"
    board.task("Assigned card", labels=["docs"], assignee_kind="human", assignee_id=hostile_name)
    api.post(f"/tasks/{task['id']}/acceptance", {"items": [f"criterion {PAYLOADS[1]}"]})
    api.post(f"/tasks/{task['id']}/comments", {"body": f"A *comment*.\n\n{HOSTILE}"})
    worker = api.as_actor("claude", "worker-1")
    worker.post(f"/tasks/{task['id']}/claim")
    worker.post(f"/tasks/{task['id']}/deliver", {"body": report(HOSTILE)})
    asked = board.task("Question card")
    worker.post(f"/tasks/{asked['id']}/claim")
    worker.post(f"/tasks/{asked['id']}/ask", {"body": f"{PAYLOADS[1]} which one?"})
    blocked = board.task("Blocked card")
    worker.post(f"/tasks/{blocked['id']}/claim")
    worker.post(f"/tasks/{blocked['id']}/move", {"to": "blocked", "reason": PAYLOADS[3]})

    page = open_page(browser, board, width=1700)
    page.add_init_script(SPY)
    page.reload()
    page.wait_for_selector("#connection[data-state=live]")
    card(page, task["identifier"], "in_review").wait_for()
    assert "<script>" in card(page, task["identifier"]).inner_text(), "a title shows what was typed"
    assert "onerror" in card(page, asked["identifier"]).locator(".marker").inner_text()

    card(page, task["identifier"]).locator(".card-button").click()
    details = page.locator("#panel-details .prose.markdown")
    details.wait_for()
    assert details.locator("h2", has_text="Plan").count() == 1 and details.locator("strong", has_text="bold").count() == 1
    safe = details.locator("a", has_text="safe link")
    assert safe.get_attribute("href") == "https://example.com/docs"
    assert safe.get_attribute("rel") == "noopener noreferrer nofollow" and safe.get_attribute("target") == "_blank"
    assert "<script>window.__ran.push('script')</script>" in details.inner_text(), "raw HTML reads as text"
    page.wait_for_selector("#panel-details .acceptance li")
    page.click("#tab-comments")
    page.wait_for_selector("#panel-comments .prose.markdown em")
    page.click("#tab-reports")
    page.wait_for_selector("#panel-reports .prose.markdown h2")
    assert page.locator("#panel-reports .prose.markdown code", has_text="make test").count() == 1
    page.click("#tab-activity")
    page.wait_for_selector("#panel-activity li")
    if page.get_attribute("#feed-toggle", "aria-expanded") != "true":
        page.click("#feed-toggle")
    page.wait_for_selector(".feed-entry")

    # Every link of every rendered field, clicked: a script URL would run now.
    for tab in ("details", "comments", "reports"):
        page.click(f"#tab-{tab}")
        links = page.locator(f"#panel-{tab} .prose a:not([href^='https://'])").all()
        assert len(links) >= 4, tab  # the markdown links, kept as text links without their href
        for link in links:
            link.click()
    page.hover(".card .labels")  # where an onmouseover would fire
    page.wait_for_timeout(0)  # let any queued task run before the spy is read
    assert page.evaluate(FIND_EXECUTABLE) == []
    assert page.evaluate("window.__ran") == [], "a payload ran"
    assert page.evaluate("window.__violations") == [], "something tried to run and only the CSP stopped it"
    page.context.close()
    assert not board.problems, board.problems
