// The human feed: allow-list admission, truthful before → after, burst folding, merge by id, unread.
import assert from "node:assert/strict";
import test from "node:test";

import {
  FeedLedger, admit, family, fieldChanges, fold, unreadCount, wording,
} from "../../services/board/static/js/feed.js";
import { sentence } from "../../services/board/static/js/words.js";
import { activity, declaredEvents } from "./support/fakes.mjs";

const at = (minutes) => new Date(Date.UTC(2024, 4, 1, 10, 0, 0) + minutes * 60000).toISOString();
const edit = (fields, before, after, extra = {}) =>
  activity("task_updated", { changes: { fields, before, after }, ...extra });

test("admission is an allow-list", () => {
  assert.equal(admit(activity("task_moved", { changes: { from: "todo", to: "blocked" } })), true);
  assert.equal(admit(activity("comment_added")), true);
  for (const name of ["task_heartbeat", "session_registered", "session_closed", "label_gc", "acceptance_changed",
    "acceptance_pruned", "acceptance_override", "task_resumed", "attachment_updated", "progress"]) {
    assert.equal(admit(activity(name)), false, name);
  }
  assert.equal(admit(activity("card_teleported")), false, "an unknown name stays out");
});

test("task_updated is admitted only for human-visible fields", () => {
  assert.equal(admit(edit(["meta"], {}, {})), false);
  assert.equal(admit(edit(["title"], { title: "A" }, { title: "B" })), true);
  assert.equal(admit(edit(["meta", "priority"], {}, {})), true);
  assert.equal(admit(edit(["assigneeId"], {}, {})), true, "camelCase field names count too");
});

// One realistic `changes` per event, as the constructors in shared/events.py shape them.
const SAMPLES = {
  project_created: { project: "demo" },
  project_updated: { project: "demo", fields: ["name"] },
  task_created: { identifier: "DEMO-0001", status: "todo", priority: "medium", acceptance_mode: "review" },
  task_updated: { fields: ["title"], before: { title: "A" }, after: { title: "B" } },
  task_claimed: { from: "todo", to: "in_progress" },
  task_heartbeat: { heartbeatAt: "2024-05-01T10:00:00.000Z" },
  task_moved: { from: "in_progress", to: "blocked", deliveryRound: 1, blockedReason: "CI is red" },
  task_reopened: { from: "done", to: "todo", reason: "found a regression", deliveryRound: 2 },
  task_resumed: { commentId: "c1", from: "awaiting", to: "todo" },
  task_archived: { from: "done", archivedAt: "2024-05-01T10:00:00.000Z" },
  report_written: { round: 1, reportId: "r1", deliveryRound: 1 },
  task_delivered: { from: "in_progress", to: "in_review", round: 1, reportId: "r1" },
  report_waived: { from: "in_progress", to: "in_review", round: 1, reason: "docs only change", deliveryRound: 1 },
  acceptance_changed: { added: [{ id: "a1", text: "works" }], revision: 1 },
  acceptance_pruned: { reason: "out of scope now", removed: [{ id: "a1", text: "works" }] },
  acceptance_override: { from: "review", to: "none", reason: "trivial" },
  epic_auto_start: { from: "todo", to: "in_progress", child: "t2", source: "claim" },
  comment_added: { commentId: "c1", kind: "question" },
  relation_added: { relationId: "r1", type: "blocks", source: "t1", target: "t2" },
  relation_removed: { relationId: "r1", type: "review_of", source: "t1", target: "t2" },
  label_gc: { archived: ["old"], kept: 2, mismatched: 0, reason: "ttl", ttlDays: 30 },
  session_registered: { sessionId: "ses_1", seg: 1, ownerKind: "claude", phase: "working" },
  session_closed: { sessionId: "ses_1", status: "completed" },
  progress: { line: "half way", seq: 3 },
  attachment_added: { attachmentId: "f1", filename: "log.txt", content_type: "text/plain", size: 3 },
  attachment_updated: { attachmentId: "f1", filename: "log.txt", content_type: "text/plain", size: 4 },
  attachment_removed: { attachmentId: "f1", filename: "log.txt", content_type: "text/plain", size: 4 },
  import_completed: { cards: 3, tasks: 3 },
  wip_exceeded: { status: "in_progress", count: 4, limit: 3 },
  wip_cleared: { status: "in_progress", count: 3, limit: 3 },
  lane_drained: { status: "todo", count: 0 },
  lane_refilled: { status: "todo", count: 1 },
  card_blocked: { blockers: ["DEMO-0001"] },
  card_unblocked: { blockers: ["DEMO-0001"] },
  transition_rejected: { from: "todo", to: "in_progress", code: "DEPENDENCY_OPEN" },
  status_timeout: { status: "in_review", since: "2030-01-01T10:00:00.000Z", max: 2 },
  card_idle: { since: "2030-01-01T10:00:00.000Z", threshold: 60 },
  claim_stale: { claimed_by: "w1", heartbeat_at: "2030-01-01T10:00:00.000Z", threshold: 600 },
};

test("every declared event reads as a sentence in the drawer, unknown ones too", () => {
  const names = { t1: "DEMO-0001", t2: "DEMO-0002" };
  for (const name of declaredEvents().events) {
    assert.ok(SAMPLES[name], `no sample for ${name}`);
    const text = sentence(activity(name, { changes: SAMPLES[name] }), (id) => names[id] || id);
    assert.ok(text && !/undefined|null|\[object/.test(text), `${name}: ${text}`);
    assert.notEqual(text, `wrote ${name}`, `${name} falls back to the generic sentence`);
  }
  assert.equal(sentence(activity("relation_added", { changes: SAMPLES.relation_added }), (id) => names[id]),
    "linked DEMO-0001 blocks DEMO-0002");
  assert.equal(sentence(activity("task_moved", { changes: SAMPLES.task_moved })), "moved it in progress → blocked: CI is red");
  assert.equal(sentence(activity("card_teleported")), "wrote card_teleported");
});

test("before → after is truthful, and long text is only named", () => {
  const lines = fieldChanges([
    edit(["title", "priority", "description"], { title: "Old", priority: "low" }, { title: "New", priority: "high" }),
  ]);
  assert.deepEqual(lines, ["title “Old” → “New”", "priority low → high", "description edited"]);
  const people = fieldChanges([edit(["assignee_kind", "assignee_id"], { assignee_kind: null, assignee_id: null },
    { assignee_kind: "claude", assignee_id: "w1" })]);
  assert.deepEqual(people, ["assignee nobody → w1 (claude)"]);
  const labels = fieldChanges([edit(["labels"], { labels: ["a", "b"] }, { labels: ["b", "c"] })]);
  assert.deepEqual(labels, ["labels +c −a"]);
  assert.equal(sentence(edit(["title", "meta"], { title: "A" }, { title: "B" })), "edited title “A” → “B”; 1 other field");
});

test("a burst of edits folds into one row from the first before to the last after", () => {
  const rows = [
    edit(["title"], { title: "A" }, { title: "B" }, { created_at: at(0) }),
    edit(["title"], { title: "B" }, { title: "C" }, { created_at: at(1) }),
    edit(["description"], {}, {}, { created_at: at(2) }),
  ];
  const entries = fold(rows);
  assert.equal(entries.length, 1);
  assert.equal(entries[0].rows.length, 3);
  assert.equal(wording(entries[0].rows).detail, "title “A” → “C”; description edited");
});

test("folding needs the same actor, task and family, inside five minutes of the first row", () => {
  const moved = (extra) => activity("task_moved", { changes: { from: "todo", to: "in_progress" }, ...extra });
  const rows = [
    moved({ created_at: at(0) }),
    moved({ created_at: at(4), changes: { from: "in_progress", to: "blocked" } }),
    moved({ created_at: at(6) }), // past the window: a new row
    moved({ created_at: at(1), actor_id: "bob" }),
    moved({ created_at: at(1), task_id: "t2" }),
    activity("comment_added", { created_at: at(1) }),
    edit(["priority"], { priority: "low" }, { priority: "high" }, { created_at: at(1) }),
    edit(["labels"], { labels: [] }, { labels: ["x"] }, { created_at: at(1) }),
  ];
  const entries = fold(rows);
  assert.equal(entries.length, 7);
  const burst = entries.find((entry) => entry.rows.length === 2);
  assert.deepEqual(burst.rows.map((row) => row.id), [rows[0].id, rows[1].id]);
  assert.equal(wording(burst.rows).detail, "todo → in progress → blocked");
  assert.notEqual(family(rows[6]), family(rows[7]));
});

test("interleaved rows of others do not break a burst; entries come newest first", () => {
  const a1 = activity("comment_added", { created_at: at(0) });
  const b = activity("comment_added", { created_at: at(1), actor_id: "bob" });
  const a2 = activity("comment_added", { created_at: at(2), changes: { kind: "question" } });
  const entries = fold([a2, b, a1]);
  assert.deepEqual(entries.map((entry) => entry.rows.length), [2, 1]);
  assert.equal(entries[0].revision, a2.revision);
  assert.deepEqual(wording(entries[0].rows), { verb: "added 2 comments to", detail: "note, question" });
});

test("the ledger merges backfill and live rows by id and scopes by project", () => {
  const ledger = new FeedLedger();
  const first = activity("task_created", { changes: { identifier: "DEMO-0001", status: "todo" } });
  const other = activity("task_created", { project_id: "other", task_id: "t9" });
  ledger.reset([first, other, activity("task_heartbeat")]);
  assert.equal(ledger.add(first), false, "a replayed row is merged away");
  assert.equal(ledger.add(activity("session_closed")), false);
  assert.equal(ledger.add(activity("task_moved", { created_at: at(30), changes: { from: "todo", to: "blocked" } })), true);
  assert.equal(ledger.entries("demo").length, 2);
  assert.equal(ledger.entries(null).length, 3);
});

test("unread counts entries past seenAt that someone else wrote", () => {
  const entries = fold([
    activity("comment_added", { revision: 5, actor_id: "bob" }),
    activity("comment_added", { revision: 7, actor_id: "me", task_id: "t2" }),
    activity("task_moved", { revision: 9, actor_id: "bob", task_id: "t3" }),
  ]);
  assert.equal(unreadCount(entries, 0, { kind: "human", id: "me" }), 2);
  assert.equal(unreadCount(entries, 5, { kind: "human", id: "me" }), 1);
  assert.equal(unreadCount(entries, 9, { kind: "human", id: "me" }), 0);
});
