// Sentences for the drawer's activity tab: every event of the trail, in plain words, with a
// generic fallback for a name this page does not know. No DOM.

import { fieldChanges } from "./feed.js";

const s = (status) => String(status || "?").replace("_", " ");

const SENTENCES = {
  project_created: (c) => `created project ${c.project}`,
  project_updated: (c) => `updated project ${c.project} (${(c.fields || []).join(", ")})`,
  task_created: (c) => `created ${c.identifier || "the task"} in ${s(c.status)}`,
  task_updated: (c, row) => {
    const lines = fieldChanges([row]);
    const other = (c.fields || []).length - lines.length;
    const rest = other > 0 ? `${lines.length ? "; " : ""}${other} other field${other > 1 ? "s" : ""}` : "";
    return `edited ${lines.join("; ")}${rest}`;
  },
  task_claimed: (c) => `claimed it (${s(c.from)} → ${s(c.to)})${c.stoleFrom ? ` from ${c.stoleFrom}: ${c.reason || ""}` : ""}`,
  task_heartbeat: () => "sent a heartbeat",
  task_moved: (c) => `moved it ${s(c.from)} → ${s(c.to)}${c.awaitingReason || c.blockedReason ? `: ${c.awaitingReason || c.blockedReason}` : ""}`,
  task_reopened: (c) => `reopened it (round ${c.deliveryRound}): ${c.reason}`,
  task_resumed: () => "resumed it after the answer (awaiting → todo)",
  task_archived: () => "archived it",
  report_written: (c) => `wrote the report for round ${c.round}`,
  task_delivered: (c) => (c.rollup ? `delivered the epic: every child is done (${c.canceled || 0} canceled)` : `delivered round ${c.round} for review`),
  report_waived: (c) => `delivered round ${c.round} without a report: ${c.reason}`,
  acceptance_changed: (c) => `added ${(c.added || []).length} acceptance item(s)`,
  acceptance_pruned: (c) => `removed ${(c.removed || []).length} acceptance item(s): ${c.reason}`,
  acceptance_override: (c) => `set acceptance ${c.from} → ${c.to}${c.reason ? `: ${c.reason}` : ""}`,
  epic_auto_start: (c, row, name) => `started the epic because ${name(c.child)} was claimed`,
  comment_added: (c) => (c.kind && c.kind !== "note" ? `added a ${c.kind} comment` : "commented"),
  relation_added: (c, row, name) => `linked ${name(c.source)} ${String(c.type).replace("_", " ")} ${name(c.target)}`,
  relation_removed: (c, row, name) => `unlinked ${name(c.source)} ${String(c.type).replace("_", " ")} ${name(c.target)}`,
  label_gc: (c) => `archived unused labels: ${(c.archived || []).join(", ")}`,
  session_registered: (c) => `registered session ${c.sessionId} (segment ${c.seg}, ${c.phase})`,
  session_closed: (c) => `closed session ${c.sessionId}: ${c.status}`,
  progress: (c) => `progress: ${c.line}`,
  attachment_added: (c) => `attached ${c.filename}`,
  attachment_updated: (c) => `replaced ${c.filename}`,
  attachment_removed: (c) => `removed ${c.filename}`,
  import_completed: () => "completed an import",
  wip_exceeded: (c) => `noticed ${s(c.status)} over its WIP limit (${c.count} / ${c.limit})`,
  wip_cleared: (c) => `noticed ${s(c.status)} back within its WIP limit (${c.count} / ${c.limit})`,
  lane_drained: (c) => `noticed ${s(c.status)} is empty`,
  lane_refilled: (c) => `noticed ${s(c.status)} holds cards again (${c.count})`,
  card_blocked: (c) => `noticed it is blocked by ${(c.blockers || []).join(", ")}`,
  card_unblocked: (c) => `noticed it is no longer blocked (was ${(c.blockers || []).join(", ")})`,
  transition_rejected: (c) => `refused ${s(c.from)} → ${s(c.to)} (${c.code})`,
  status_timeout: (c) => `noticed it has been ${s(c.status)} longer than ${c.max} s`,
  card_idle: (c) => `noticed nothing happened on it for ${c.threshold} s`,
  claim_stale: (c) => `noticed ${c.claimed_by}'s claim went stale (last heartbeat ${c.heartbeat_at})`,
};

export function sentence(row, name = (id) => id) {
  const render = SENTENCES[row.event];
  if (!render) return `wrote ${row.event}`;
  try {
    return render(row.changes || {}, row, name);
  } catch {
    return `wrote ${row.event}`;
  }
}

export function actorLabel(kind, id) {
  if (kind === "human") return id;
  if (kind === "system") return "Taskloom";
  return `${id} (${kind})`;
}

const UNITS = [
  ["year", 365 * 24 * 3600],
  ["month", 30 * 24 * 3600],
  ["week", 7 * 24 * 3600],
  ["day", 24 * 3600],
  ["hour", 3600],
  ["minute", 60],
];

/** "3 minutes ago"; `now` in ms. */
export function ago(timestamp, now) {
  const seconds = Math.round((now - Date.parse(timestamp)) / 1000);
  if (!Number.isFinite(seconds)) return "";
  if (seconds < 45) return "just now";
  for (const [unit, size] of UNITS) {
    if (seconds >= size) {
      const count = Math.round(seconds / size);
      return `${count} ${unit}${count > 1 ? "s" : ""} ago`;
    }
  }
  return "just now";
}
