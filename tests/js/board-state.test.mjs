import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import test from "node:test";

import { BoardState, STATUSES, TRANSITIONS, cardSignature } from "../../services/board/static/js/board-state.js";
import { ROOT } from "./support/fakes.mjs";

function task(fields = {}) {
  return {
    id: "t1", identifier: "DEMO-0001", project_id: "demo", number: 1, title: "Write", status: "todo",
    priority: "medium", kind: "task", labels: [], assignee_kind: null, assignee_id: null, awaiting_reason: null,
    blocked_reason: null, archived_at: null, revision: 1, heartbeat_at: null, version: 1, ...fields,
  };
}

test("statuses and transitions equal shared/domain.py", () => {
  const source = readFileSync(`${ROOT}shared/domain.py`, "utf8");
  const statuses = source.match(/^STATUSES: Final = \(([^)]*)\)/m)[1].match(/"([a-z_]+)"/g).map((s) => s.slice(1, -1));
  assert.deepEqual(STATUSES, statuses);
  const block = source.match(/^TRANSITIONS: [^{]*\{([\s\S]*?)^\}/m)[1];
  const table = {};
  for (const line of block.matchAll(/"([a-z_]+)": frozenset\((\{[^}]*\})?\)/g)) {
    table[line[1]] = line[2] ? [...line[2].matchAll(/"([a-z_]+)"/g)].map((m) => m[1]).sort() : [];
  }
  const ours = Object.fromEntries(Object.entries(TRANSITIONS).map(([k, v]) => [k, [...v].sort()]));
  assert.deepEqual(ours, table);
});

test("a heartbeat-only change leaves the card signature alone", () => {
  const before = task();
  const after = task({ heartbeat_at: "2024-05-01T10:00:00.000Z", revision: 9, version: 1 });
  assert.equal(cardSignature(before), cardSignature(after));
  assert.notEqual(cardSignature(before), cardSignature(task({ title: "Other" })));
});

test("applyTask says what the card needs", () => {
  const state = new BoardState();
  state.projectId = "demo";
  assert.equal(state.applyTask("t1", task()), "added");
  assert.equal(state.applyTask("t1", task({ revision: 2, heartbeat_at: "x" })), "unchanged");
  assert.equal(state.applyTask("t1", task({ revision: 3, title: "New" })), "changed");
  assert.equal(state.applyTask("t1", task({ revision: 4, title: "New", status: "blocked" })), "moved");
  assert.equal(state.applyTask("t1", task({ revision: 2, title: "Old" })), "stale");
  assert.equal(state.tasks.get("t1").title, "New");
  assert.equal(state.applyTask("t1", task({ revision: 5, status: "done", archived_at: "now" })), "removed");
  assert.equal(state.applyTask("t2", task({ id: "t2", project_id: "other" })), "elsewhere");
  assert.equal(state.applyTask("t2", null), "elsewhere");
});

test("columns sort by priority, then by number", () => {
  const state = new BoardState();
  state.projectId = "demo";
  state.setTasks("demo", [
    task({ id: "a", number: 1, priority: "low" }),
    task({ id: "b", number: 2, priority: "urgent" }),
    task({ id: "c", number: 3, priority: "urgent" }),
    task({ id: "d", number: 4, status: "done" }),
    task({ id: "e", number: 5, archived_at: "2024-01-01T00:00:00.000Z" }),
  ]);
  assert.deepEqual(state.column("todo").map((t) => t.id), ["b", "c", "a"]);
  assert.deepEqual(state.column("done").map((t) => t.id), ["d"]);
  assert.equal(state.find("demo-0001").id, "a");
  assert.equal(state.nameOf("b"), "DEMO-0001");
  assert.equal(state.nameOf("0123456789abcdef"), "01234567");
});

test("a merged list read never takes a card back to an older revision", () => {
  const state = new BoardState();
  state.projectId = "demo";
  state.setTasks("demo", [task({ id: "a", revision: 1 }), task({ id: "b", revision: 1 })]);
  state.applyTask("a", task({ id: "a", revision: 7, status: "blocked" }));
  state.applyTask("c", task({ id: "c", revision: 8 }));
  state.setTasks("demo", [task({ id: "a", revision: 5 }), task({ id: "b", revision: 6, title: "B2" })], { replace: false });
  assert.equal(state.tasks.get("a").status, "blocked");
  assert.equal(state.tasks.get("b").title, "B2");
  assert.ok(state.tasks.has("c"), "a card created after the read began stays");
  state.setTasks("demo", [task({ id: "a", revision: 9 })]);
  assert.deepEqual([...state.tasks.keys()], ["a"]);
});
