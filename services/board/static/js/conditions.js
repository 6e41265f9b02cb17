// What the board notices about its own state, as the page shows it (docs/conditions.md): column
// counts against WIP limits, dependency-blocked cards, claims whose worker stopped heart-beating.
// No DOM, no fetch: the page hands in projects, tasks, signals and /breaches answers.
//
// Two sources, one picture. A card's own read says whether it is blocked by a dependency
// (`blocked_by`, its open blockers); a `card_blocked`/`card_unblocked` signal says so sooner,
// for the card whose blocker changed (the activity row hangs off the blocker, not off it).
// Signals are never replayed, so after every (re)connect the page reads GET /breaches and
// replaces what it held: `beginCatchUp` before the request, `loadBreaches` with its answer;
// signals that arrive meanwhile are applied again on top, so the newer word wins.

// The condition names the page acts on; every other signal is ignored here.
export const WIP_EXCEEDED = "wip_exceeded";
export const WIP_CLEARED = "wip_cleared";
export const CARD_BLOCKED = "card_blocked";
export const CARD_UNBLOCKED = "card_unblocked";
export const CLAIM_STALE = "claim_stale";

/** A card marker: `kind` is the CSS hook, `label` what a person (and a screen reader) reads. */
export const MARKERS = {
  dependency: (blockers) => ({ kind: "dependency", label: blockers.length ? `Waiting on ${blockers.join(", ")}` : "Waiting on a blocker" }),
  stale: (claimedBy) => ({ kind: "stale", label: claimedBy ? `No heartbeat from ${claimedBy}` : "Claim gone stale" }),
};

const ACTED_ON = new Set([WIP_EXCEEDED, WIP_CLEARED, CARD_BLOCKED, CARD_UNBLOCKED, CLAIM_STALE]);

/**
 * A persisted condition (a project's `settings.persist_conditions`) arrives as an activity row
 * named after it, not as a signal: the same news in the shape `applySignal` reads, or null.
 */
export function signalOfRow(row) {
  if (!row || !ACTED_ON.has(row.event)) return null;
  return { type: row.event, project_id: row.project_id, task_id: row.task_id ?? null, changes: row.changes || {}, at: row.created_at };
}

/** `project.settings.wip_limits`, only the usable entries (a non-negative integer per status). */
export function wipLimits(project) {
  const limits = project && project.settings && project.settings.wip_limits;
  const out = new Map();
  if (!limits || typeof limits !== "object") return out;
  for (const [status, limit] of Object.entries(limits)) {
    if (Number.isInteger(limit) && limit >= 0) out.set(status, limit);
  }
  return out;
}

/** What a column header shows: "4 / 3" with a warning while wip_exceeded holds, else the count. */
export function columnHeader(count, limit, exceeded) {
  if (limit === undefined || limit === null) return { text: String(count), label: `${count} cards`, warning: false };
  return {
    text: `${count} / ${limit}`,
    label: exceeded ? `${count} cards, over the limit of ${limit}` : `${count} cards, limit ${limit}`,
    warning: Boolean(exceeded),
  };
}

export class ConditionState {
  constructor() {
    this.projectId = null;
    this.limits = new Map(); // status -> limit, for the shown project
    this.exceeded = new Set(); // statuses whose wip_exceeded holds, for the shown project
    this.blocked = new Map(); // task id -> open blocker identifiers, from signals and breaches
    this.unblocked = new Set(); // task ids a card_unblocked cleared since their last read
    this.stale = new Map(); // task id -> { claimedBy, heartbeatAt }
    this.catchingUp = null; // signals seen while a /breaches read is in flight
  }

  /** The shown project changed, or its settings did. Holding state of another project is dropped. */
  setProject(project) {
    const id = project ? project.id : null;
    if (id !== this.projectId) {
      this.projectId = id;
      this.exceeded.clear();
      this.blocked.clear();
      this.unblocked.clear();
      this.stale.clear();
    }
    this.limits = wipLimits(project);
  }

  /** Call before GET /breaches: signals from now on are replayed over its answer. */
  beginCatchUp() {
    this.catchingUp = [];
  }

  /**
   * Replace everything held with what GET /breaches says holds now, then re-apply the signals
   * that arrived while it was read. Returns what changed, as `applySignal` does.
   */
  loadBreaches(items) {
    const changed = { columns: new Set([...this.exceeded]), tasks: new Set([...this.blocked.keys(), ...this.stale.keys(), ...this.unblocked]) };
    this.exceeded.clear();
    this.blocked.clear();
    this.unblocked.clear();
    this.stale.clear();
    for (const item of items || []) {
      if (item.project_id !== this.projectId) continue;
      this.hold(item, changed);
    }
    const replay = this.catchingUp || [];
    this.catchingUp = null;
    for (const signal of replay) this.applySignal(signal, changed);
    return changed;
  }

  /** One `signal` frame's data. Returns `{columns, tasks}`: what the page must re-render. */
  applySignal(signal, changed = { columns: new Set(), tasks: new Set() }) {
    if (!signal || signal.project_id !== this.projectId) return changed;
    if (this.catchingUp) this.catchingUp.push(signal);
    const changes = signal.changes || {};
    if (signal.type === WIP_CLEARED) {
      if (this.exceeded.delete(changes.status)) changed.columns.add(changes.status);
    } else if (signal.type === CARD_UNBLOCKED) {
      this.blocked.delete(signal.task_id);
      this.unblocked.add(signal.task_id);
      changed.tasks.add(signal.task_id);
    } else {
      this.hold(signal, changed);
    }
    return changed;
  }

  hold(item, changed) {
    const changes = item.changes || {};
    if (item.type === WIP_EXCEEDED && typeof changes.status === "string") {
      this.exceeded.add(changes.status);
      changed.columns.add(changes.status);
    } else if (item.type === CARD_BLOCKED && item.task_id) {
      this.blocked.set(item.task_id, Array.isArray(changes.blockers) ? changes.blockers.map(String) : []);
      this.unblocked.delete(item.task_id);
      changed.tasks.add(item.task_id);
    } else if (item.type === CLAIM_STALE && item.task_id) {
      this.stale.set(item.task_id, { claimedBy: changes.claimed_by || null, heartbeatAt: changes.heartbeat_at || null });
      changed.tasks.add(item.task_id);
    }
  }

  /**
   * A fresh read of a task. Its own `blocked_by` is now the truth about dependencies; a stale
   * claim stops holding once the card left in_progress, changed hands or heart-beat again.
   */
  taskRead(task) {
    if (!task) return;
    this.blocked.delete(task.id);
    this.unblocked.delete(task.id);
    const stale = this.stale.get(task.id);
    if (!stale) return;
    const moved = task.status !== "in_progress";
    const otherHolder = stale.claimedBy && task.claimed_by && task.claimed_by !== stale.claimedBy;
    const beat = stale.heartbeatAt && task.heartbeat_at && task.heartbeat_at > stale.heartbeatAt;
    if (moved || otherHolder || beat) this.stale.delete(task.id);
  }

  header(status, count) {
    return columnHeader(count, this.limits.get(status), this.exceeded.has(status));
  }

  /** The markers a card carries now, in a fixed order (dependency first). */
  markers(task) {
    const out = [];
    const signalled = this.blocked.get(task.id);
    const own = Array.isArray(task.blocked_by) ? task.blocked_by : [];
    if (signalled) out.push(MARKERS.dependency(signalled));
    else if (own.length && !this.unblocked.has(task.id)) out.push(MARKERS.dependency(own.map(blockerName)));
    const stale = this.stale.get(task.id);
    if (stale && task.status === "in_progress") out.push(MARKERS.stale(stale.claimedBy));
    return out;
  }
}

// `blocked_by` may list identifiers or small task objects; either way the page shows identifiers.
function blockerName(blocker) {
  if (blocker && typeof blocker === "object") return String(blocker.identifier || blocker.id || "?");
  return String(blocker);
}
