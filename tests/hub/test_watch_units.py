"""Card-brief registrations, the pure parts: the ``watch`` validator, the cadence, the file rules."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.hub.briefs import dir_target, path_problem, tasks_named, tasks_signalled, write_brief
from services.hub.cadence import RefreshSchedule
from services.hub.protocol import (
    Close,
    Request,
    RequestInvalid,
    Send,
    Session,
    validate_watch,
)
from shared import hub_protocol as hp

TOKEN = "th_secret"


def line(message: object) -> bytes:
    return orjson.dumps(message) + b"\n"


def greeted() -> Session:
    session = Session(TOKEN)
    session.feed(line(hp.hello(TOKEN)))
    return session


def refused(message: dict) -> RequestInvalid:
    with pytest.raises(RequestInvalid) as caught:
        validate_watch({"type": "watch", **message})
    return caught.value


# -- the validator ------------------------------------------------------------------------------


def test_three_spellings_normalise() -> None:
    single = validate_watch({"type": "watch", "ref": "DEMO-0001", "out": "/w/a/../card.md"})
    assert single == {
        "cards": [{"ref": "DEMO-0001", "out": "/w/card.md"}], "refs": None, "dir": None,
        "ttl_ms": hp.DEFAULT_WATCH_TTL_MS, "detach": False,
    }
    cards = validate_watch(hp.watch(cards=[{"ref": "A-1", "out": "/a.md"}, {"ref": "B-1", "out": "/b.md"}],
                                    ttl_ms=0, detach=True))
    assert cards["cards"] == [{"ref": "A-1", "out": "/a.md"}, {"ref": "B-1", "out": "/b.md"}]
    assert (cards["ttl_ms"], cards["detach"]) == (0, True)
    many = validate_watch(hp.watch(refs=["A-1", "A-2"], dir="/work/"))
    assert (many["cards"], many["refs"], many["dir"]) == (None, ["A-1", "A-2"], "/work")


@pytest.mark.parametrize(
    ("message", "field"),
    [
        ({"cards": [{"ref": "A-1", "out": "/a.md"}], "out": "/b.md"}, "cards"),
        ({"cards": [{"ref": "A-1", "out": "/a.md"}], "dir": "/d"}, "cards"),
        ({"ref": "A-1", "dir": "/d"}, "ref"),
        ({"ref": "A-1"}, "out"),
        ({"refs": ["A-1"]}, "dir"),
        ({}, "cards"),
        ({"cards": []}, "cards"),
        ({"cards": [{"ref": "A-1", "out": "relative/card.md"}]}, "cards[0].out"),
        ({"cards": [{"ref": "A-1", "out": "/dir/"}]}, "cards[0].out"),
        ({"cards": [{"ref": "A-1", "out": "/a.md", "mode": "x"}]}, "cards[0]"),
        ({"cards": ["A-1"]}, "cards[0]"),
        ({"cards": [{"ref": " ", "out": "/a.md"}]}, "cards[0].ref"),
        ({"ref": "A-1", "out": "card.md"}, "out"),
        ({"refs": ["A-1"], "dir": "work"}, "dir"),
        ({"cards": [{"ref": "A-1", "out": "/a.md"}, {"ref": "A-1", "out": "/b.md"}]}, "refs"),
        ({"cards": [{"ref": "A-1", "out": "/a.md"}, {"ref": "A-2", "out": "/x/../a.md"}]}, "paths"),
        ({"refs": ["A-1", "A-1"], "dir": "/d"}, "refs"),
        ({"ref": "A-1", "out": "/a.md", "ttl_ms": -1}, "ttl_ms"),
        ({"ref": "A-1", "out": "/a.md", "ttl_ms": "5"}, "ttl_ms"),
        ({"ref": "A-1", "out": "/a.md", "detach": "yes"}, "detach"),
    ],
)
def test_bad_watch_requests_name_the_field(message: dict, field: str) -> None:
    assert refused(message).details["field"] == field


def test_unknown_fields_and_too_many_cards() -> None:
    assert refused({"ref": "A-1", "out": "/a.md", "force": True}).details == {"unknown": ["force"]}
    cards = [{"ref": f"A-{n}", "out": f"/c/{n}.md"} for n in range(hp.MAX_WATCH_CARDS + 1)]
    assert refused({"cards": cards}).details["count"] == hp.MAX_WATCH_CARDS + 1


def test_session_streams_one_watch_at_a_time() -> None:
    session = greeted()
    assert session.feed(line(hp.watch(ref="A-1", out="/a.md")))[0].type == "watch"
    assert session.watching
    second = session.feed(line(hp.watch(ref="A-2", out="/b.md")))
    assert [a.message["code"] for a in second if isinstance(a, Send)] == [hp.ALREADY_STREAMING]
    follow = session.feed(line(hp.follow()))
    assert [a.message["code"] for a in follow if isinstance(a, Send)] == [hp.ALREADY_STREAMING]
    # Detached requests, status and stop are one-answer requests: always allowed.
    assert session.feed(line(hp.watch(ref="A-3", out="/c.md", detach=True)))[0].type == "watch"
    assert session.feed(line(hp.watch_status())) == [Request("watch-status", {})]
    assert session.feed(line(hp.watch_stop("w_1"))) == [Request("watch-stop", {"registration_id": "w_1"})]
    # The owner's end of input is its departure: closed without a word.
    assert session.feed_eof() == [Close("eof")]


def test_a_refused_watch_frees_the_session() -> None:
    session = greeted()
    session.feed(line(hp.watch(ref="A-1", out="/a.md")))
    session.watch_refused()
    assert session.feed(line(hp.follow()))[0].type == "follow"
    bad = session.feed(line({"type": "watch", "ref": "A-1", "out": "a.md"}))
    assert [a.message["code"] for a in bad if isinstance(a, Send)] == [hp.VALIDATION_FAILED]


def test_a_follow_session_cannot_also_watch_in_the_foreground() -> None:
    session = greeted()
    session.feed(line(hp.follow()))
    actions = session.feed(line(hp.watch(ref="A-1", out="/a.md")))
    assert [a.message["code"] for a in actions if isinstance(a, Send)] == [hp.ALREADY_STREAMING]


# -- the cadence ---------------------------------------------------------------------------------


def test_a_burst_settles_into_one_batch_after_the_debounce() -> None:
    schedule = RefreshSchedule(debounce=0.3, max_wait=2.0, floor=5.0)
    assert schedule.due() is None
    for at in (10.0, 10.1, 10.2):
        schedule.mark(at, ["t1"])
    assert schedule.due() == pytest.approx(10.5)
    assert schedule.take(10.5) == (False, {"t1"})
    assert schedule.due() is None and not schedule.pending


def test_a_trickle_is_served_by_the_maximum_wait() -> None:
    schedule = RefreshSchedule(debounce=0.3, max_wait=2.0, floor=5.0)
    at = 0.0
    while at < 1.9:
        schedule.mark(at, ["t1"])
        at += 0.2
    assert schedule.due() == pytest.approx(2.0)


def test_the_floor_spaces_batches_and_task_less_marks_take_everything() -> None:
    schedule = RefreshSchedule(debounce=0.3, max_wait=2.0, floor=5.0)
    schedule.mark(0.0, ["t1"])
    schedule.take(0.3)
    schedule.mark(1.0, ["t2"])
    assert schedule.due() == pytest.approx(5.3)  # not 1.3: the previous batch started at 0.3
    schedule.mark(1.1)  # a task-less event
    assert schedule.take(5.3) == (True, {"t2"})


@settings(max_examples=200)
@given(st.lists(st.floats(min_value=0, max_value=0.5), min_size=1, max_size=50),
       st.floats(0, 1), st.floats(0, 3), st.floats(0, 10))
def test_due_is_never_before_the_rules_allow(gaps: list[float], debounce: float, max_wait: float, floor: float) -> None:
    schedule = RefreshSchedule(debounce=debounce, max_wait=max_wait, floor=floor, last_batch=0.0)
    now = 0.0
    first = None
    for gap in gaps:
        now += gap
        first = now if first is None else first
        schedule.mark(now, ["t"])
    due = schedule.due()
    assert due is not None
    assert due >= floor  # the floor after the previous batch
    assert due >= min(now + debounce, first + max_wait)
    assert due <= max(now + debounce, floor)


# -- files ---------------------------------------------------------------------------------------


def test_dir_target_and_identifiers() -> None:
    assert dir_target("/work", "DEMO-0007") == "/work/.taskloom/DEMO-0007/card.md"
    for bad in ("../x-1", "DEMO-0007/..", "demo-7", ""):
        with pytest.raises(ValueError):
            dir_target("/work", bad)


def test_path_problems(tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()
    (tmp_path / "file").write_text("x")
    assert path_problem(str(tmp_path / "dir")) is not None  # a directory where a file is meant
    assert path_problem(str(tmp_path / "file" / "card.md")) is not None  # a file where a directory must be
    assert path_problem(str(tmp_path / "file" / "deep" / "card.md")) is not None
    assert path_problem(str(tmp_path / "file")) is None  # an existing brief is replaced
    assert path_problem(str(tmp_path / "new" / "deep" / "card.md")) is None
    assert path_problem(str(tmp_path / "dir"), directory=True) is None
    assert path_problem(str(tmp_path / "file"), directory=True) is not None
    assert path_problem(str(tmp_path / "new"), directory=True) is None


def test_tasks_named() -> None:
    assert tasks_named({"task_id": None, "event": "project_updated", "changes": {}}) is None
    assert tasks_named({"task_id": "t1", "event": "comment_added", "changes": {"commentId": "c"}}) == {"t1"}
    relation = {"task_id": "t2", "event": "relation_added", "changes": {"source": "t1", "target": "t2"}}
    assert tasks_named(relation) == {"t1", "t2"}
    assert tasks_named({**relation, "event": "relation_removed"}) == {"t1", "t2"}


def test_tasks_signalled_names_the_card_whose_open_blockers_moved() -> None:
    for type_ in ("card_blocked", "card_unblocked"):
        assert tasks_signalled({"type": type_, "task_id": "t1", "changes": {"blockers": ["DEMO-0002"]}}) == {"t1"}
    assert tasks_signalled({"type": "claim_stale", "task_id": "t1", "changes": {}}) == set()
    assert tasks_signalled({"type": "wip_exceeded", "task_id": None, "changes": {}}) == set()
    assert tasks_signalled({"type": "card_unblocked"}) == set()


def test_write_brief_is_atomic_and_skips_identical_bytes(tmp_path: Path) -> None:
    path = str(tmp_path / "deep" / "card.md")
    assert write_brief(path, b"one") is True
    inode = os.stat(path).st_ino
    assert write_brief(path, b"one") is False and os.stat(path).st_ino == inode  # untouched
    assert write_brief(path, b"two!") is True and Path(path).read_bytes() == b"two!"
    assert os.stat(path).st_ino != inode  # a new file renamed into place, never rewritten in place
    assert sorted(os.listdir(tmp_path / "deep")) == ["card.md"]  # no temp file left behind


def test_a_concurrent_reader_sees_whole_versions_only(tmp_path: Path) -> None:
    path = str(tmp_path / "card.md")
    versions = [(f"v{n}:".encode() + b"x" * (20_000 + n * 37)) for n in range(200)]
    write_brief(path, versions[0])
    allowed = set(versions)
    seen: list[bytes] = []
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            seen.append(Path(path).read_bytes())

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for data in versions[1:]:
            write_brief(path, data)
    finally:
        stop.set()
        thread.join()
    assert seen and all(data in allowed for data in seen)


def test_message_constructors() -> None:
    assert hp.refresh_failed(ref="A-1", path="/a.md", code=hp.BOARD_UNAVAILABLE, message="down") == {
        "type": "refresh", "ref": "A-1", "path": "/a.md", "ok": False,
        "error": {"code": hp.BOARD_UNAVAILABLE, "message": "down"},
    }
    assert hp.registered(registration_id=None, refs=[], reused=True, running=True, reason=hp.REASON_COVERED) == {
        "type": "registered", "registration_id": None, "refs": [], "reused": True, "running": True, "reason": "covered",
    }
    assert hp.watch(ref="A-1", out="/a.md") == {"type": "watch", "ref": "A-1", "out": "/a.md"}
    with pytest.raises(ValueError):
        hp.error("NOPE", "undeclared")
