"""The delivery report format: a markdown skeleton and the checker that judges a report (pure).

A report is markdown with level-2 sections. ``## Summary``, ``## Changes`` and ``## Verification``
are required and must hold the writer's own words; ``## Notes`` is optional; any other section is
allowed. Headings match case-insensitively; a heading inside a fenced code block is content, not a
heading. ``TEMPLATE`` is the skeleton a writer starts from: every placeholder in it is marked
``<replace: …>``, so the template as shipped is refused until a person replaces them — a report
that still says what it should say has not said it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Final

from shared.limits import REPORT_MAX_BYTES

MAX_REPORT_BYTES: Final = REPORT_MAX_BYTES
REQUIRED_SECTIONS: Final = ("Summary", "Changes", "Verification")
OPTIONAL_SECTIONS: Final = ("Notes",)

#: Every placeholder in TEMPLATE looks like this; partly edited placeholders are still caught.
PLACEHOLDER: Final = re.compile(r"<replace:[^>]*>", re.IGNORECASE)

TEMPLATE: Final = """\
## Summary

<replace: what this delivery does and why, in two or three sentences>

## Changes

- <replace: file, module or component>: <replace: what changed in it>

## Verification

- <replace: the command you ran or the check you made>: <replace: what it showed>

## Notes

<replace: follow-ups, risks or open questions; delete this section if there are none>
"""

_HEADING = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


@dataclass
class _Section:
    title: str
    lines: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "\n".join(self.lines).strip()


def _sections(body: str) -> list[_Section]:
    """Level-2 sections in order; deeper headings belong to the section above them."""
    sections: list[_Section] = []
    current: _Section | None = None
    fence: str | None = None
    for line in body.splitlines():
        opened = _FENCE.match(line)
        if fence is not None:
            # CommonMark: a fence closes with the same character, at least as long.
            if opened and opened.group(1)[0] == fence[0] and len(opened.group(1)) >= len(fence):
                fence = None
        elif opened:
            fence = opened.group(1)
        else:
            heading = _HEADING.match(line)
            if heading and len(heading.group(1)) <= 2:
                current = _Section((heading.group(2) or "").strip()) if len(heading.group(1)) == 2 else None
                if current is not None:
                    sections.append(current)
                continue
        if current is not None:
            current.lines.append(line)
    return sections


def check_report(body: str) -> list[str]:
    """The problems that make ``body`` unacceptable as a delivery report; empty when it is fine."""
    if not body.strip():
        return ["the report is empty"]
    size = len(body.encode("utf-8"))
    if size > MAX_REPORT_BYTES:
        return [f"the report is {size} bytes; the limit is {MAX_REPORT_BYTES} bytes (256 KiB)"]
    problems: list[str] = []
    by_title: dict[str, list[_Section]] = {}
    for section in _sections(body):
        by_title.setdefault(section.title.casefold(), []).append(section)
    for title in REQUIRED_SECTIONS:
        found = by_title.get(title.casefold(), [])
        if not found:
            problems.append(f"the required section '## {title}' is missing")
            continue
        if len(found) > 1:
            problems.append(f"the section '## {title}' appears {len(found)} times; write it once")
        text = "\n".join(section.text for section in found).strip()
        if not text:
            problems.append(f"the required section '## {title}' is empty")
        elif PLACEHOLDER.search(text):
            problems.append(f"the section '## {title}' still holds template placeholder text (<replace: …>)")
    for title in OPTIONAL_SECTIONS:
        found = by_title.get(title.casefold(), [])
        if any(PLACEHOLDER.search(section.text) for section in found):
            problems.append(f"the section '## {title}' still holds template placeholder text (<replace: …>)")
    return problems
