// Routing live frames to the smallest refresh that keeps every surface honest (SPEC §11).
// No DOM: the reads and the "apply" steps are callbacks, timers are passed in.

import { ROUTING } from "./events-table.js";

export const CARD_DEBOUNCE_MS = 100;
export const LISTS_DEBOUNCE_MS = 250;

/**
 * What one activity frame asks for, from the table alone (pure).
 * Returns { cards: [taskId], drawer: [taskId], tabs: [tab], lists: bool, unknown: bool }.
 */
export function plan(activity) {
  const decision = ROUTING[activity.event];
  const taskId = activity.task_id || null;
  const changes = activity.changes || {};
  if (decision === undefined) {
    // Unknown name: the safe path. A task event refreshes the card and every drawer tab.
    return taskId
      ? { cards: [taskId], drawer: [taskId], tabs: ["*"], lists: false, unknown: true }
      : { cards: [], drawer: [], tabs: [], lists: true, unknown: true };
  }
  if (decision.noise) return { cards: [], drawer: [], tabs: [], lists: false, unknown: false };
  const drawer = [];
  if (taskId) drawer.push(taskId);
  if (decision.ends) {
    for (const end of [changes.source, changes.target]) {
      if (typeof end === "string" && end && !drawer.includes(end)) drawer.push(end);
    }
  }
  return {
    cards: decision.card && taskId ? [taskId] : [],
    drawer: decision.tabs ? drawer : [],
    tabs: decision.tabs ? [...decision.tabs] : [],
    lists: Boolean(decision.lists),
    unknown: false,
  };
}

/**
 * Schedules the reads a stream of frames asks for.
 *
 * - cards: one GET per card per 100 ms window (the window opens at the first frame and is not
 *   extended, so a busy card is still refreshed every 100 ms); each read carries a ticket and a
 *   response older than one already applied for that card is dropped (newest response wins).
 * - drawer: the open drawer's affected tabs, in the same window; "details" comes from the card
 *   read, so it costs nothing extra. The drawer callback checks which card is open.
 * - lists: projects and tasks reload on a 250 ms trailing debounce.
 */
export class Refresher {
  constructor({
    setTimeout,
    clearTimeout,
    fetchTask, // async (taskId) => task | null (null: gone)
    applyTask, // (taskId, task | null) => void
    refreshTabs, // (taskId, tabs: string[]) => void; tabs may hold "*"
    reloadLists, // () => void
    warn = () => {},
  }) {
    this.setTimeout = setTimeout;
    this.clearTimeout = clearTimeout;
    this.fetchTask = fetchTask;
    this.applyTask = applyTask;
    this.refreshTabs = refreshTabs;
    this.reloadLists = reloadLists;
    this.warn = warn;
    this.cardTimers = new Map(); // taskId -> timer
    this.tabWaits = new Map(); // taskId -> Set(tab)
    this.tabTimers = new Map();
    this.issued = new Map(); // taskId -> last ticket issued
    this.applied = new Map(); // taskId -> newest ticket applied
    this.listsTimer = null;
    this.warned = new Set();
    this.ticket = 0;
  }

  handle(activity) {
    const step = plan(activity);
    if (step.unknown && !this.warned.has(activity.event)) {
      this.warned.add(activity.event);
      this.warn(`unknown event ${JSON.stringify(activity.event)}: taking the safe path`);
    }
    for (const taskId of step.cards) this.scheduleCard(taskId);
    for (const taskId of step.drawer) this.scheduleTabs(taskId, step.tabs);
    if (step.lists) this.scheduleLists();
    return step;
  }

  scheduleCard(taskId) {
    if (this.cardTimers.has(taskId)) return;
    this.cardTimers.set(
      taskId,
      this.setTimeout(() => {
        this.cardTimers.delete(taskId);
        this.readCard(taskId);
      }, CARD_DEBOUNCE_MS),
    );
  }

  async readCard(taskId) {
    const ticket = ++this.ticket;
    this.issued.set(taskId, ticket);
    let task;
    try {
      task = await this.fetchTask(taskId);
    } catch (error) {
      this.warn(`refreshing ${taskId} failed: ${error}`);
      return;
    }
    if ((this.applied.get(taskId) || 0) > ticket) return; // a newer read already landed
    this.applied.set(taskId, ticket);
    this.applyTask(taskId, task);
  }

  scheduleTabs(taskId, tabs) {
    const waiting = this.tabWaits.get(taskId) || new Set();
    for (const tab of tabs) waiting.add(tab);
    this.tabWaits.set(taskId, waiting);
    if (this.tabTimers.has(taskId)) return;
    this.tabTimers.set(
      taskId,
      this.setTimeout(() => {
        const due = [...(this.tabWaits.get(taskId) || [])];
        this.tabTimers.delete(taskId);
        this.tabWaits.delete(taskId);
        this.refreshTabs(taskId, due);
      }, CARD_DEBOUNCE_MS),
    );
  }

  scheduleLists() {
    if (this.listsTimer !== null) this.clearTimeout(this.listsTimer);
    this.listsTimer = this.setTimeout(() => {
      this.listsTimer = null;
      this.reloadLists();
    }, LISTS_DEBOUNCE_MS);
  }

  /** Forget every pending read (the page is reloading its whole state). */
  cancel() {
    for (const timer of [...this.cardTimers.values(), ...this.tabTimers.values()]) this.clearTimeout(timer);
    if (this.listsTimer !== null) this.clearTimeout(this.listsTimer);
    this.cardTimers.clear();
    this.tabTimers.clear();
    this.tabWaits.clear();
    this.listsTimer = null;
    // Reads already in flight must not overwrite the reloaded state.
    for (const [taskId] of this.issued) this.applied.set(taskId, this.ticket + 1);
    this.ticket += 1;
  }
}
