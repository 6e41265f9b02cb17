"""Replaced histories, pure (services/hub/histories.py): which cursors a restore made ambiguous."""

from __future__ import annotations

from services.hub.histories import ReplacedHistories
from shared import hub_protocol as hp


def test_a_cursor_between_the_restore_point_and_the_replaced_head_is_refused_unless_it_names_the_new_board() -> None:
    histories = ReplacedHistories()
    histories.replaced(base=10, upto=15, board_id="brd_old", reason=hp.RESET_BOARD_CHANGED)
    assert [histories.reset_reason(after, None) for after in (9, 10, 11, 15, 16)] == [
        None, None, hp.RESET_BOARD_CHANGED, hp.RESET_BOARD_CHANGED, None,
    ]
    assert histories.reset_reason(12, "brd_old") == hp.RESET_BOARD_CHANGED
    assert histories.reset_reason(12, "brd_new") is None  # a cursor of the new history itself


def test_a_restore_under_the_same_board_id_refuses_the_range_whatever_the_follower_says() -> None:
    histories = ReplacedHistories()
    histories.replaced(base=4, upto=9, board_id="brd_1", reason=hp.RESET_BOARD_CURSOR_AHEAD)
    assert histories.reset_reason(5, "brd_1") == hp.RESET_BOARD_CURSOR_AHEAD
    assert histories.reset_reason(5, None) == hp.RESET_BOARD_CURSOR_AHEAD


def test_a_restore_to_a_newer_head_replaces_nothing_the_hub_saw() -> None:
    histories = ReplacedHistories()
    histories.replaced(base=20, upto=15, board_id="brd_old", reason=hp.RESET_BOARD_CHANGED)
    histories.replaced(base=20, upto=None, board_id=None, reason=hp.RESET_BOARD_CHANGED)
    assert all(histories.reset_reason(after, None) is None for after in range(0, 30))


def test_only_the_newest_ranges_are_kept() -> None:
    histories = ReplacedHistories(limit=2)
    for n in range(3):
        histories.replaced(base=100 * n, upto=100 * n + 50, board_id=f"brd_{n}", reason=hp.RESET_BOARD_CHANGED)
    assert histories.reset_reason(25, None) is None
    assert histories.reset_reason(125, None) == histories.reset_reason(225, None) == hp.RESET_BOARD_CHANGED
