"""Each rule of the card-brief registry (SPEC §7.4), without sockets, files or sleeps.

The registry is the real one (``services/hub/registry.py``); ``registry_world.World`` answers its
I/O actions from an in-memory board and filesystem and keeps the clock.
"""

from __future__ import annotations

import pytest

from services.hub import registry as rg
from shared import hub_protocol as hp

from .registry_world import CADENCE, EPOCH, World


def refused(world: World, ticket: int) -> rg.Refused:
    answer = world.answer(ticket)
    assert isinstance(answer, rg.Refused), answer
    return answer


# -- registering -----------------------------------------------------------------------------------


def test_a_watch_writes_every_snapshot_before_it_answers() -> None:
    world = World()
    one, two = world.card(1), world.card(2)
    ticket = world.watch(cards=[{"ref": one.identifier, "out": "/w/a.md"}, {"ref": two.task_id, "out": "/w/b.md"}])
    answer = world.registered(ticket)
    assert answer["registration_id"] == "w_0001" and answer["refs"] == [one.identifier, two.task_id]
    assert [card["state"] for card in answer["cards"]] == ["registered", "registered"]
    assert world.files == {"/w/a.md": one.markdown(), "/w/b.md": two.markdown()}
    # The answer follows the writes, and the first records carry the revision the render started at.
    assert world.kinds(ticket) == ["registered", "refresh", "refresh"]
    assert [r["revision"] for r in world.sessions[ticket].records[1:]] == [1, 1]
    assert world.answer(ticket) == rg.Answer(ticket, watching=True)
    assert world.persisted is None  # a foreground registration is never persisted
    assert world.registry.count() == 1


def test_a_dir_watch_derives_each_path_and_checks_it() -> None:
    world = World()
    card = world.card(7)
    ticket = world.watch(refs=[card.identifier], dir="/work", detach=True)
    assert world.registered(ticket)["cards"][0]["path"] == "/work/.taskloom/DEMO-0007/card.md"
    checks = [action for action in world.actions if isinstance(action, rg.CheckPaths)]
    assert checks == [rg.CheckPaths(("/work",), directory=True), rg.CheckPaths(("/work/.taskloom/DEMO-0007/card.md",))]
    world.bad_paths.add("/other/.taskloom/DEMO-0007/card.md")
    again = world.watch(refs=[card.identifier], dir="/other", detach=True)
    assert refused(world, again).details == {"field": "paths", "problems": ["/other/.taskloom/DEMO-0007/card.md is refused"]}
    assert "/other/.taskloom/DEMO-0007/card.md" not in world.files


def test_bad_paths_are_refused_before_anything_is_rendered() -> None:
    world = World()
    card = world.card(1)
    world.bad_paths.update({"/w/a", "/w/b"})
    ticket = world.watch(cards=[{"ref": card.identifier, "out": "/w/a"}, {"ref": "DEMO-0002", "out": "/w/b"}])
    answer = refused(world, ticket)
    assert answer.code == hp.VALIDATION_FAILED and answer.details == {
        "field": "paths", "problems": ["/w/a is refused", "/w/b is refused"]}
    assert world.renders == [] and world.files == {} and world.registry.count() == 0


def test_unknown_refs_are_all_named_and_nothing_is_written() -> None:
    world = World()
    card = world.card(1)
    ticket = world.watch(cards=[{"ref": card.identifier, "out": "/w/a.md"}, {"ref": "DEMO-0404", "out": "/w/b.md"},
                                {"ref": "NOPE-0001", "out": "/w/c.md"}], detach=True)
    answer = refused(world, ticket)
    assert (answer.code, answer.details) == (hp.NOT_FOUND, {"refs": ["DEMO-0404", "NOPE-0001"]})
    assert world.files == {} and world.persisted is None


def test_a_board_that_cannot_render_refuses_the_watch() -> None:
    world = World()
    card = world.card(1)
    world.board_up = False
    answer = refused(world, world.watch(ref=card.identifier, out="/w/a.md"))
    assert answer.code == hp.BOARD_UNAVAILABLE and answer.details == {"refs": [card.identifier]}


def test_one_card_named_twice_is_refused() -> None:
    world = World()
    card = world.card(1)
    ticket = world.watch(cards=[{"ref": card.identifier, "out": "/w/a.md"}, {"ref": card.task_id, "out": "/w/b.md"}])
    answer = refused(world, ticket)
    assert answer.code == hp.VALIDATION_FAILED and answer.details == {"field": "refs", "refs": [card.identifier, card.task_id]}
    assert world.files == {}


def test_a_write_that_fails_refuses_the_watch() -> None:
    world = World()
    card = world.card(1)
    world.unwritable.add("/w/a.md")
    answer = refused(world, world.watch(ref=card.identifier, out="/w/a.md", detach=True))
    assert answer.code == hp.WRITE_FAILED and answer.details == {"path": "/w/a.md"}
    assert "Permission denied" in answer.message and world.registry.count() == 0 and world.persisted is None


# -- owner, viewer, covered ------------------------------------------------------------------------


def test_a_path_is_kept_for_one_card() -> None:
    world = World()
    one, two = world.card(1), world.card(2)
    held = world.watch(ref=one.identifier, out="/w/a.md", detach=True)
    answer = refused(world, world.watch(ref=two.identifier, out="/w/a.md", detach=True))
    assert answer.code == hp.WATCH_CONFLICT and answer.details == {"path": "/w/a.md", "registration_id": "w_0001"}
    assert world.files["/w/a.md"] == one.markdown()
    # The same card at another path is another brief.
    elsewhere = world.watch(ref=one.identifier, out="/w/b.md", detach=True)
    assert world.registered(elsewhere)["registration_id"] == "w_0002"
    assert world.registered(held)["registration_id"] == "w_0001"


def test_covered_and_foreground_holders() -> None:
    world = World()
    one, two = world.card(1), world.card(2)
    world.watch(ref=one.identifier, out="/w/one.md", detach=True)
    writes = len(world.writes)
    covered = world.registered(world.watch(ref=one.task_id, out="/w/one.md", detach=True))
    assert (covered["registration_id"], covered["reused"], covered["reason"]) == (None, True, hp.REASON_COVERED)
    assert covered["cards"][0]["registration_id"] == "w_0001" and len(world.writes) == writes  # not written again
    owner = world.watch(ref=two.identifier, out="/w/two.md")
    conflict = refused(world, world.watch(ref=two.identifier, out="/w/two.md", detach=True))
    assert conflict.code == hp.WATCH_CONFLICT and conflict.details["registration_id"] == world.registered(owner)["registration_id"]
    assert [r["registration_id"] for r in world.persisted["registrations"]] == ["w_0001"]  # detached only


def test_viewers_get_records_in_their_own_spelling_and_inherit_ownership() -> None:
    world = World()
    card = world.card(1)
    owner = world.watch(ref=card.identifier, out="/w/a.md")
    viewer = world.watch(ref=card.task_id, out="/w/a.md")
    seen = world.registered(viewer)
    assert (seen["registration_id"], seen["reused"], seen["reason"], seen["refs"]) == (
        "w_0001", True, hp.REASON_VIEWER, [card.task_id])
    world.edit(card)
    world.settle()
    assert world.sessions[owner].records[-1]["ref"] == card.identifier
    assert world.sessions[viewer].records[-1]["ref"] == card.task_id
    # The owner leaving hands the registration to the viewer…
    world.leave(owner)
    (reg,) = world.registry.registrations()
    assert reg.owner is not None and reg.owner.ticket == viewer and world.ended == []
    world.edit(card)
    world.settle()
    assert world.sessions[viewer].records[-1]["type"] == "refresh" and world.sessions[owner].after_close == []
    # …and the last session leaving ends it.
    world.leave(viewer)
    assert [(e.registration_id, e.reason) for e in world.ended] == [("w_0001", "owner_left")]
    assert world.registry.count() == 0


def test_a_viewer_whose_card_ends_is_no_viewer_any_more() -> None:
    world = World()
    one, two = world.card(1), world.card(2)
    owner = world.watch(cards=[{"ref": one.identifier, "out": "/w/a.md"}, {"ref": two.identifier, "out": "/w/b.md"}])
    viewer = world.watch(ref=two.identifier, out="/w/b.md")
    assert world.registry.views()[0]["viewers"] == 1
    world.edit(two, status="done")
    world.settle()
    assert world.kinds(viewer)[-1] == "done" and world.sessions[viewer].closed
    (listed,) = world.registry.views()
    assert (listed["owner"], listed["viewers"]) == (True, 0) and not world.sessions[owner].closed


def test_a_viewer_leaving_retires_nothing() -> None:
    world = World()
    card = world.card(1)
    owner = world.watch(ref=card.identifier, out="/w/a.md")
    viewer = world.watch(ref=card.identifier, out="/w/a.md")
    world.leave(viewer)
    assert world.registry.count() == 1 and world.ended == []
    world.edit(card)
    world.settle()
    assert world.kinds(owner)[-1] == "refresh"


def test_a_holder_that_ends_while_the_request_renders_leaves_the_card_to_the_request() -> None:
    world = World(auto_io=False)
    card = world.card(1)
    owner = world.watch(ref=card.identifier, out="/w/a.md")
    while world.io:
        world.complete()
    viewer = world.watch(ref=card.identifier, out="/w/a.md")
    world.complete()  # the paths
    world.complete()  # the render
    world.leave(owner)  # while the request is still writing
    while world.io:
        world.complete()
    answer = world.registered(viewer)
    assert answer["cards"][0]["state"] == "registered" and answer["registration_id"] == "w_0002"
    assert [(e.registration_id, e.reason) for e in world.ended] == [("w_0001", "owner_left")]


# -- terminal cards, TTL, stop ---------------------------------------------------------------------


def test_a_card_terminal_at_registration_is_written_once_and_never_kept() -> None:
    world = World()
    card = world.card(1, status="canceled")
    ticket = world.watch(ref=card.identifier, out="/w/a.md")
    answer = world.registered(ticket)
    assert (answer["registration_id"], answer["running"], answer["reason"]) == (None, False, hp.REASON_TERMINAL)
    assert world.kinds(ticket) == ["registered", "refresh", "done"] and world.sessions[ticket].closed
    assert world.files == {"/w/a.md": card.markdown()} and world.registry.count() == 0
    assert world.answer(ticket) == rg.Answer(ticket, watching=False)


def test_a_card_that_ends_is_written_once_more_then_dropped() -> None:
    world = World()
    one, two = world.card(1), world.card(2)
    ticket = world.watch(cards=[{"ref": one.identifier, "out": "/w/a.md"}, {"ref": two.identifier, "out": "/w/b.md"}],
                         detach=True, ttl_ms=0)
    world.edit(one, status="done")
    world.settle()
    assert world.files["/w/a.md"] == one.markdown()
    assert [[c["task_id"] for c in r["cards"]] for r in world.persisted["registrations"]] == [[two.task_id]]
    world.edit(two, status="canceled")
    world.settle()
    assert [(e.registration_id, e.reason) for e in world.ended] == [("w_0001", "done")]
    assert world.persisted["registrations"] == [] and world.answer(ticket) == rg.Answer(ticket)


def test_foreground_watchers_of_a_card_that_ends_get_done() -> None:
    world = World()
    card = world.card(1)
    owner = world.watch(ref=card.identifier, out="/w/a.md")
    viewer = world.watch(ref=card.task_id, out="/w/a.md")
    world.edit(card, status="done")
    world.settle()
    for ticket in (owner, viewer):
        assert world.kinds(ticket)[-2:] == ["refresh", "done"] and world.sessions[ticket].closed
        assert world.sessions[ticket].records[-2]["status"] == "done"
    assert [e.reason for e in world.ended] == ["done"]


def test_the_ttl_ends_a_registration_on_time() -> None:
    world = World()
    card = world.card(1)
    foreground = world.watch(ref=card.identifier, out="/w/fg.md", ttl_ms=300)
    detached = world.watch(ref=card.identifier, out="/w/bg.md", ttl_ms=1500, detach=True)
    assert world.persisted["registrations"][0]["expires_at"] is not None
    world.advance(0.299)
    assert world.registry.count() == 2
    world.advance(0.001)
    assert world.kinds(foreground)[-1] == "ttl" and world.sessions[foreground].records[-1] == hp.ttl(ttl_ms=300)
    assert world.sessions[foreground].closed
    world.advance(1.2)
    assert [(e.registration_id, e.reason) for e in world.ended] == [("w_0001", "ttl"), ("w_0002", "ttl")]
    assert world.persisted["registrations"] == [] and world.timer is None and detached


def test_stop_ends_a_registration_and_tells_its_sessions() -> None:
    world = World()
    card = world.card(1)
    owner = world.watch(ref=card.identifier, out="/w/a.md")
    stop = world.stop("w_0001")
    assert world.answer(stop).message == hp.watch_stopped(registration_id="w_0001", refs=[card.identifier])
    assert world.sessions[owner].records[-1] == hp.shutdown(reason=hp.SHUTDOWN_WATCH_STOPPED)
    assert world.sessions[owner].closed and [e.reason for e in world.ended] == ["stopped"]
    again = refused(world, world.stop("w_0001"))
    assert again.code == hp.NOT_FOUND and again.details == {"registration_id": "w_0001"}


# -- what is rendered when -------------------------------------------------------------------------


def test_a_burst_settles_into_one_batch_after_the_debounce() -> None:
    world = World()
    card = world.card(1)
    world.watch(ref=card.identifier, out="/w/a.md")
    renders = len(world.renders)
    world.edit(card)
    assert world.timer == pytest.approx(world.now + CADENCE.debounce)
    world.advance(0.1)
    world.edit(card)
    assert world.timer == pytest.approx(world.now + CADENCE.debounce)  # the last mark counts
    world.advance(CADENCE.debounce)
    assert len(world.renders) == renders + 1 and world.files["/w/a.md"] == card.markdown()


def test_a_trickle_cannot_starve_the_file_past_the_maximum_wait() -> None:
    world = World()
    card = world.card(1)
    world.watch(ref=card.identifier, out="/w/a.md")
    renders = len(world.renders)
    first = world.now
    while world.now - first < CADENCE.max_wait - 0.2:
        world.edit(card)
        world.advance(0.2)  # always inside the debounce
    world.edit(card)
    assert world.timer == pytest.approx(first + CADENCE.max_wait)
    world.advance(world.timer - world.now)
    assert len(world.renders) == renders + 1


def test_batches_keep_the_floor_between_them() -> None:
    world = World()
    card = world.card(1)
    world.watch(ref=card.identifier, out="/w/a.md")
    world.edit(card)
    world.advance(CADENCE.debounce)
    started = world.now
    world.edit(card)
    assert world.timer == pytest.approx(started + CADENCE.floor)  # not debounce: the floor
    renders = len(world.renders)
    world.advance(CADENCE.floor - 0.01)
    assert len(world.renders) == renders
    world.advance(0.01)
    assert len(world.renders) == renders + 1


def test_events_route_to_the_cards_they_name_and_task_less_ones_to_all() -> None:
    world = World()
    one, two = world.card(1), world.card(2)
    world.watch(cards=[{"ref": one.identifier, "out": "/w/a.md"}, {"ref": two.identifier, "out": "/w/b.md"}])
    before = len(world.renders)
    world.edit(one)
    world.settle()
    assert world.renders[before:] == [one.task_id]
    before = len(world.renders)
    world.feed(rg.BoardEvent({"task_id": None, "event": "project.updated"}))
    world.settle()
    assert world.renders[before:] == [one.task_id, two.task_id]
    before = len(world.renders)
    world.feed(rg.BoardEvent({"task_id": "someone-else", "event": "task.updated"}))
    world.feed(rg.BoardOpened())  # a reconnect re-renders everything
    world.settle()
    assert world.renders[before:] == [one.task_id, two.task_id]


def test_blocker_signals_route_to_their_card_and_other_signals_render_nothing() -> None:
    world = World()
    one, two = world.card(1), world.card(2)
    world.watch(cards=[{"ref": one.identifier, "out": "/w/a.md"}, {"ref": two.identifier, "out": "/w/b.md"}])
    for type_ in ("card_unblocked", "card_blocked"):
        before = len(world.renders)
        world.feed(rg.BoardSignal({"type": type_, "project_id": "demo", "task_id": two.task_id,
                                   "changes": {"blockers": ["DEMO-0009"]}, "at": "2030-01-01T10:00:00.000Z"}))
        world.settle()
        assert world.renders[before:] == [two.task_id], type_
    before = len(world.renders)
    for signal in ({"type": "claim_stale", "task_id": one.task_id}, {"type": "wip_exceeded", "task_id": None},
                   {"type": "card_unblocked", "task_id": "someone-else"}):
        world.feed(rg.BoardSignal({"project_id": "demo", "changes": {}, "at": "2030-01-01T10:00:00.000Z", **signal}))
    world.settle()
    assert world.renders[before:] == []


def test_renders_and_writes_are_serial_across_registrations() -> None:
    world = World(auto_io=False)
    one, two = world.card(1), world.card(2)
    for card, path in ((one, "/w/a.md"), (two, "/w/b.md")):
        world.watch(ref=card.identifier, out=path, detach=True)
        while world.io:
            world.complete()
    world.feed(rg.BoardOpened())
    world.advance(CADENCE.debounce)
    late = world.watch(ref=one.identifier, out="/w/c.md", detach=True)
    while world.io:
        outstanding = [a for a in world.io if isinstance(a, rg.Render | rg.Write)]
        assert len(outstanding) <= 1, world.io  # one render or write at a time, whoever asks
        world.complete()
    assert world.registered(late)["registration_id"] == "w_0003"
    assert world.files == {"/w/a.md": one.markdown(), "/w/b.md": two.markdown(), "/w/c.md": one.markdown()}


def test_an_event_during_registration_marks_the_new_registration() -> None:
    world = World(auto_io=False)
    card = world.card(1)
    world.watch(ref=card.identifier, out="/w/a.md")
    world.complete()  # paths
    world.complete()  # render
    world.edit(card)  # routed before the registration exists
    while world.io:
        world.complete()
    assert world.files["/w/a.md"] != card.markdown() and world.timer is not None
    world.auto_io = True
    world.settle()
    assert world.files["/w/a.md"] == card.markdown()


def test_a_failed_refresh_keeps_the_file_reports_and_waits_for_the_next_event() -> None:
    world = World()
    card = world.card(1)
    ticket = world.watch(ref=card.identifier, out="/w/a.md")
    old = world.files["/w/a.md"]
    world.board_up = False
    world.edit(card)
    world.settle()
    failed = world.sessions[ticket].records[-1]
    assert failed["ok"] is False and failed["error"]["code"] == hp.BOARD_UNAVAILABLE
    assert world.files["/w/a.md"] == old and world.timer is None  # no retry on a timer
    assert world.registry.views()[0]["cards"][0]["error"]["code"] == hp.BOARD_UNAVAILABLE
    world.board_up = True
    world.feed(rg.BoardOpened())
    world.settle()
    assert world.files["/w/a.md"] == card.markdown() and world.registry.views()[0]["cards"][0]["error"] is None


# -- rehydration and stopping ----------------------------------------------------------------------


def _entry(registration_id: str, *cards: tuple[str, str, str], ttl_ms: int = 0, created: float = EPOCH) -> dict:
    from services.hub.registry import _iso

    return {
        "registration_id": registration_id, "created_at": _iso(created), "ttl_ms": ttl_ms,
        "expires_at": _iso(created + ttl_ms / 1000) if ttl_ms else None,
        "cards": [{"ref": ident, "task_id": task_id, "identifier": ident, "path": path} for task_id, ident, path in cards],
    }


def test_requests_wait_for_rehydration() -> None:
    world = World(restore=False)
    card = world.card(1)
    ticket = world.watch(ref=card.identifier, out="/w/a.md", detach=True)
    assert world.actions == [] and ticket not in world.answers
    world.feed(rg.Restore(None))
    assert isinstance(world.actions[0], rg.Restored) and world.registered(ticket)["registration_id"] == "w_0001"


def test_rehydration_keeps_live_cards_writes_terminal_ones_once_and_drops_the_gone() -> None:
    world = World(restore=False)
    live, ending = world.card(1), world.card(2, status="canceled")
    record = {"version": hp.REGISTRATIONS_VERSION, "board": "http://board.test", "registrations": [
        _entry("w_kept", (live.task_id, live.identifier, "/w/live.md"), (ending.task_id, ending.identifier, "/w/end.md"),
               ("00000000-0000-4000-8000-000000000999", "DEMO-0999", "/w/gone.md")),
        {"registration_id": "w_broken", "cards": "not a list"},
        _entry("w_expired", (live.task_id, live.identifier, "/w/old.md"), ttl_ms=1000, created=EPOCH - 10),
        _entry("w_relative", (live.task_id, live.identifier, "relative.md")),
    ]}
    world.feed(rg.Restore(record))
    (reg,) = world.registry.registrations()
    assert reg.id == "w_kept" and [c.task_id for c in reg.cards.values()] == [live.task_id]
    assert world.files == {"/w/live.md": live.markdown(), "/w/end.md": ending.markdown()}
    assert [[c["path"] for c in r["cards"]] for r in world.persisted["registrations"]] == [["/w/live.md"]]
    assert world.registry.restored


def test_rehydration_with_the_board_down_keeps_the_cards_for_later() -> None:
    world = World(restore=False)
    card = world.card(1)
    world.board_up = False
    world.feed(rg.Restore({"version": hp.REGISTRATIONS_VERSION, "registrations": [
        _entry("w_later", (card.task_id, card.identifier, "/w/a.md"))]}))
    assert world.registry.count() == 1 and world.files == {}
    world.board_up = True
    world.settle()  # the deferred card was marked
    assert world.files == {"/w/a.md": card.markdown()}


def test_a_change_during_rehydration_writes_no_snapshot_that_leaves_out_what_is_not_restored_yet() -> None:
    """A registration that ends while a later one is still being restored: a snapshot then would
    hold only what is restored so far, and a hub stopped before rehydration ends would have erased
    the rest from disk. The file is left as it is until one snapshot with everything is written."""
    world = World(restore=False, auto_io=False)
    first, second = world.card(1), world.card(2)
    world.feed(rg.Restore({"version": hp.REGISTRATIONS_VERSION, "board": "http://board.test", "registrations": [
        _entry("w_first", (first.task_id, first.identifier, "/w/first.md"), ttl_ms=60_000, created=EPOCH - 59),
        _entry("w_second", (second.task_id, second.identifier, "/w/second.md")),
    ]}))
    while not (isinstance(world.io[0], rg.Render) and world.io[0].ref == second.task_id):
        world.complete()  # the first registration is back; the second one's render is under way
    world.advance(2.0)  # the first one's TTL ends meanwhile
    assert [ended.registration_id for ended in world.ended] == ["w_first"]
    assert world.persisted is None, f"a snapshot without the registration being restored: {world.persisted}"
    while world.io:
        world.complete()
    assert world.registry.restored
    assert [r["registration_id"] for r in world.persisted["registrations"]] == ["w_second"]


def test_a_file_of_another_version_is_ignored() -> None:
    world = World(restore=False)
    world.feed(rg.Restore({"version": 1, "registrations": []}))
    assert world.registry.restored and world.persisted is None
    assert any(isinstance(a, rg.Note) and a.event == "registrations_file_ignored" for a in world.actions)


def test_stopping_refuses_waiting_requests_and_persists_nothing_more() -> None:
    world = World(auto_io=False)
    card = world.card(1)
    world.watch(ref=card.identifier, out="/w/a.md", detach=True)
    while world.io:
        world.complete()
    persists = world.persists
    first = world.watch(ref=card.identifier, out="/w/b.md", detach=True)
    second = world.watch(ref=card.identifier, out="/w/c.md", detach=True)
    world.feed(rg.Shutdown())
    assert refused(world, first).code == refused(world, second).code == hp.NOT_AVAILABLE
    world.stop("w_0001")
    assert world.persists == persists and world.timer is None
