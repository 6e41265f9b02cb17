// Live frames → the smallest refresh: debounces, newest response wins, both relation ends.
import assert from "node:assert/strict";
import test from "node:test";

import { CARD_DEBOUNCE_MS, LISTS_DEBOUNCE_MS, Refresher, plan } from "../../services/board/static/js/router.js";
import { FakeClock, activity, declaredEvents, settle } from "./support/fakes.mjs";

function harness() {
  const clock = new FakeClock();
  const reads = [];
  const applied = [];
  const tabs = [];
  const warnings = [];
  let lists = 0;
  const pending = [];
  const refresher = new Refresher({
    setTimeout: clock.setTimeout,
    clearTimeout: clock.clearTimeout,
    fetchTask: (taskId) => {
      reads.push(taskId);
      return new Promise((resolve) => pending.push({ taskId, resolve }));
    },
    applyTask: (taskId, task) => applied.push([taskId, task]),
    refreshTabs: (taskId, due) => tabs.push([taskId, [...due].sort()]),
    reloadLists: () => { lists += 1; },
    warn: (message) => warnings.push(message),
  });
  return { clock, refresher, reads, applied, tabs, warnings, pending, lists: () => lists };
}

test("every declared event plans without the unknown path", () => {
  const { events, taskless } = declaredEvents();
  for (const name of events) {
    const step = plan(activity(name, { task_id: taskless.has(name) ? null : "t1" }));
    assert.equal(step.unknown, false, name);
    assert.equal(step.lists, taskless.has(name), name);
  }
});

test("a burst on one card inside the window costs one read", async () => {
  const h = harness();
  for (let i = 0; i < 5; i += 1) {
    h.refresher.handle(activity("task_updated", { changes: { fields: ["title"] } }));
    await h.clock.advance(10);
  }
  assert.deepEqual(h.reads, []);
  await h.clock.advance(CARD_DEBOUNCE_MS);
  assert.deepEqual(h.reads, ["t1"]);
  h.pending[0].resolve({ id: "t1", revision: 5 });
  await settle();
  assert.deepEqual(h.applied, [["t1", { id: "t1", revision: 5 }]]);
});

test("the window is not extended, so a busy card is still read every 100 ms", async () => {
  const h = harness();
  for (let i = 0; i < 30; i += 1) {
    h.refresher.handle(activity("task_moved", { changes: { from: "todo", to: "blocked" } }));
    await h.clock.advance(10);
  }
  assert.equal(h.reads.length, 3);
});

test("newest response wins when reads land out of order", async () => {
  const h = harness();
  h.refresher.handle(activity("task_moved"));
  await h.clock.advance(CARD_DEBOUNCE_MS);
  h.refresher.handle(activity("task_moved"));
  await h.clock.advance(CARD_DEBOUNCE_MS);
  assert.equal(h.pending.length, 2);
  h.pending[1].resolve({ id: "t1", status: "done" });
  await settle();
  h.pending[0].resolve({ id: "t1", status: "in_progress" });
  await settle();
  assert.deepEqual(h.applied.map(([, task]) => task.status), ["done"]);
});

test("a comment refreshes the drawer's comments tab, not the card", async () => {
  const h = harness();
  h.refresher.handle(activity("comment_added", { changes: { commentId: "c1", kind: "note" } }));
  await h.clock.advance(CARD_DEBOUNCE_MS);
  assert.deepEqual(h.reads, []);
  assert.deepEqual(h.tabs, [["t1", ["activity", "comments"]]]);
});

test("a relation refreshes the drawer of both ends", async () => {
  const h = harness();
  h.refresher.handle(activity("relation_added", {
    task_id: "target", changes: { relationId: "r1", type: "blocks", source: "source", target: "target" },
  }));
  await h.clock.advance(CARD_DEBOUNCE_MS);
  assert.deepEqual(h.tabs.map(([taskId]) => taskId).sort(), ["source", "target"]);
  assert.deepEqual(h.tabs[0][1], ["activity", "relations"]);
});

test("task-less events reload the lists once, 250 ms after the last one", async () => {
  const h = harness();
  h.refresher.handle(activity("project_created", { task_id: null, changes: { project: "a" } }));
  await h.clock.advance(200);
  h.refresher.handle(activity("project_updated", { task_id: null, changes: { project: "a", fields: ["name"] } }));
  await h.clock.advance(200);
  assert.equal(h.lists(), 0);
  await h.clock.advance(LISTS_DEBOUNCE_MS - 200);
  assert.equal(h.lists(), 1);
});

test("heartbeats change nothing", async () => {
  const h = harness();
  for (let i = 0; i < 10; i += 1) h.refresher.handle(activity("task_heartbeat", { changes: { heartbeatAt: "x" } }));
  await h.clock.advance(1000);
  assert.deepEqual([h.reads, h.tabs, h.lists()], [[], [], 0]);
});

test("an unknown name warns once and takes the safe path", async () => {
  const h = harness();
  h.refresher.handle(activity("card_teleported"));
  h.refresher.handle(activity("card_teleported"));
  h.refresher.handle(activity("board_repainted", { task_id: null }));
  await h.clock.advance(LISTS_DEBOUNCE_MS);
  assert.equal(h.warnings.length, 2);
  assert.match(h.warnings[0], /card_teleported/);
  assert.deepEqual(h.reads, ["t1"]);
  assert.deepEqual(h.tabs, [["t1", ["*"]]]);
  assert.equal(h.lists(), 1);
});

test("cancel drops pending timers and reads already in flight", async () => {
  const h = harness();
  h.refresher.handle(activity("task_moved"));
  await h.clock.advance(CARD_DEBOUNCE_MS);
  h.refresher.handle(activity("task_moved", { task_id: "t2" }));
  h.refresher.cancel();
  h.pending[0].resolve({ id: "t1", status: "stale" });
  await h.clock.advance(1000);
  assert.deepEqual(h.reads, ["t1"]);
  assert.deepEqual(h.applied, []);
  h.refresher.handle(activity("task_moved"));
  await h.clock.advance(CARD_DEBOUNCE_MS);
  h.pending[1].resolve({ id: "t1", status: "fresh" });
  await settle();
  assert.deepEqual(h.applied.map(([, task]) => task.status), ["fresh"]);
});
