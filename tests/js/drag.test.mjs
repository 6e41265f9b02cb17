import assert from "node:assert/strict";
import test from "node:test";

import { STATUSES, TRANSITIONS } from "../../services/board/static/js/board-state.js";
import {
  DIALOG_INTENTS, claimable, dropIntent, keyboardTarget, refusalText, releasable, releaseRequest, requestsFor,
} from "../../services/board/static/js/drag.js";

function task(fields = {}) {
  return { id: "t-1", identifier: "DEMO-0001", status: "todo", kind: "task", version: 4, claimed_by: null, claimed_by_kind: null, archived_at: null, ...fields };
}

test("todo → in progress is a claim, never a move", () => {
  const intent = dropIntent(task(), "in_progress");
  assert.equal(intent.action, "claim");
  assert.deepEqual(requestsFor(intent, task()), [{ method: "POST", path: "/tasks/t-1/claim", body: { if_version: 4 } }]);
});

test("into review opens the deliver dialog: a report delivers, a reason waives", () => {
  for (const from of ["in_progress", "blocked"]) {
    const card = task({ status: from });
    const intent = dropIntent(card, "in_review");
    assert.equal(intent.action, "deliver");
    assert.ok(DIALOG_INTENTS.has("deliver"));
    assert.deepEqual(requestsFor(intent, card, { report: "## Summary\nDone" }), [
      { method: "POST", path: "/tasks/t-1/deliver", body: { body: "## Summary\nDone", if_version: 4 } },
    ]);
    assert.deepEqual(requestsFor(intent, card, { report: "  ", waiver: "tiny doc fix" }), [
      { method: "POST", path: "/tasks/t-1/waive", body: { reason: "tiny doc fix", if_version: 4 } },
    ]);
    assert.throws(() => requestsFor(intent, card, {}), /report or a waiver/);
  }
});

test("in review → done asks for the approving comment, then moves", () => {
  const card = task({ status: "in_review" });
  const intent = dropIntent(card, "done");
  assert.equal(intent.action, "approve");
  const [comment, move] = requestsFor(intent, card, { note: "" });
  assert.deepEqual(comment.body, { body: "Approved.", kind: "confirm" });
  assert.deepEqual(move, { method: "POST", path: "/tasks/t-1/move", body: { to: "done", if_version: 4 } });
});

test("a terminal card goes back only by reopen, with the reason asked", () => {
  for (const from of ["done", "canceled"]) {
    const intent = dropIntent(task({ status: from }), "todo");
    assert.equal(intent.action, "reopen");
    assert.deepEqual(requestsFor(intent, task({ status: from }), { reason: "found a regression" })[0].body, { reason: "found a regression", if_version: 4 });
  }
});

test("dropping on its own column does nothing", () => {
  for (const status of STATUSES) {
    const intent = dropIntent(task({ status }), status);
    assert.equal(intent.action, "none");
    assert.deepEqual(requestsFor(intent, task({ status })), []);
  }
});

test("every other drop is a move, marked legal exactly when the status graph allows it", () => {
  for (const from of STATUSES) {
    for (const to of STATUSES) {
      if (from === to) continue;
      const intent = dropIntent(task({ status: from }), to);
      assert.equal(intent.legal || intent.action === "move", true);
      if (intent.action === "move") {
        assert.equal(intent.legal, TRANSITIONS[from].includes(to), `${from} → ${to}`);
        // An illegal move is still sent: the person reads the board's refusal, not the page's.
        assert.deepEqual(requestsFor(intent, task({ status: from })), [{ method: "POST", path: "/tasks/t-1/move", body: { to, if_version: 4 } }]);
      } else {
        assert.equal(intent.legal, true, `${from} → ${to} is ${intent.action}`);
      }
    }
  }
  assert.equal(dropIntent(task({ status: "done" }), "in_progress").legal, false);
  assert.equal(dropIntent(task({ status: "backlog" }), "in_review").action, "move");
});

test("an unknown column is a bug, refused loudly", () => {
  assert.throws(() => dropIntent(task(), "constructor"), /not a column/);
  assert.throws(() => requestsFor({ action: "teleport" }, task()), /unknown drop intent/);
});

test("the card's id is escaped into the path", () => {
  const [request] = requestsFor({ action: "claim" }, task({ id: "a/b?c" }));
  assert.equal(request.path, "/tasks/a%2Fb%3Fc/claim");
});

test("Claim shows on claimable To-do cards, Release on the person's own in-progress card", () => {
  assert.equal(claimable(task()), true);
  assert.equal(claimable(task({ kind: "epic" })), false);
  assert.equal(claimable(task({ status: "backlog" })), false);
  assert.equal(claimable(task({ archived_at: "2026-01-01T00:00:00.000Z" })), false);
  const me = { kind: "human", id: "ann" };
  assert.equal(releasable(task({ status: "in_progress", claimed_by: "ann", claimed_by_kind: "human" }), me), true);
  assert.equal(releasable(task({ status: "in_progress", claimed_by: "ann", claimed_by_kind: "claude" }), me), false);
  assert.equal(releasable(task({ status: "in_progress", claimed_by: "bob", claimed_by_kind: "human" }), me), false);
  assert.deepEqual(releaseRequest(task()), { method: "POST", path: "/tasks/t-1/move", body: { to: "todo", if_version: 4 } });
});

test("the keyboard drops on a neighbour (Shift+arrows) or on the column at a place (1–8)", () => {
  assert.equal(keyboardTarget("todo", { key: "ArrowRight", shiftKey: true }), "in_progress");
  assert.equal(keyboardTarget("todo", { key: "ArrowLeft", shiftKey: true }), "backlog");
  assert.equal(keyboardTarget("backlog", { key: "ArrowLeft", shiftKey: true }), null);
  assert.equal(keyboardTarget("canceled", { key: "ArrowRight", shiftKey: true }), null);
  assert.equal(keyboardTarget("todo", { key: "ArrowRight" }), null, "a plain arrow moves the focus, not the card");
  STATUSES.forEach((status, index) => assert.equal(keyboardTarget("todo", { key: String(index + 1) }), status));
  assert.equal(keyboardTarget("todo", { key: "9" }), null);
  assert.equal(keyboardTarget("todo", { key: "0" }), null);
});

test("a refusal reads as the board's words, never a raw body", () => {
  assert.equal(
    refusalText({ code: "DEPENDENCY_OPEN", message: "DEMO-0001 waits on DEMO-0002", hint: "finish DEMO-0002 first" }),
    "DEPENDENCY_OPEN: DEMO-0001 waits on DEMO-0002 — finish DEMO-0002 first",
  );
  assert.equal(refusalText({ code: "HTTP_ERROR", message: "Bad gateway" }), "Bad gateway");
  assert.equal(refusalText(null), "the board refused the change");
});
