// The board's state as the page holds it: projects, the tasks of the shown project, columns.
// No DOM. The page renders from what `applyTask` reports changed.

export const STATUSES = ["backlog", "todo", "in_progress", "awaiting", "blocked", "in_review", "done", "canceled"];

export const STATUS_LABELS = {
  backlog: "Backlog",
  todo: "To do",
  in_progress: "In progress",
  awaiting: "Awaiting answer",
  blocked: "Blocked",
  in_review: "In review",
  done: "Done",
  canceled: "Canceled",
};

// SPEC §4.3; the board enforces it, the page only offers the moves it allows.
export const TRANSITIONS = {
  backlog: ["todo", "canceled"],
  todo: ["backlog", "in_progress", "blocked", "canceled"],
  in_progress: ["todo", "awaiting", "blocked", "in_review", "canceled"],
  awaiting: ["todo", "in_progress", "canceled"],
  blocked: ["todo", "in_progress", "in_review", "canceled"],
  in_review: ["done", "in_progress", "blocked", "todo"],
  done: [],
  canceled: [],
};

export const TERMINAL = new Set(["done", "canceled"]);

export const PRIORITY_RANK = { urgent: 0, high: 1, medium: 2, low: 3 };

/** The fields a card shows; two tasks with equal signatures render the same card. */
export function cardSignature(task) {
  return JSON.stringify([
    task.identifier,
    task.title,
    task.status,
    task.priority,
    task.kind,
    task.labels,
    task.assignee_kind,
    task.assignee_id,
    task.awaiting_reason,
    task.blocked_reason,
    task.archived_at !== null && task.archived_at !== undefined,
  ]);
}

export function byPriority(a, b) {
  return (PRIORITY_RANK[a.priority] ?? 9) - (PRIORITY_RANK[b.priority] ?? 9) || a.number - b.number;
}

export function visible(task, projectId) {
  return task.project_id === projectId && !task.archived_at;
}

export class BoardState {
  constructor() {
    this.projects = [];
    this.projectId = null;
    this.tasks = new Map(); // id -> task, every project we have read
  }

  setProjects(items) {
    this.projects = items;
  }

  /**
   * Take a list read of one project. `replace` drops tasks the read does not name (a full
   * reload, when no card read can race it); otherwise the read is merged, and a task the page
   * already holds at a newer revision (a card read that landed meanwhile) is kept.
   */
  setTasks(projectId, items, { replace = true } = {}) {
    if (replace) for (const [id, task] of this.tasks) if (task.project_id === projectId) this.tasks.delete(id);
    for (const task of items) {
      const held = this.tasks.get(task.id);
      if (!held || held.revision <= task.revision) this.tasks.set(task.id, task);
    }
  }

  /**
   * Take a fresh read of one task. Returns what the page must do with the card:
   * "unchanged" | "changed" | "moved" | "added" | "removed" | "stale" | "elsewhere".
   */
  applyTask(taskId, task) {
    const old = this.tasks.get(taskId);
    if (task === null) {
      this.tasks.delete(taskId);
      return old && visible(old, this.projectId) ? "removed" : "elsewhere";
    }
    if (old && old.revision > task.revision) return "stale";
    this.tasks.set(task.id, task);
    const wasShown = Boolean(old && visible(old, this.projectId));
    const isShown = visible(task, this.projectId);
    if (!wasShown && !isShown) return "elsewhere";
    if (!wasShown) return "added";
    if (!isShown) return "removed";
    if (old.status !== task.status || old.priority !== task.priority) return "moved";
    return cardSignature(old) === cardSignature(task) ? "unchanged" : "changed";
  }

  column(status) {
    return [...this.tasks.values()]
      .filter((task) => task.status === status && visible(task, this.projectId))
      .sort(byPriority);
  }

  find(ref) {
    if (this.tasks.has(ref)) return this.tasks.get(ref);
    const upper = String(ref).toUpperCase();
    for (const task of this.tasks.values()) if (task.identifier === upper) return task;
    return null;
  }

  /** "DEMO-0007" for a task uuid we know, else a short form of the id. */
  nameOf(taskId) {
    const task = this.tasks.get(taskId);
    if (task) return task.identifier;
    return typeof taskId === "string" ? taskId.slice(0, 8) : String(taskId);
  }
}
