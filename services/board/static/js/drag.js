// What dropping a card on a column means, and the requests that carry it out. No DOM, no fetch:
// the board view asks `dropIntent`, opens a dialog when the intent needs words from the person,
// then sends `requestsFor`. The keyboard's "drop" (digits, Shift+arrows) goes through the same two.
//
// The page never refuses a drop by itself: a move the status graph does not allow is still sent,
// so what the person reads is the board's own refusal (its code, message and hint), the same
// whichever client asked. `legal` only lets the column say so while the card is over it.

import { STATUSES, TERMINAL, TRANSITIONS } from "./board-state.js";

/**
 * The intent of dropping `task` on the column `to`:
 * - none: the card's own column;
 * - claim: todo → in progress is taking the card (SPEC §4.4 claim), never a plain move;
 * - deliver: into review needs a report or a waiver, so a dialog asks which;
 * - approve: in review → done needs an approving comment, so a dialog asks for it;
 * - reopen: a terminal card goes back to To do only through reopen, with a reason;
 * - move: anything else, `legal` per the status graph.
 */
export function dropIntent(task, to) {
  if (!STATUSES.includes(to)) throw new Error(`not a column: ${JSON.stringify(to)}`);
  const from = task.status;
  if (to === from) return { action: "none", from, to, legal: true };
  const legal = (TRANSITIONS[from] || []).includes(to);
  if (from === "todo" && to === "in_progress") return { action: "claim", from, to, legal: true };
  if (to === "in_review" && legal) return { action: "deliver", from, to, legal: true };
  if (from === "in_review" && to === "done") return { action: "approve", from, to, legal: true };
  if (TERMINAL.has(from) && to === "todo") return { action: "reopen", from, to, legal: true };
  return { action: "move", from, to, legal };
}

/** Which intents need words from the person before anything is sent (the dialog's mode). */
export const DIALOG_INTENTS = new Set(["deliver", "approve", "reopen"]);

const ref = (task) => encodeURIComponent(task.id);

/**
 * The API calls that carry an intent out, in order: [{ method, path, body }].
 * `input` holds what the dialog asked: { report } or { waiver } for deliver, { note } for
 * approve, { reason } for reopen. Every write names the version the person saw, so a card that
 * changed meanwhile is a conflict, not a surprise.
 */
export function requestsFor(intent, task, input = {}) {
  const base = `/tasks/${ref(task)}`;
  const version = { if_version: task.version };
  switch (intent.action) {
    case "none":
      return [];
    case "claim":
      return [{ method: "POST", path: `${base}/claim`, body: version }];
    case "deliver":
      if (input.report && input.report.trim()) return [{ method: "POST", path: `${base}/deliver`, body: { body: input.report, ...version } }];
      if (input.waiver !== undefined) return [{ method: "POST", path: `${base}/waive`, body: { reason: input.waiver, ...version } }];
      throw new Error("deliver needs a report or a waiver reason");
    case "approve":
      // The comment does not bump the task's version; the move after it still checks it.
      return [
        { method: "POST", path: `${base}/comments`, body: { body: (input.note || "").trim() || "Approved.", kind: "confirm" } },
        { method: "POST", path: `${base}/move`, body: { to: "done", ...version } },
      ];
    case "reopen":
      return [{ method: "POST", path: `${base}/reopen`, body: { reason: input.reason || "", ...version } }];
    case "move":
      return [{ method: "POST", path: `${base}/move`, body: { to: intent.to, ...version } }];
    default:
      throw new Error(`unknown drop intent: ${JSON.stringify(intent.action)}`);
  }
}

/** A release hands a claimed card back: in progress → To do. */
export function releaseRequest(task) {
  return { method: "POST", path: `/tasks/${ref(task)}/move`, body: { to: "todo", if_version: task.version } };
}

/**
 * Whether the Claim button shows on a card: a To-do card that is not an epic (epics are claimed
 * through their children). Anything else the board may still refuse (an open blocker, someone
 * else's assignment); the card then shows the board's words.
 */
export function claimable(task) {
  return task.status === "todo" && task.kind !== "epic" && !task.archived_at;
}

/** Whether the Release button shows: an in-progress card the person ("You are") holds. */
export function releasable(task, actor) {
  return task.status === "in_progress" && task.claimed_by === actor.id && (task.claimed_by_kind || "human") === actor.kind;
}

/**
 * The column a key press drops the focused card on, or null: Shift+ArrowLeft/Right for the
 * neighbouring column, 1–8 for the column at that place.
 */
export function keyboardTarget(status, { key, shiftKey = false }) {
  const at = STATUSES.indexOf(status);
  if (at < 0) return null;
  if (shiftKey && (key === "ArrowLeft" || key === "ArrowRight")) {
    const next = at + (key === "ArrowLeft" ? -1 : 1);
    return next >= 0 && next < STATUSES.length ? STATUSES[next] : null;
  }
  if (/^[1-8]$/.test(key)) return STATUSES[Number(key) - 1];
  return null;
}

/** The words under a refused drop: the board's code, message and hint, never a raw body. */
export function refusalText(error) {
  const message = String((error && error.message) || "the board refused the change");
  const code = error && error.code && error.code !== "HTTP_ERROR" ? `${error.code}: ` : "";
  const hint = error && error.hint ? ` — ${error.hint}` : "";
  return `${code}${message}${hint}`;
}
