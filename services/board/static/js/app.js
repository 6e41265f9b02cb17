// The board page: wires the live stream, the router, the state and the views together.

import { Api, ApiError, q } from "./api.js";
import { BoardState, visible } from "./board-state.js";
import { BoardView } from "./board-view.js";
import { BoardWork } from "./board-work.js";
import { ConditionState, signalOfRow } from "./conditions.js";
import { $, formValues, h } from "./dom.js";
import { Drawer } from "./drawer.js";
import { childrenOf } from "./epics.js";
import { BACKFILL_LIMIT, FeedLedger, seenKey } from "./feed.js";
import { FeedView } from "./feed-view.js";
import { EMPTY_FILTER, filterSearch, isActive, matches, parseFilter, summary, textQuery } from "./filter.js";
import { LiveStream } from "./live.js";
import { Refresher } from "./router.js";
import { SHORTCUTS, shortcutAction } from "./shortcuts.js";

const PROJECT_KEY = "taskloom:project";
const FEED_OPEN_KEY = "taskloom:feedOpen";
const FOLDED_KEY = "taskloom:folded";
/** Below this width the feed starts closed, so all eight columns fit beside each other. */
const WIDE_WINDOW = 1600;
const TEXT_FILTER_DEBOUNCE_MS = 200;
const LOGGED_OUT_PAGE = "/static/logged-out.html";
const STATE_LABELS = { connecting: "Connecting…", live: "Live", reconnecting: "Reconnecting…", closed: "Disconnected", idle: "Starting…" };

const api = new Api();
const state = new BoardState();
const ledger = new FeedLedger();
const conditions = new ConditionState();
const identifiers = new Map(); // task id -> identifier learned from task_created rows
let boardId = null;
let feedFrame = 0;

function remember(key, value) {
  try {
    localStorage.setItem(key, value);
  } catch {
    /* private mode */
  }
}

function recall(key) {
  try {
    return localStorage.getItem(key);
  } catch {
    return null;
  }
}

function toast(message, tone = "info") {
  const item = h("div", { class: `toast toast-${tone}`, role: tone === "error" ? "alert" : "status" }, message);
  $("#toasts").append(item);
  setTimeout(() => item.remove(), tone === "error" ? 8000 : 4000);
}

function nameOf(taskId) {
  const task = state.tasks.get(taskId);
  if (task) return task.identifier;
  return identifiers.get(taskId) || state.nameOf(taskId);
}

// -- views --------------------------------------------------------------------------------------

const view = new BoardView($("#board"), { onOpen: (taskId) => drawer.open(taskId), conditions });
const drawer = new Drawer($("#drawer"), {
  api,
  state,
  toast,
  onTask: (task) => applyTask(task.id, task),
  onClose: (taskId) => view.focusCard(taskId),
});
const epics = new Map(); // epic id -> ids of its children (its outgoing parent relations)
const work = new BoardWork(view, {
  api,
  state,
  epics,
  toast,
  dialog: $("#drop-dialog"),
  applyTask: (task) => applyTask(task.id, task),
});
const feedView = new FeedView($("#feed"), { onOpenTask: (taskId) => openFromFeed(taskId) });

function openFromFeed(taskId) {
  if (state.tasks.has(taskId)) drawer.open(taskId);
  else toast(`${nameOf(taskId)} is not on this board view (archived or in another project).`);
}

function applyTask(taskId, task) {
  if (task && task.identifier) identifiers.set(task.id, task.identifier);
  const before = state.tasks.get(taskId);
  conditions.taskRead(task);
  const outcome = state.applyTask(taskId, task);
  view.update(state, taskId, task, outcome);
  afterTask(taskId, before, task);
  if (drawer.isOpenOn(taskId)) {
    if (outcome === "removed" || task === null) {
      drawer.close();
      if (task && task.archived_at) toast(`${task.identifier} was archived.`);
    } else if (outcome !== "stale" && !(before && before.revision === task.revision)) {
      drawer.taskUpdated(task);
    }
  }
}

// -- feed ---------------------------------------------------------------------------------------

function feedOpen() {
  return !$("#feed").hidden;
}

function seenAt() {
  return Number(recall(seenKey(boardId)) || 0);
}

function renderFeed() {
  feedFrame = 0;
  if (boardId === null) return;
  const entries = ledger.entries(state.projectId);
  let seen = seenAt();
  if (feedOpen() && document.visibilityState === "visible" && entries.length && entries[0].revision > seen) {
    seen = entries[0].revision;
    remember(seenKey(boardId), String(seen));
  }
  const unread = feedView.render(entries, { seenAt: seen, me: api.actor, name: nameOf });
  const badge = $("#unread");
  badge.hidden = unread === 0;
  badge.textContent = String(unread);
  $("#feed-toggle").setAttribute("aria-label", unread ? `Activity, ${unread} unread` : "Activity");
}

function scheduleFeed() {
  if (!feedFrame) feedFrame = requestAnimationFrame(renderFeed);
}

function setFeedOpen(open) {
  $("#feed").hidden = !open;
  $("#feed-toggle").setAttribute("aria-expanded", String(open));
  document.body.classList.toggle("feed-open", open);
  remember(FEED_OPEN_KEY, open ? "1" : "0");
  renderFeed();
}

// -- loading ------------------------------------------------------------------------------------

async function loadProjects() {
  const { items } = await api.get("/projects");
  state.setProjects(items);
  const wanted = state.projectId || urlProject || recall(PROJECT_KEY);
  state.projectId = items.some((p) => p.id === wanted) ? wanted : items.length ? items[0].id : null;
  conditions.setProject(items.find((p) => p.id === state.projectId) || null);
  renderProjects();
}

async function loadTasks({ replace = true } = {}) {
  if (state.projectId === null) return;
  const projectId = state.projectId;
  const items = await api.all(`/tasks?project=${q(projectId)}&archived=true`);
  for (const task of items) identifiers.set(task.id, task.identifier);
  state.setTasks(projectId, items, { replace });
  await loadEpics(projectId);
  await runTextFilter();
}

// -- epics, the filter bar -----------------------------------------------------------------------

/** The children of every epic of the project: one relations read per epic. */
async function loadEpics(projectId) {
  const shown = [...state.tasks.values()].filter((task) => task.project_id === projectId && task.kind === "epic" && !task.archived_at);
  await Promise.all(shown.map((epic) => loadEpic(epic.id)));
}

async function loadEpic(epicId) {
  try {
    const { items } = await api.get(`/tasks/${q(epicId)}/relations?type=parent`);
    epics.set(epicId, childrenOf(epicId, items));
  } catch (error) {
    if (error instanceof ApiError && error.status === 404) epics.delete(epicId);
    else console.warn("reading an epic's children failed", error);
  }
  work.redecorate(epicId);
}

/** A card changed: its epic's progress, and whether the text filter still holds for it. */
function afterTask(taskId, before, task) {
  for (const [epicId, children] of epics) if (children.includes(taskId)) work.redecorate(epicId);
  if (task && task.kind === "epic" && !epics.has(taskId) && task.project_id === state.projectId) loadEpic(taskId);
  const textChanged = !before || !task || before.title !== task.title || before.description !== task.description;
  if (filter.q && textChanged) scheduleTextFilter();
  else if (isActive(filter)) summarizeFilter();
}

let filter = { ...EMPTY_FILTER };
let textMatches = null; // task ids the board answered for filter.q; null while asking
let textTicket = 0;
let textTimer = 0;

function applyFilter() {
  view.setFilter(state, isActive(filter) ? (task) => matches(task, filter, textMatches) : null);
  summarizeFilter();
}

/** "n of m cards" under the bar (the board view hides and shows the cards themselves). */
function summarizeFilter() {
  const shown = state.projectId === null ? [] : [...state.tasks.values()].filter((task) => task.project_id === state.projectId && !task.archived_at);
  const kept = shown.filter((task) => matches(task, filter, textMatches)).length;
  $("#filter-summary").textContent = isActive(filter) ? summary(kept, shown.length) : "";
  $("#filter-clear").hidden = !isActive(filter);
  document.body.classList.toggle("filtered", isActive(filter));
}

/** The filter and the project live in the URL: a link shows the same cards, a reload keeps them. */
function writeUrl() {
  const search = filterSearch(filter, state.projectId, window.location.search);
  if (search !== window.location.search) history.replaceState(null, "", `${window.location.pathname}${search}${window.location.hash}`);
}

function scheduleTextFilter() {
  clearTimeout(textTimer);
  textTimer = setTimeout(runTextFilter, TEXT_FILTER_DEBOUNCE_MS);
}

/** Ask the board which cards hold the text (GET /tasks?q=); the newest question wins. */
async function runTextFilter() {
  const path = textQuery(state.projectId, filter);
  const ticket = ++textTicket;
  $("#filter-error").textContent = "";
  if (path === null) {
    textMatches = null;
    applyFilter();
    return;
  }
  try {
    const items = await api.all(path);
    if (ticket !== textTicket) return;
    textMatches = new Set(items.map((task) => task.id));
  } catch (error) {
    if (ticket !== textTicket) return;
    textMatches = new Set();
    $("#filter-error").textContent = `${error.code}: ${error.message}`;
  }
  applyFilter();
}

function readFilterForm() {
  const form = $("#filter");
  const next = {};
  for (const name of Object.keys(EMPTY_FILTER)) next[name] = (form.elements[name].value || "").trim();
  next.label = next.label.toLowerCase();
  return next;
}

function fillFilterForm() {
  const form = $("#filter");
  for (const name of Object.keys(EMPTY_FILTER)) if (form.elements[name].value !== filter[name]) form.elements[name].value = filter[name];
}

function onFilterInput() {
  const next = readFilterForm();
  const textChanged = next.q !== filter.q;
  filter = next;
  writeUrl();
  if (textChanged) {
    textMatches = null;
    scheduleTextFilter();
  }
  applyFilter();
}

/** The labels and assignees of the shown project, offered as the bar's suggestions. */
function fillSuggestions() {
  const labels = new Set();
  const assignees = new Set();
  for (const task of state.tasks.values()) {
    if (task.project_id !== state.projectId) continue;
    for (const name of task.labels) labels.add(name);
    if (task.assignee_id) assignees.add(task.assignee_id);
  }
  $("#filter-labels").replaceChildren(...[...labels].sort().map((value) => h("option", { value })));
  $("#filter-assignees").replaceChildren(...[...assignees].sort().map((value) => h("option", { value })));
}

// -- the shortcut sheet ----------------------------------------------------------------------------

function renderShortcuts() {
  const section = (scope, title) =>
    h("section", {}, h("h3", {}, title), h("dl", { class: "shortcut-list" },
      SHORTCUTS.filter((s) => s.scope === scope).map((s) => [h("dt", {}, s.keys.map((key) => (key === "…" ? " … " : h("kbd", {}, key)))), h("dd", {}, s.text)])));
  $("#shortcuts-table").replaceChildren(section("page", "Anywhere"), section("card", "On a card"));
}

function toggleShortcuts() {
  const sheet = $("#shortcuts");
  if (sheet.open) sheet.close();
  else sheet.showModal();
}

async function backfill() {
  const page = await api.get(`/activities?order=desc&limit=${BACKFILL_LIMIT}`);
  ledger.reset(page.items);
  for (const row of page.items) {
    if (row.event === "task_created" && row.changes && row.changes.identifier) identifiers.set(row.task_id, row.changes.identifier);
  }
}

function renderProjects() {
  const select = $("#project");
  const options = state.projects.map((project) => h("option", { value: project.id, selected: project.id === state.projectId }, `${project.name || project.id} (${project.prefix || project.id.toUpperCase()})`));
  select.replaceChildren(...options, h("option", { value: "__new__" }, "New project…"));
  if (state.projectId) select.value = state.projectId;
  $("#empty").hidden = state.projects.length > 0;
  $("#board").hidden = state.projects.length === 0;
  $("#new-task").disabled = state.projects.length === 0;
  document.title = state.projectId ? `${state.projectId} · Taskloom` : "Taskloom";
}

async function reloadLists() {
  try {
    await loadProjects();
    // Card reads may land while this list is read: merge, never go back to an older card.
    await loadTasks({ replace: false });
    view.renderAll(state);
    fillSuggestions();
    applyFilter();
    scheduleFeed();
  } catch (error) {
    console.warn("reloading lists failed", error);
  }
}

/** The stream asks for a full (re)load: first load, a new board, a useless cursor, resync. */
async function seed(meta, reason) {
  refresher.cancel();
  const changed = boardId !== null && boardId !== meta.board_id;
  boardId = meta.board_id;
  if (changed) {
    state.tasks.clear();
    state.projectId = null;
  }
  await loadProjects();
  await loadTasks();
  // Without a stored seenAt this board has never been read here: start with nothing unread.
  if (recall(seenKey(boardId)) === null) remember(seenKey(boardId), String(meta.revision));
  await backfill();
  view.renderAll(state);
  fillSuggestions();
  applyFilter();
  renderFeed();
  if (drawer.taskId !== null) {
    // No frame may ever say what changed (a cursor under the floor): the drawer follows the card
    // as just read, as it does after a card read: its head and forms, or closed once it is off
    // the board (archived meanwhile, or gone).
    const open = changed ? null : state.tasks.get(drawer.taskId);
    if (open && visible(open, state.projectId)) {
      drawer.taskUpdated(open);
      drawer.refreshTabs(drawer.taskId, ["*"]);
    } else {
      drawer.close();
      if (open && open.archived_at) toast(`${open.identifier} was archived.`);
    }
  }
  if (reason !== "initial" && reason !== "resync") toast(reason === "board_changed" ? "This is a different board now: reloaded." : `Reloaded the board (${reason}).`);
  if (reason === "resync") toast("Resynced with the board.");
}

// -- conditions (conditions.js) ----------------------------------------------------------------

/** What holds now, from GET /breaches: after every (re)connect, signals missed meanwhile are gone. */
async function readBreaches() {
  const projectId = state.projectId;
  if (projectId === null) return;
  conditions.beginCatchUp();
  try {
    const page = await api.get(`/breaches?project=${q(projectId)}`);
    if (projectId !== state.projectId) return;
    conditions.loadBreaches(page.items);
    view.renderAll(state);
  } catch (error) {
    conditions.catchingUp = null;
    console.warn("reading /breaches failed", error);
  }
}

function onSignal(signal) {
  const changed = conditions.applySignal(signal);
  if (changed.columns.size || changed.tasks.size) view.renderAll(state);
}

// -- live ---------------------------------------------------------------------------------------

const refresher = new Refresher({
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout: (id) => clearTimeout(id),
  fetchTask: async (taskId) => {
    try {
      return await api.get(`/tasks/${q(taskId)}`);
    } catch (error) {
      if (error instanceof ApiError && error.status === 404) return null;
      throw error;
    }
  },
  applyTask,
  refreshTabs: (taskId, tabs) => drawer.refreshTabs(taskId, tabs),
  reloadLists,
  warn: (message) => console.warn(message),
});

function onFrame(activity) {
  // A parent link added or removed changes the epic's progress.
  if ((activity.event === "relation_added" || activity.event === "relation_removed") && activity.changes && activity.changes.type === "parent" && activity.changes.source) {
    loadEpic(activity.changes.source);
  }
  if (activity.event === "task_created" && activity.changes && activity.changes.identifier) identifiers.set(activity.task_id, activity.changes.identifier);
  refresher.handle(activity);
  if (ledger.add(activity)) scheduleFeed();
  const condition = signalOfRow(activity); // a persisted condition: the same news as its signal
  if (condition) onSignal(condition);
}

function onState(next, detail = {}) {
  const indicator = $("#connection");
  indicator.dataset.state = next;
  $(".connection-label", indicator).textContent = STATE_LABELS[next] || next;
  indicator.title = next === "live" ? "Changes appear as they happen" : next === "closed" ? "Not following the board" : "Trying to reach the board";
  if (detail.reason === "unauthorized") showLogin();
}

const live = new LiveStream({
  EventSource: window.EventSource,
  fetch: (...args) => window.fetch(...args),
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout: (id) => clearTimeout(id),
  onSeed: seed,
  onFrame,
  onState,
  onSignal,
  onOpen: readBreaches,
  log: (...args) => console.info("[live]", ...args),
});

function showLogin() {
  $("#login").hidden = false;
  $("#app").setAttribute("aria-hidden", "true");
}

/** End the session on the board (its cookie is refused from now on), then say how to come back. */
async function logOut() {
  const button = $("#logout");
  button.disabled = true;
  try {
    await api.post("/logout");
  } catch (error) {
    // A session that already expired is as logged out as it gets; anything else is a real failure.
    if (!(error instanceof ApiError && error.status === 401)) {
      button.disabled = false;
      toast(`Could not log out: ${error.message}`, "error");
      return;
    }
  }
  live.close();
  window.location.replace(LOGGED_OUT_PAGE);
}

// -- dialogs ------------------------------------------------------------------------------------

function openCreate() {
  if (!state.projectId) return;
  const dialog = $("#create-dialog");
  const form = $("form", dialog);
  form.reset();
  $(".form-error", form).textContent = "";
  $("#create-project-name").textContent = state.projectId;
  dialog.showModal();
  form.elements.title.focus();
}

async function submitCreate(event) {
  event.preventDefault();
  const form = event.target;
  const values = formValues(form);
  const body = { project: state.projectId, title: values.title || "" };
  for (const key of ["description", "priority", "kind", "status"]) if (values[key]) body[key] = values[key];
  if (values.labels) body.labels = values.labels.split(",").map((name) => name.trim()).filter(Boolean);
  if (values.assignee_id) {
    body.assignee_id = values.assignee_id;
    body.assignee_kind = values.assignee_kind || "human";
  }
  const button = $("button[type=submit]", form);
  button.disabled = true;
  try {
    const task = await api.post("/tasks", body);
    applyTask(task.id, task);
    $("#create-dialog").close();
    view.focusCard(task.id);
    toast(`Created ${task.identifier}.`);
  } catch (error) {
    $(".form-error", form).textContent = `${error.code}: ${error.message}`;
  } finally {
    button.disabled = false;
  }
}

function openProjectDialog() {
  const dialog = $("#project-dialog");
  $("form", dialog).reset();
  $(".form-error", dialog).textContent = "";
  dialog.showModal();
}

async function submitProject(event) {
  event.preventDefault();
  const form = event.target;
  const values = formValues(form);
  try {
    const project = await api.post("/projects", { id: values.id || "", name: values.name || values.id || "" });
    $("#project-dialog").close();
    await switchProject(project.id);
  } catch (error) {
    $(".form-error", form).textContent = `${error.code}: ${error.message}`;
  }
}

async function switchProject(projectId) {
  drawer.close();
  state.projectId = projectId;
  remember(PROJECT_KEY, projectId);
  writeUrl();
  await loadProjects();
  await loadTasks();
  view.renderAll(state);
  fillSuggestions();
  applyFilter();
  renderFeed();
  await readBreaches();
}

// -- wiring -------------------------------------------------------------------------------------

function wire() {
  $("#project").addEventListener("change", (event) => {
    if (event.target.value === "__new__") {
      event.target.value = state.projectId || "";
      openProjectDialog();
    } else {
      switchProject(event.target.value);
    }
  });
  $("#new-task").addEventListener("click", openCreate);
  $("#empty-create").addEventListener("click", openProjectDialog);
  $("#create-form").addEventListener("submit", submitCreate);
  $("#project-form").addEventListener("submit", submitProject);
  for (const button of document.querySelectorAll("[data-close-dialog]")) {
    button.addEventListener("click", () => button.closest("dialog").close());
  }
  $("#resync").addEventListener("click", () => live.resync());
  $("#logout").addEventListener("click", logOut);
  $("#feed-toggle").addEventListener("click", () => setFeedOpen($("#feed").hidden));
  $("#feed-close").addEventListener("click", () => setFeedOpen(false));
  const actor = $("#actor");
  actor.value = api.actor.id;
  actor.addEventListener("change", () => {
    api.setActor(actor.value.trim());
    actor.value = api.actor.id;
    renderFeed();
  });
  document.addEventListener("visibilitychange", renderFeed);
  setInterval(renderFeed, 30000); // keep "n minutes ago" honest
  document.addEventListener("keydown", onPageKey);
  $("#help").addEventListener("click", toggleShortcuts);
  renderShortcuts();
  const bar = $("#filter");
  bar.addEventListener("input", onFilterInput);
  bar.addEventListener("change", onFilterInput);
  bar.addEventListener("submit", (event) => event.preventDefault());
  bar.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && event.target.closest("input")) {
      event.target.blur();
      view.firstCard()?.focus();
    }
  });
  $("#filter-clear").addEventListener("click", () => {
    bar.reset();
    onFilterInput();
  });
  const wide = window.innerWidth >= WIDE_WINDOW;
  const folded = recall(FOLDED_KEY);
  const foldedSet = new Set((folded || "").split(",").filter(Boolean));
  for (const status of ["done", "canceled"]) view.setCollapsed(status, foldedSet.has(status));
  view.onCollapse = (status, collapsed) => {
    view.setCollapsed(status, collapsed);
    if (collapsed) foldedSet.add(status);
    else foldedSet.delete(status);
    remember(FOLDED_KEY, [...foldedSet].join(","));
  };
  const stored = recall(FEED_OPEN_KEY);
  setFeedOpen(stored === null ? wide : stored === "1");
}

function onPageKey(event) {
  const typing = event.target.closest && event.target.closest("input, textarea, select, [contenteditable]");
  const action = shortcutAction(event, "page");
  if (action === "escape") {
    if (document.querySelector("dialog[open]")) return; // the dialog closes itself
    if (drawer.taskId !== null) drawer.close();
    return;
  }
  if (typing || !action || document.querySelector("dialog[open]:not(#shortcuts)")) return;
  event.preventDefault();
  if (action === "help") toggleShortcuts();
  else if ($("#shortcuts").open) return;
  else if (action === "filter") $("#filter-q").focus();
  else if (action === "create") openCreate();
  else if (action === "feed") setFeedOpen($("#feed").hidden);
  else if (action === "board") view.firstCard()?.focus();
}

const { filter: linked, project: urlProject } = parseFilter(window.location.search);
filter = linked;
fillFilterForm();
wire();
window.taskloom = { state, live, ledger, drawer, view, conditions };
live.start();
