import assert from "node:assert/strict";
import test from "node:test";

import { childrenOf, epicProgress, progressLabel } from "../../services/board/static/js/epics.js";

const tasks = new Map([
  ["a", { status: "done" }],
  ["b", { status: "in_progress" }],
  ["c", { status: "canceled" }],
  ["d", { status: "done" }],
]);

test("done over the children that can still be done", () => {
  assert.deepEqual(epicProgress(["a", "b", "c", "d", "unknown"], tasks), { done: 2, total: 3, canceled: 1 });
  assert.deepEqual(progressLabel({ done: 2, total: 3 }), { text: "2/3 done", percent: 67 });
  assert.deepEqual(progressLabel({ done: 0, total: 0 }), { text: "0/0 done", percent: 0 });
  assert.deepEqual(epicProgress(undefined, tasks), { done: 0, total: 0, canceled: 0 });
});

test("children are the targets of the epic's own parent relations", () => {
  const relations = [
    { type: "parent", source_id: "e", target_id: "a" },
    { type: "parent", source_id: "x", target_id: "e" }, // e's own parent, not a child
    { type: "blocks", source_id: "e", target_id: "b" },
    { type: "parent", source_id: "e", target_id: "d" },
  ];
  assert.deepEqual(childrenOf("e", relations), ["a", "d"]);
});
