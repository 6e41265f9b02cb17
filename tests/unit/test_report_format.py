"""The delivery report format: the template is refused until filled, and every problem is named."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.board.report_format import MAX_REPORT_BYTES, PLACEHOLDER, TEMPLATE, check_report

FILLED = (
    "## Summary\n\nThe board now keeps delivery reports.\n\n"
    "## Changes\n\n- services/board/commands/reports.py: write, deliver, waive\n\n"
    "## Verification\n\n- pytest tests/integration/test_reports.py: 20 passed\n"
)


def fill(template: str) -> str:
    return PLACEHOLDER.sub("done", template)


def test_the_template_as_shipped_is_refused_section_by_section() -> None:
    problems = check_report(TEMPLATE)
    assert len(problems) == 4
    for title in ("Summary", "Changes", "Verification", "Notes"):
        assert any(f"'## {title}' still holds template placeholder" in problem for problem in problems)


def test_a_filled_template_is_accepted() -> None:
    assert check_report(fill(TEMPLATE)) == []
    assert check_report(FILLED) == []


def test_a_partly_filled_placeholder_is_still_a_placeholder() -> None:
    body = fill(TEMPLATE).replace("- done: done\n\n## Verification", "- store.py: <replace: what changed in it>\n\n## Verification", 1)
    assert body != fill(TEMPLATE)
    assert check_report(body) == ["the section '## Changes' still holds template placeholder text (<replace: …>)"]


@pytest.mark.parametrize("body", ["", "   \n\t\n"])
def test_an_empty_report_is_one_problem(body: str) -> None:
    assert check_report(body) == ["the report is empty"]


def test_an_oversize_report_is_refused_without_parsing() -> None:
    body = FILLED + "x" * MAX_REPORT_BYTES
    problems = check_report(body)
    assert len(problems) == 1 and "limit is 262144 bytes" in problems[0]
    assert check_report(FILLED + "x" * (MAX_REPORT_BYTES - len(FILLED.encode()))) == []


def test_size_counts_utf8_bytes_not_characters() -> None:
    chars = (MAX_REPORT_BYTES - len(FILLED.encode())) // 3 + 1
    assert len(FILLED + "€" * chars) < MAX_REPORT_BYTES
    assert "limit" in check_report(FILLED + "€" * chars)[0]


def test_each_missing_section_is_named() -> None:
    assert check_report("## Summary\n\nShort and sweet.\n") == [
        "the required section '## Changes' is missing",
        "the required section '## Verification' is missing",
    ]


def test_an_empty_required_section_is_named() -> None:
    body = FILLED.replace("- pytest tests/integration/test_reports.py: 20 passed\n", "\n\n")
    assert check_report(body) == ["the required section '## Verification' is empty"]


def test_a_repeated_section_is_named() -> None:
    assert check_report(FILLED + "\n## Summary\n\nagain\n") == ["the section '## Summary' appears 2 times; write it once"]


def test_headings_match_case_insensitively_with_closing_hashes() -> None:
    body = FILLED.replace("## Summary", "## summary ##").replace("## Changes", "  ## CHANGES")
    assert check_report(body) == []


def test_a_heading_inside_a_code_fence_is_content() -> None:
    body = FILLED.replace("## Changes", "```\n## Changes\n```\n")
    assert check_report(body) == ["the required section '## Changes' is missing"]
    fenced_verification = FILLED.replace("- pytest", "~~~~\n## Summary\n~~~\nstill fenced\n~~~~\n- pytest")
    assert check_report(fenced_verification) == []


def test_subsections_are_content_and_a_top_heading_ends_a_section() -> None:
    body = FILLED.replace("- pytest tests/integration/test_reports.py: 20 passed\n", "### Unit\n")
    assert check_report(body) == []
    ended = FILLED.replace("## Verification\n\n", "## Verification\n\n# Appendix\n\n")
    assert check_report(ended) == ["the required section '## Verification' is empty"]


def test_notes_are_optional_and_other_sections_allowed() -> None:
    assert check_report(FILLED + "\n## Notes\n\n## Screenshots\n\nnone\n") == []
    assert check_report(FILLED + "\n## Notes\n\n<replace: follow-ups>\n") == [
        "the section '## Notes' still holds template placeholder text (<replace: …>)"
    ]


_TEXT = st.text(st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp")), min_size=1, max_size=40).filter(
    lambda text: text.strip() and "<replace:" not in text.lower() and not text.lstrip().startswith(("#", "`", "~"))
)


@given(summary=_TEXT, changes=_TEXT, verification=_TEXT)
def test_any_real_words_in_the_three_sections_pass(summary: str, changes: str, verification: str) -> None:
    body = f"## Summary\n{summary}\n## Changes\n{changes}\n## Verification\n{verification}\n"
    assert check_report(body) == []
