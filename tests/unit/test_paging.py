"""The one keyset-pagination helper: its wire format is the one cursors were first issued in, a
malformed cursor is a clear 400, and walking pages of a real table yields every row exactly once."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.board.queries.paging import decode_cursor, decode_key_cursor, encode_cursor, page, whole
from shared.errors import TaskloomError

#: Cursors as the board wrote them before the helper existed (base64url of ``a:42`` and of
#: ``k:["demo","bug"]``, unpadded): a client may still hold them.
ISSUED_INTEGER = "YTo0Mg"
ISSUED_TEXT_KEY = "azpbImRlbW8iLCJidWciXQ"


def test_cursors_already_handed_out_still_decode() -> None:
    assert decode_cursor(ISSUED_INTEGER) == 42
    assert decode_key_cursor(ISSUED_TEXT_KEY, 2) == ["demo", "bug"]


def test_the_encoder_writes_the_issued_format() -> None:
    assert encode_cursor(42) == ISSUED_INTEGER
    assert encode_cursor(("demo", "bug")) == ISSUED_TEXT_KEY


@given(st.integers(min_value=0, max_value=2**63 - 1))
def test_integer_keys_round_trip(key: int) -> None:
    assert decode_cursor(encode_cursor(key)) == key


#: Texts the board stores, and so names in a cursor: none holds U+0000 (refused on the way in) or
#: a lone surrogate (no UTF-8 body or database text can carry one).
STORED_TEXT = st.text(alphabet=st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)))


@given(st.lists(STORED_TEXT, min_size=1, max_size=3).map(tuple))
def test_text_keys_round_trip(key: tuple[str, ...]) -> None:
    assert decode_key_cursor(encode_cursor(key), len(key)) == list(key)


@given(st.lists(STORED_TEXT, min_size=1, max_size=3), st.data())
def test_a_text_key_holding_nul_is_no_cursor_the_board_wrote(key: list[str], data: st.DataObject) -> None:
    at = data.draw(st.integers(min_value=0, max_value=len(key) - 1))
    key[at] += "\x00"
    with pytest.raises(TaskloomError, match="malformed cursor"):
        decode_key_cursor(encode_cursor(tuple(key)), len(key))


@pytest.mark.parametrize(
    "text",
    [
        "",
        "not base64 at all!",
        encode_cursor(("demo", "bug")),  # a text-key cursor where an integer one belongs
        "YTo",  # "a:" with no number
        "YTotMQ",  # "a:-1"
        "YTrCsg",  # "a:²": a digit to str.isdigit, no key the board wrote
        "Yjo0Mg",  # "b:42"
        "é",
    ],
)
def test_a_malformed_integer_cursor_is_a_clear_400(text: str) -> None:
    with pytest.raises(TaskloomError) as caught:
        decode_cursor(text)
    assert caught.value.code == "VALIDATION_FAILED" and caught.value.status == 400
    assert caught.value.message == "malformed cursor"


@pytest.mark.parametrize(
    "text, width",
    [
        (encode_cursor(42), 2),  # an integer cursor where a text key belongs
        (encode_cursor(("demo",)), 2),  # the wrong width
        ("azpbMV0", 1),  # k:[1]: not texts
        ("azp7fQ", 1),  # k:{}: not a list
        ("azpb", 1),  # k:[ : not JSON
    ],
)
def test_a_malformed_key_cursor_is_a_clear_400(text: str, width: int) -> None:
    with pytest.raises(TaskloomError) as caught:
        decode_key_cursor(text, width)
    assert caught.value.code == "VALIDATION_FAILED" and caught.value.message == "malformed cursor"


def test_walking_the_pages_of_a_real_table_yields_every_row_once(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "rows.sqlite")
    conn.row_factory = sqlite3.Row
    conn.execute("CREATE TABLE rows (name TEXT NOT NULL)")
    conn.executemany("INSERT INTO rows (name) VALUES (?)", [(f"r{n}",) for n in range(23)])
    seen: list[str] = []
    cursor: str | None = None
    pages = 0
    while True:
        after = decode_cursor(cursor) if cursor is not None else 0
        rows = conn.execute(
            "SELECT rowid AS _rowid, name FROM rows WHERE rowid > ? ORDER BY rowid LIMIT ?", (after, 5 + 1)
        ).fetchall()
        answer = page(rows, limit=5, item=lambda row: row["name"], key=lambda row: row["_rowid"])
        seen.extend(answer["items"])
        pages += 1
        cursor = answer["next_cursor"]
        if cursor is None:
            break
        # A row written between two pages lands after the keyset, never shifts the page.
        conn.execute("INSERT INTO rows (name) VALUES (?)", (f"late{pages}",))
    assert seen[:23] == [f"r{n}" for n in range(23)]
    assert len(seen) == len(set(seen)) == 23 + pages - 1
    conn.close()


def test_a_page_exactly_full_has_no_cursor_and_a_whole_list_has_the_same_shape() -> None:
    rows = [{"id": n} for n in range(3)]
    assert page(rows, limit=3, item=lambda row: row["id"], key=lambda row: row["id"]) == {
        "items": [0, 1, 2],
        "next_cursor": None,
    }
    assert page(rows, limit=2, item=lambda row: row["id"], key=lambda row: row["id"])["next_cursor"] == encode_cursor(1)
    assert whole([1]) == {"items": [1], "next_cursor": None}
