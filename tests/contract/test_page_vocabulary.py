"""The page's copy of the board's vocabulary equals ``shared/domain.py``.

The page is plain ES modules with no build step, so it cannot import the Python tables: it keeps
literal copies (statuses, the status graph, kinds, priorities, comment kinds, relation types).
This test reads every ``const NAME = <literal>`` of ``services/board/static/js/*.js`` as data and
holds each copy against the table it mirrors, wherever in the page's modules it is defined.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from shared import domain

ROOT = Path(__file__).resolve().parents[2]
STATIC_JS = ROOT / "services/board/static/js"
_DEFINITION = re.compile(r"^(?:export\s+)?const\s+([A-Z_]+)\s*=\s*", re.MULTILINE)
_CLOSING = {"[": "]", "{": "}", "(": ")"}


def _literal_text(source: str, start: int) -> str:
    """The bracketed literal that starts at ``start`` (strings may hold brackets)."""
    stack: list[str] = []
    quote: str | None = None
    for at in range(start, len(source)):
        char = source[at]
        if quote is not None:
            if char == "\\":
                continue
            if char == quote and source[at - 1] != "\\":
                quote = None
            continue
        if char in "\"'`":
            quote = char
        elif char in _CLOSING:
            stack.append(_CLOSING[char])
        elif stack and char == stack[-1]:
            stack.pop()
            if not stack:
                return source[start : at + 1]
    raise AssertionError(f"unbalanced literal at offset {start}")


def _as_data(text: str) -> Any:
    """A JS array/object literal of strings and numbers (``new Set([...])`` too) as Python data."""
    text = text.strip()
    if text.startswith("new Set("):
        return set(_as_data(text[len("new Set(") : -1]))
    text = re.sub(r"'([^'\\]*)'", lambda m: json.dumps(m.group(1)), text)
    # Bare object keys (``todo:``) get quotes; quoted ones are left alone.
    text = re.sub(r"([{,]\s*)([A-Za-z_$][\w$]*)\s*:", r'\1"\2":', text)
    text = re.sub(r",\s*([\]}])", r"\1", text)  # trailing commas
    return json.loads(text)


def page_constants() -> dict[str, list[tuple[str, Any]]]:
    """Every data constant of the page's modules: name -> [(file, value)], literals only."""
    found: dict[str, list[tuple[str, Any]]] = {}
    for path in sorted(STATIC_JS.glob("*.js")):
        source = path.read_text(encoding="utf-8")
        for match in _DEFINITION.finditer(source):
            start = match.end()
            if source.startswith("new Set(", start) or source[start] in "[{":
                try:
                    value = _as_data(_literal_text(source, start))
                except (json.JSONDecodeError, AssertionError):
                    continue  # not plain data (functions, computed values)
                found.setdefault(match.group(1), []).append((path.name, value))
    return found


CONSTANTS = page_constants()


def copies(name: str) -> list[tuple[str, Any]]:
    defined = CONSTANTS.get(name, [])
    assert defined, f"the page no longer defines {name} in {STATIC_JS.relative_to(ROOT)}: update this test to its new name"
    return defined


def test_the_scan_reads_the_page() -> None:
    """The reader itself: it sees the page's tables as data (a parse that found nothing would pass all)."""
    assert {"STATUSES", "TRANSITIONS", "TERMINAL", "PRIORITY_RANK", "KINDS", "PRIORITIES"} <= set(CONSTANTS)
    assert _as_data('{ a: ["x", \'y\'], "b": [], }') == {"a": ["x", "y"], "b": []}
    assert _as_data('new Set(["done"])') == {"done"}


def test_statuses_are_the_columns_in_the_spec_order() -> None:
    for where, value in copies("STATUSES"):
        assert value == list(domain.STATUSES), where
    for where, value in copies("STATUS_LABELS"):
        assert set(value) == set(domain.STATUSES), where


def test_the_status_graph_equals_the_domain_table() -> None:
    expected = {status: sorted(targets) for status, targets in domain.TRANSITIONS.items()}
    for where, value in copies("TRANSITIONS"):
        assert {status: sorted(targets) for status, targets in value.items()} == expected, where
    for where, value in copies("TERMINAL"):
        assert value == set(domain.TERMINAL), where


def test_priorities_and_their_rank() -> None:
    for where, value in copies("PRIORITIES"):
        assert sorted(value) == sorted(domain.PRIORITIES), where
    for where, value in copies("PRIORITY_LABELS"):
        assert set(value) == set(domain.PRIORITIES), where
    # domain.PRIORITIES runs low → urgent; the page ranks the most urgent first (rank 0).
    for where, value in copies("PRIORITY_RANK"):
        assert sorted(value, key=value.__getitem__) == list(reversed(domain.PRIORITIES)), where


@pytest.mark.parametrize(
    "name, table",
    [("KINDS", domain.KINDS), ("COMMENT_KINDS", domain.COMMENT_KINDS), ("RELATION_TYPES", domain.RELATION_TYPES)],
)
def test_the_page_offers_every_choice_and_no_other(name: str, table: tuple[str, ...]) -> None:
    for where, value in copies(name):
        assert sorted(value) == sorted(table), where


def test_kind_marks_name_only_kinds() -> None:
    for where, value in copies("KIND_MARKS"):
        assert set(value) <= set(domain.KINDS), where
