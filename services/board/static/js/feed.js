// The human activity feed (SPEC §11): allow-list admission, truthful wording, burst folding,
// a ledger merged by activity id, and the browser-local unread cursor. No DOM.

import { FEED, HUMAN_FIELDS } from "./events-table.js";

export const FOLD_WINDOW_MS = 5 * 60 * 1000;
export const BACKFILL_LIMIT = 1000;

const FIELD_LABELS = {
  title: "title",
  description: "description",
  priority: "priority",
  kind: "kind",
  labels: "labels",
  assignee: "assignee",
  reporter: "reporter",
};

/** Writers name fields in snake_case; accept camelCase (assigneeId) as the same field. */
export function fieldName(name) {
  return String(name).replace(/[A-Z]/g, (letter) => `_${letter.toLowerCase()}`);
}

/** The human-visible fields a task_updated row names, in snake_case. */
export function humanFields(activity) {
  const fields = (activity.changes && activity.changes.fields) || [];
  return fields.map(fieldName).filter((name) => Object.hasOwn(HUMAN_FIELDS, name));
}

export function admit(activity) {
  const decision = FEED[activity.event];
  if (!decision || !activity.task_id) return false;
  if (decision.admit === "fields") return humanFields(activity).length > 0;
  return decision.admit === true;
}

/** The folding family: the event's own, or for task_updated the family of its fields. */
export function family(activity) {
  const decision = FEED[activity.event] || {};
  if (decision.admit !== "fields") return decision.family || activity.event;
  const families = [...new Set(humanFields(activity).map((name) => HUMAN_FIELDS[name]))].sort();
  return `fields:${families.join("+")}`;
}

function valueOf(side, name) {
  if (!side) return undefined;
  if (Object.hasOwn(side, name)) return side[name];
  const camel = name.replace(/_([a-z])/g, (_, letter) => letter.toUpperCase());
  return Object.hasOwn(side, camel) ? side[camel] : undefined;
}

// Free text is quoted so an empty or odd title still reads; enum values are not.
const QUOTED = new Set(["title", "description"]);

function show(group, value) {
  if (value === null || value === undefined || value === "") return "none";
  if (Array.isArray(value)) return value.length ? value.join(", ") : "none";
  return QUOTED.has(group) ? `“${value}”` : String(value);
}

function person(kind, id) {
  if (id === null || id === undefined || id === "") return "nobody";
  return kind && kind !== "human" ? `${id} (${kind})` : String(id);
}

/**
 * One line per changed human-visible field, from the first row's `before` to the last row's
 * `after`. A field whose values the row did not carry (long text) is only named.
 */
export function fieldChanges(rows) {
  const order = [];
  const first = new Map();
  const last = new Map();
  for (const row of rows) {
    const changes = row.changes || {};
    for (const raw of humanFields(row)) {
      const group = raw.replace(/_(kind|id)$/, ""); // assignee_kind + assignee_id read as one
      if (!order.includes(group)) order.push(group);
      const pick = (side) => {
        if (group === "assignee" || group === "reporter") {
          const kind = valueOf(side, `${group}_kind`);
          const id = valueOf(side, `${group}_id`);
          return kind === undefined && id === undefined ? undefined : { kind, id };
        }
        return valueOf(side, group);
      };
      const before = pick(changes.before);
      const after = pick(changes.after);
      if (!first.has(group)) first.set(group, before);
      last.set(group, after);
    }
  }
  return order.map((group) => {
    const before = first.get(group);
    const after = last.get(group);
    const label = FIELD_LABELS[group] || group;
    if (before === undefined || after === undefined) return `${label} edited`;
    if (group === "assignee" || group === "reporter") {
      return `${label} ${person(before.kind, before.id)} → ${person(after.kind, after.id)}`;
    }
    if (group === "labels" && Array.isArray(before) && Array.isArray(after)) {
      const added = after.filter((name) => !before.includes(name)).map((name) => `+${name}`);
      const removed = before.filter((name) => !after.includes(name)).map((name) => `−${name}`);
      return `labels ${[...added, ...removed].join(" ") || "unchanged"}`;
    }
    return `${label} ${show(group, before)} → ${show(group, after)}`;
  });
}

function statusPath(rows) {
  const path = [];
  for (const row of rows) {
    const { from, to } = row.changes || {};
    if (from && path[path.length - 1] !== from) path.push(from);
    if (to && path[path.length - 1] !== to) path.push(to);
  }
  return path.map((status) => status.replace("_", " ")).join(" → ");
}

const STATUS_VERB = {
  task_claimed: "claimed",
  task_moved: "moved",
  task_reopened: "reopened",
  task_archived: "archived",
  task_delivered: "delivered",
  report_waived: "delivered without a report",
  epic_auto_start: "started the epic",
};

const COMMENT_VERB = {
  question: "asked a question on",
  confirm: "approved",
  decision: "recorded a decision on",
  change: "requested a change on",
  defect: "reported a defect on",
};

/**
 * The feed's words for a folded entry: { verb, detail }. The page renders
 * "<actor> <verb> <task>" then the detail; a folded entry also shows its row count.
 */
export function wording(rows, name = (id) => id) {
  const row = rows[rows.length - 1];
  const changes = row.changes || {};
  const count = rows.length;
  switch (row.event) {
    case "task_created":
      return { verb: "created", detail: changes.status ? `in ${changes.status.replace("_", " ")}` : "" };
    case "task_updated":
      return { verb: "edited", detail: fieldChanges(rows).join("; ") };
    case "comment_added": {
      const kinds = rows.map((r) => (r.changes || {}).kind || "note");
      if (count > 1) return { verb: `added ${count} comments to`, detail: [...new Set(kinds)].join(", ") };
      return { verb: COMMENT_VERB[kinds[0]] || "commented on", detail: "" };
    }
    case "report_written":
      return { verb: count > 1 ? `wrote ${count} reports for` : "wrote a report for", detail: changes.round ? `round ${changes.round}` : "" };
    case "relation_added":
    case "relation_removed": {
      const parts = rows.map((r) => {
        const c = r.changes || {};
        const sign = r.event === "relation_added" ? "+" : "−";
        return `${sign} ${name(c.source)} ${String(c.type || "").replace("_", " ")} ${name(c.target)}`;
      });
      const verb = count > 1 ? "changed the links of" : row.event === "relation_added" ? "linked" : "unlinked";
      return { verb, detail: parts.join("; ") };
    }
    case "attachment_added":
    case "attachment_removed": {
      const files = rows.map((r) => `${r.event === "attachment_added" ? "+" : "−"}${(r.changes || {}).filename || "file"}`);
      const verb = count > 1 ? "changed the files of" : row.event === "attachment_added" ? "attached a file to" : "removed a file from";
      return { verb, detail: files.join(" ") };
    }
    default: {
      if (Object.hasOwn(STATUS_VERB, row.event)) {
        const verb = count === 1 ? STATUS_VERB[row.event] : "moved";
        const reason = count === 1 ? changes.reason || changes.awaitingReason || changes.blockedReason : null;
        const path = statusPath(rows);
        return { verb, detail: reason ? `${path} — ${reason}` : path };
      }
      return { verb: row.event.replace(/_/g, " "), detail: "" };
    }
  }
}

function millis(row) {
  const value = Date.parse(row.created_at);
  return Number.isFinite(value) ? value : 0;
}

function actorKey(row) {
  return `${row.actor_kind}\u0000${row.actor_id}`;
}

/**
 * Fold admitted rows (any order) into entries, newest first. A burst is the same actor, task
 * and family inside five minutes of the burst's first row; other rows may interleave.
 */
export function fold(rows) {
  const sorted = [...rows].sort((a, b) => a.revision - b.revision || a.id - b.id);
  const open = new Map();
  const entries = [];
  for (const row of sorted) {
    const key = `${actorKey(row)}\u0000${row.task_id}\u0000${family(row)}`;
    const entry = open.get(key);
    if (entry && millis(row) - millis(entry.rows[0]) <= FOLD_WINDOW_MS) {
      entry.rows.push(row);
      entry.revision = row.revision;
      entry.created_at = row.created_at;
      continue;
    }
    const fresh = {
      key: `${row.id}`,
      rows: [row],
      task_id: row.task_id,
      project_id: row.project_id,
      actor_kind: row.actor_kind,
      actor_id: row.actor_id,
      family: family(row),
      revision: row.revision,
      created_at: row.created_at,
    };
    open.set(key, fresh);
    entries.push(fresh);
  }
  return entries.sort((a, b) => b.revision - a.revision);
}

/** Rows by activity id: one backfill, then live rows; duplicates and replays merge away. */
export class FeedLedger {
  constructor() {
    this.rows = new Map();
  }

  reset(items = []) {
    this.rows.clear();
    for (const row of items) this.add(row);
  }

  /** Returns true when the row is new and the feed admits it. */
  add(row) {
    if (this.rows.has(row.id) || !admit(row)) return false;
    this.rows.set(row.id, row);
    return true;
  }

  /** Folded entries, newest first, for one project (or every project when null). */
  entries(projectId = null) {
    const rows = [...this.rows.values()].filter((row) => projectId === null || row.project_id === projectId);
    return fold(rows);
  }
}

/** Entries newer than the reader's seenAt (a revision), not counting the reader's own. */
export function unreadCount(entries, seenAt, me = null) {
  return entries.filter((entry) => {
    if (entry.revision <= seenAt) return false;
    return !(me && entry.actor_kind === me.kind && entry.actor_id === me.id);
  }).length;
}

/** The localStorage key of the unread cursor: per board, so a new board starts unread. */
export function seenKey(boardId) {
  return `taskloom:seenAt:${boardId}`;
}
