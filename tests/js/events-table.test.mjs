// Every declared event name is an explicit decision of the page, in both tables.
import assert from "node:assert/strict";
import test from "node:test";

import { FEED, HUMAN_FIELDS, ROUTING } from "../../services/board/static/js/events-table.js";
import { declaredEvents } from "./support/fakes.mjs";

const { events, taskless, noise, historical } = declaredEvents();

test("the vocabulary read from shared/events.py has all 38 names", () => {
  assert.equal(events.length, 38);
  assert.equal(new Set(events).size, 38);
});

for (const [label, table] of [["ROUTING", ROUTING], ["FEED", FEED]]) {
  test(`${label} names exactly the declared events`, () => {
    assert.deepEqual(Object.keys(table).sort(), [...events].sort());
  });
}

test("task-less events reload the lists and touch no card", () => {
  for (const name of events) {
    const decision = ROUTING[name];
    if (taskless.has(name)) {
      assert.deepEqual(decision, { lists: true }, name);
    } else {
      assert.ok(!decision.lists, `${name} is task-scoped and must not reload every list`);
    }
  }
});

test("wire noise is routed as noise and every task event refreshes the activity tab", () => {
  for (const name of events) {
    const decision = ROUTING[name];
    if (noise.has(name)) assert.deepEqual(decision, { noise: true }, name);
    else if (!taskless.has(name)) assert.ok(decision.tabs.includes("activity"), name);
  }
});

test("relations refresh both ends; sub-resource events refresh their own tab", () => {
  assert.equal(ROUTING.relation_added.ends, true);
  assert.equal(ROUTING.relation_removed.ends, true);
  assert.ok(ROUTING.comment_added.tabs.includes("comments"));
  assert.ok(ROUTING.report_written.tabs.includes("reports"));
  assert.ok(ROUTING.session_closed.tabs.includes("sessions"));
  assert.ok(ROUTING.attachment_updated.tabs.includes("attachments"));
  assert.equal(ROUTING.task_moved.card, true);
});

test("the feed is an allow-list with a reason for every refusal", () => {
  for (const name of events) {
    const decision = FEED[name];
    assert.ok([true, false, "fields"].includes(decision.admit), name);
    if (decision.admit === false) assert.ok(decision.why && decision.why.length > 5, `${name} needs a why`);
    if (decision.admit === true) assert.ok(decision.family, `${name} needs a folding family`);
  }
});

test("the feed never admits heartbeats, sessions, label GC, acceptance or historical rows", () => {
  const never = [...noise, ...historical, "session_registered", "session_closed", "label_gc",
    "acceptance_changed", "acceptance_pruned", "acceptance_override", ...taskless];
  for (const name of never) assert.equal(FEED[name].admit, false, name);
  assert.equal(FEED.task_updated.admit, "fields");
});

test("human-visible fields are real task fields", () => {
  const taskFields = ["title", "description", "priority", "kind", "labels", "assignee_kind", "assignee_id",
    "reporter_kind", "reporter_id"];
  assert.deepEqual(Object.keys(HUMAN_FIELDS).sort(), taskFields.sort());
  assert.ok(!("meta" in HUMAN_FIELDS));
});

test("every tab the routing names is a drawer tab (or the details tab's acceptance list)", async () => {
  const { TABS } = await import("../../services/board/static/js/drawer.js");
  for (const [name, decision] of Object.entries(ROUTING)) {
    for (const tab of decision.tabs || []) assert.ok(TABS.includes(tab) || tab === "acceptance", `${name}: ${tab}`);
  }
});
