// The filter bar's state: what it holds, how it lives in the URL (shareable, survives a reload),
// and which cards it keeps. No DOM. Text is searched by the board (`GET /tasks?q=`, the same
// words over title, identifier and description); label, assignee, kind and priority are checked
// here against the cards the page already holds, so they apply at once.

export const FILTER_FIELDS = ["q", "label", "assignee", "kind", "priority"];
export const KINDS = ["task", "epic", "bug", "review"];
export const PRIORITIES = ["urgent", "high", "medium", "low"];
/** The board's cap on q (shared/limits.py SEARCH_MAX_CHARS); longer text would be refused. */
export const Q_MAX_CHARS = 200;

export const EMPTY_FILTER = Object.freeze({ q: "", label: "", assignee: "", kind: "", priority: "" });

/** The filter (and the project) a URL's query string names; anything unusable is dropped. */
export function parseFilter(search) {
  const params = new URLSearchParams(search);
  const text = (name) => (params.get(name) || "").trim();
  const filter = {
    q: text("q").slice(0, Q_MAX_CHARS),
    label: text("label").toLowerCase(),
    assignee: text("assignee"),
    kind: KINDS.includes(text("kind")) ? text("kind") : "",
    priority: PRIORITIES.includes(text("priority")) ? text("priority") : "",
  };
  return { filter, project: text("project") || null };
}

/** The query string for a filter and a project, keeping parameters the filter does not own. */
export function filterSearch(filter, project, search = "") {
  const params = new URLSearchParams(search);
  for (const name of [...FILTER_FIELDS, "project"]) params.delete(name);
  if (project) params.set("project", project);
  for (const name of FILTER_FIELDS) {
    const value = (filter[name] || "").trim();
    if (value) params.set(name, value);
  }
  const text = params.toString();
  return text ? `?${text}` : "";
}

export function isActive(filter) {
  return FILTER_FIELDS.some((name) => (filter[name] || "").trim() !== "");
}

/**
 * Whether a card stays shown. `textMatches` is the set of task ids the board answered for q
 * (null while that answer is on its way: the cards stay as they were rather than flicker).
 */
export function matches(task, filter, textMatches) {
  if (filter.label && !task.labels.includes(filter.label)) return false;
  if (filter.assignee && task.assignee_id !== filter.assignee) return false;
  if (filter.kind && task.kind !== filter.kind) return false;
  if (filter.priority && task.priority !== filter.priority) return false;
  if (filter.q && textMatches && !textMatches.has(task.id)) return false;
  return true;
}

/** The board's list query for the text part of a filter, or null when there is no text. */
export function textQuery(projectId, filter) {
  const q = (filter.q || "").trim();
  if (!q || !projectId) return null;
  return `/tasks?project=${encodeURIComponent(projectId)}&q=${encodeURIComponent(q)}&archived=true`;
}

/** "3 of 12 cards" for the bar's status line. */
export function summary(shown, total) {
  return `${shown} of ${total} card${total === 1 ? "" : "s"}`;
}
