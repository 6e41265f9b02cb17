// The page's view of the board's conditions: counts against WIP limits, the warning while
// wip_exceeded holds, dependency and stale-claim markers, /breaches replacing what the page held,
// and the live stream handing `signal` frames over without moving its cursor.
import assert from "node:assert/strict";
import test from "node:test";

import * as conditions from "../../services/board/static/js/conditions.js";
import { ConditionState, columnHeader, signalOfRow, wipLimits } from "../../services/board/static/js/conditions.js";
import { LiveStream } from "../../services/board/static/js/live.js";
import { FakeClock, activity, declaredEvents, fakeEventSourceClass, fakeFetch, jsonReply, settle } from "./support/fakes.mjs";

const PROJECT = { id: "demo", settings: { wip_limits: { in_progress: 2, in_review: 0 } } };

function signal(type, changes, task_id = null, project_id = "demo") {
  return { type, project_id, task_id, changes, at: "2026-05-04T09:14:10.402Z" };
}

function task(fields = {}) {
  return { id: "t1", identifier: "DEMO-0001", project_id: "demo", status: "todo", blocked_by: [], claimed_by: null, heartbeat_at: null, ...fields };
}

function shown() {
  const state = new ConditionState();
  state.setProject(PROJECT);
  return state;
}

test("every condition name the page acts on is a declared event (shared/events.py)", () => {
  const { events } = declaredEvents();
  const names = Object.entries(conditions).filter(([key, value]) => /^[A-Z_]+$/.test(key) && typeof value === "string");
  assert.equal(names.length, 5);
  for (const [key, value] of names) assert.ok(events.includes(value), `${key} = ${value} is not declared`);
});

test("limits come from settings.wip_limits; unusable entries are left out", () => {
  assert.deepEqual([...wipLimits(PROJECT)], [["in_progress", 2], ["in_review", 0]]);
  assert.deepEqual([...wipLimits({ id: "x", settings: { wip_limits: { todo: -1, done: 1.5, blocked: "3" } } })], []);
  assert.deepEqual([...wipLimits({ id: "x", settings: {} })], []);
  assert.deepEqual([...wipLimits(null)], []);
});

test("a header shows count / limit where a limit is set, the count alone where none is", () => {
  assert.deepEqual(columnHeader(3, undefined, false), { text: "3", label: "3 cards", warning: false });
  assert.deepEqual(columnHeader(2, 2, false), { text: "2 / 2", label: "2 cards, limit 2", warning: false });
  assert.deepEqual(columnHeader(3, 2, true), { text: "3 / 2", label: "3 cards, over the limit of 2", warning: true });
  const state = shown();
  assert.equal(state.header("todo", 5).text, "5");
  assert.equal(state.header("in_progress", 1).text, "1 / 2");
});

test("the warning holds from wip_exceeded to wip_cleared, for that column only", () => {
  const state = shown();
  const changed = state.applySignal(signal("wip_exceeded", { status: "in_progress", count: 3, limit: 2 }));
  assert.deepEqual([...changed.columns], ["in_progress"]);
  assert.equal(state.header("in_progress", 3).warning, true);
  assert.equal(state.header("in_review", 0).warning, false);
  // A count the page computes itself does not clear it: the board says when the condition ends.
  assert.equal(state.header("in_progress", 2).warning, true);
  assert.deepEqual([...state.applySignal(signal("wip_cleared", { status: "in_progress", count: 2, limit: 2 })).columns], ["in_progress"]);
  assert.equal(state.header("in_progress", 2).warning, false);
  // Clearing what does not hold changes nothing.
  assert.equal(state.applySignal(signal("wip_cleared", { status: "in_progress", count: 1, limit: 2 })).columns.size, 0);
});

test("signals of another project, and conditions the page does not show, change nothing", () => {
  const state = shown();
  for (const other of [
    signal("wip_exceeded", { status: "in_progress", count: 3, limit: 2 }, null, "elsewhere"),
    signal("lane_drained", { status: "todo", count: 0 }),
    signal("status_timeout", { status: "in_review", since: "x", max: 1 }, "t1"),
    signal("card_idle", { since: "x", threshold: 1 }, "t1"),
    signal("transition_rejected", { from: "todo", to: "done", code: "INVALID_TRANSITION" }, "t1"),
    null,
  ]) {
    const changed = state.applySignal(other);
    assert.equal(changed.columns.size + changed.tasks.size, 0, JSON.stringify(other));
  }
  assert.deepEqual(state.markers(task()), []);
});

test("a card's own blocked_by marks it; card_unblocked lifts the mark before the card is read again", () => {
  const state = shown();
  const blocked = task({ blocked_by: ["DEMO-0002"] });
  assert.deepEqual(state.markers(blocked), [{ kind: "dependency", label: "Waiting on DEMO-0002" }]);
  assert.deepEqual([...state.applySignal(signal("card_unblocked", { blockers: [] }, "t1")).tasks], ["t1"]);
  assert.deepEqual(state.markers(blocked), []);
  // The next read is the truth again, whatever the signals said.
  state.taskRead(task({ blocked_by: ["DEMO-0003"] }));
  assert.deepEqual(state.markers(task({ blocked_by: ["DEMO-0003"] })), [{ kind: "dependency", label: "Waiting on DEMO-0003" }]);
});

test("card_blocked marks a card whose read still says unblocked (the row hangs off the blocker)", () => {
  const state = shown();
  state.applySignal(signal("card_blocked", { blockers: ["DEMO-0009"] }, "t1"));
  assert.deepEqual(state.markers(task()), [{ kind: "dependency", label: "Waiting on DEMO-0009" }]);
  state.taskRead(task());
  assert.deepEqual(state.markers(task()), []);
});

test("a stale claim is marked while its card stays in progress with the same worker and no new beat", () => {
  const state = shown();
  const working = task({ status: "in_progress", claimed_by: "worker-1", heartbeat_at: "2026-05-04T09:00:00.000Z" });
  state.applySignal(signal("claim_stale", { claimed_by: "worker-1", heartbeat_at: working.heartbeat_at, threshold: 600 }, "t1"));
  assert.deepEqual(state.markers(working), [{ kind: "stale", label: "No heartbeat from worker-1" }]);
  state.taskRead({ ...working, title: "renamed" }); // touched, still silent: still stale
  assert.equal(state.markers(working).length, 1);
  state.taskRead({ ...working, heartbeat_at: "2026-05-04T09:30:00.000Z" });
  assert.deepEqual(state.markers(working), []);

  state.applySignal(signal("claim_stale", { claimed_by: "worker-1", heartbeat_at: working.heartbeat_at, threshold: 600 }, "t1"));
  state.taskRead({ ...working, status: "todo", claimed_by: null });
  assert.deepEqual(state.markers(working), []);
});

test("both markers at once, dependency first", () => {
  const state = shown();
  const card = task({ status: "in_progress", blocked_by: ["DEMO-0002"], claimed_by: "w" });
  state.applySignal(signal("claim_stale", { claimed_by: "w", heartbeat_at: "x", threshold: 1 }, "t1"));
  assert.deepEqual(state.markers(card).map((m) => m.kind), ["dependency", "stale"]);
});

test("/breaches replaces what the page held: a condition that ended while away is gone", () => {
  const state = shown();
  state.applySignal(signal("wip_exceeded", { status: "in_progress", count: 3, limit: 2 }));
  state.applySignal(signal("claim_stale", { claimed_by: "w", heartbeat_at: "x", threshold: 1 }, "t1"));
  state.beginCatchUp();
  const changed = state.loadBreaches([
    { type: "wip_exceeded", project_id: "demo", task_id: null, changes: { status: "in_review", count: 1, limit: 0 }, since: "x" },
    { type: "card_blocked", project_id: "demo", task_id: "t2", changes: { blockers: ["DEMO-0001"] }, since: "x" },
    { type: "wip_exceeded", project_id: "elsewhere", task_id: null, changes: { status: "todo", count: 9, limit: 1 }, since: "x" },
  ]);
  assert.deepEqual([...changed.columns].sort(), ["in_progress", "in_review"]);
  assert.deepEqual([...changed.tasks].sort(), ["t1", "t2"]);
  assert.equal(state.header("in_progress", 3).warning, false);
  assert.equal(state.header("in_review", 1).warning, true);
  assert.equal(state.header("todo", 9).warning, false);
  assert.deepEqual(state.markers(task({ id: "t2" })), [{ kind: "dependency", label: "Waiting on DEMO-0001" }]);
  assert.deepEqual(state.markers(task({ status: "in_progress", claimed_by: "w" })), []);
});

test("a signal that lands while /breaches is read is applied over its answer", () => {
  const state = shown();
  state.beginCatchUp();
  state.applySignal(signal("wip_cleared", { status: "in_progress", count: 2, limit: 2 }));
  // The answer was computed before the clear reached the page.
  state.loadBreaches([{ type: "wip_exceeded", project_id: "demo", task_id: null, changes: { status: "in_progress", count: 3, limit: 2 }, since: "x" }]);
  assert.equal(state.header("in_progress", 2).warning, false);
  assert.equal(state.catchingUp, null);
});

test("a persisted condition row is read as its signal; other rows are not conditions", () => {
  const row = activity("wip_exceeded", { task_id: null, actor_kind: "system", actor_id: "system", changes: { status: "in_progress", count: 3, limit: 2 } });
  assert.deepEqual(signalOfRow(row), { type: "wip_exceeded", project_id: "demo", task_id: null, changes: row.changes, at: row.created_at });
  const state = shown();
  state.applySignal(signalOfRow(row));
  assert.equal(state.header("in_progress", 3).warning, true);
  assert.equal(signalOfRow(activity("task_moved")), null);
  assert.equal(signalOfRow(activity("lane_drained")), null); // not shown on the page
});

test("switching project drops the other project's conditions", () => {
  const state = shown();
  state.applySignal(signal("wip_exceeded", { status: "in_progress", count: 3, limit: 2 }));
  state.setProject({ id: "other", settings: {} });
  assert.equal(state.header("in_progress", 3).text, "3");
  assert.equal(state.exceeded.size, 0);
  state.setProject({ id: "other", settings: { wip_limits: { todo: 1 } } }); // same project, new settings
  assert.equal(state.header("todo", 1).text, "1 / 1");
});

test("the stream hands signal frames to onSignal, never moves its cursor on one, and calls onOpen per socket", async () => {
  const clock = new FakeClock();
  const EventSource = fakeEventSourceClass();
  const signals = [];
  const frames = [];
  let opens = 0;
  const meta = { board_id: "brd_1", revision: 10, floor: 0 };
  const fetch = fakeFetch({ "/api/v1/meta": () => jsonReply(200, meta) });
  const live = new LiveStream({
    EventSource, fetch, setTimeout: clock.setTimeout, clearTimeout: clock.clearTimeout,
    onFrame: (frame) => frames.push(frame), onSignal: (data) => signals.push(data), onOpen: () => { opens += 1; },
  });
  await live.start();
  const socket = EventSource.sockets[0];
  socket.open();
  assert.equal(opens, 1);
  const unblocked = signal("card_unblocked", { blockers: [] }, "t1");
  socket.named("signal", unblocked);
  assert.deepEqual(signals, [unblocked]);
  assert.equal(live.cursor, 10);
  assert.deepEqual(frames, []);
  meta.revision = 11;
  socket.message(activity("task_moved", { revision: 11 }));
  assert.equal(live.cursor, 11);
  // A broken socket's late signal is not delivered; the new socket's open calls onOpen again.
  socket.fail();
  socket.named("signal", unblocked);
  assert.equal(signals.length, 1);
  await clock.advance(1000);
  await settle();
  EventSource.sockets[1].open();
  assert.equal(opens, 2);
  assert.match(EventSource.sockets[1].url, /after=11$/);
});
