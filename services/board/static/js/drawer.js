// The card drawer: a head, seven tabs, and the forms for what a person does to a card.
// Each tab keeps its list and its form apart, so a live refresh never eats what you typed.
// Each tab lives in its own module (drawer-<tab>.js); TAB_LOADERS names them, and nothing else
// decides which code a tab name runs.

import { q } from "./api.js";
import { $, fragment, h } from "./dom.js";
import * as activity from "./drawer-activity.js";
import * as attachments from "./drawer-attachments.js";
import * as comments from "./drawer-comments.js";
import * as details from "./drawer-details.js";
import { errorText, statusPill } from "./drawer-parts.js";
import * as relations from "./drawer-relations.js";
import * as reports from "./drawer-reports.js";
import * as sessions from "./drawer-sessions.js";

export const TABS = ["details", "comments", "relations", "reports", "sessions", "attachments", "activity"];
const TAB_LABELS = {
  details: "Details",
  comments: "Comments",
  relations: "Relations",
  reports: "Reports",
  sessions: "Sessions",
  attachments: "Attachments",
  activity: "Activity",
};
/** Tab name → its module's loader, `load(drawer, taskId, panel)` → the tab's content. */
export const TAB_LOADERS = Object.freeze({
  details: details.load,
  comments: comments.load,
  relations: relations.load,
  reports: reports.load,
  sessions: sessions.load,
  attachments: attachments.load,
  activity: activity.load,
});

/** The loader of `tab`; a name that is not a tab of the drawer is a bug, refused loudly. */
export function tabLoader(tab) {
  // Own keys only: "constructor" or "__proto__" must not reach Object's prototype.
  if (typeof tab !== "string" || !Object.hasOwn(TAB_LOADERS, tab)) {
    throw new Error(`unknown drawer tab: ${JSON.stringify(tab)} (tabs: ${TABS.join(", ")})`);
  }
  return TAB_LOADERS[tab];
}

export class Drawer {
  constructor(root, { api, state, onTask, onClose, toast }) {
    this.root = root;
    this.api = api;
    this.state = state;
    this.onTask = onTask; // (task) => void: a write answered with the fresh task
    this.onClose = onClose;
    this.toast = toast;
    this.taskId = null;
    this.tab = "details";
    this.generation = 0;
    this.tabState = new Map(); // tab -> { loaded, stale }
    this.actionsFor = null;
    this.acceptance = null;
    this.build();
  }

  build() {
    this.identifierEl = h("span", { class: "identifier" });
    this.statusEl = h("span", {});
    this.titleEl = h("h2", { id: "drawer-title", class: "drawer-title" });
    this.tabButtons = new Map();
    this.panels = new Map();
    const tablist = h("div", { class: "tabs", role: "tablist", "aria-label": "Card sections" });
    tablist.addEventListener("keydown", (event) => this.onTabKey(event));
    for (const tab of TABS) {
      const button = h(
        "button",
        { type: "button", role: "tab", id: `tab-${tab}`, "aria-controls": `panel-${tab}`, "aria-selected": "false", tabindex: "-1", dataset: { tab }, onclick: () => this.show(tab) },
        TAB_LABELS[tab],
      );
      this.tabButtons.set(tab, button);
      tablist.append(button);
      const panel = h("section", { class: "panel", role: "tabpanel", id: `panel-${tab}`, "aria-labelledby": `tab-${tab}`, tabindex: "0", hidden: true, dataset: { tab } }, h("div", { class: "tab-body" }), h("div", { class: "tab-form" }));
      this.panels.set(tab, panel);
    }
    const close = h("button", { type: "button", class: "icon-button close", "aria-label": "Close the card", title: "Close (Esc)", onclick: () => this.close() }, "×");
    this.root.replaceChildren(
      h("header", { class: "drawer-head" }, h("div", { class: "drawer-meta" }, this.identifierEl, this.statusEl), this.titleEl, close),
      tablist,
      h("div", { class: "panels" }, ...this.panels.values()),
    );
    this.root.addEventListener("keydown", (event) => {
      if (event.key === "Escape") {
        event.stopPropagation();
        this.close();
      }
    });
  }

  isOpenOn(taskId) {
    return this.taskId !== null && this.taskId === taskId;
  }

  open(taskId, tab = "details") {
    const task = this.state.tasks.get(taskId);
    if (!task) return;
    this.generation += 1;
    this.taskId = taskId;
    this.tabState = new Map(TABS.map((name) => [name, { loaded: false, stale: true }]));
    this.actionsFor = null;
    this.acceptance = null;
    for (const panel of this.panels.values()) {
      $(".tab-body", panel).replaceChildren();
      const form = $(".tab-form", panel);
      form.replaceChildren();
      delete form.dataset.mode;
    }
    this.renderHead(task);
    this.root.hidden = false;
    this.root.dataset.taskId = taskId;
    document.body.classList.add("drawer-open");
    this.show(tab, { focus: false });
    this.titleEl.setAttribute("tabindex", "-1");
    this.titleEl.focus();
  }

  close() {
    if (this.taskId === null) return;
    const taskId = this.taskId;
    this.generation += 1;
    this.taskId = null;
    this.root.hidden = true;
    delete this.root.dataset.taskId;
    document.body.classList.remove("drawer-open");
    this.onClose(taskId);
  }

  renderHead(task) {
    if (this.identifierEl.textContent !== task.identifier) this.identifierEl.textContent = task.identifier;
    if (this.titleEl.textContent !== task.title) this.titleEl.textContent = task.title;
    if (this.statusEl.dataset.status !== task.status) {
      this.statusEl.dataset.status = task.status;
      this.statusEl.replaceChildren(statusPill(task.status));
    }
  }

  show(tab, { focus = true } = {}) {
    this.tab = tab;
    for (const [name, button] of this.tabButtons) {
      const selected = name === tab;
      button.setAttribute("aria-selected", String(selected));
      button.tabIndex = selected ? 0 : -1;
      this.panels.get(name).hidden = !selected;
    }
    if (focus) this.tabButtons.get(tab).focus();
    this.root.dataset.tab = tab;
    const status = this.tabState.get(tab);
    if (status && (status.stale || !status.loaded)) this.load(tab);
  }

  onTabKey(event) {
    const index = TABS.indexOf(this.tab);
    const moves = { ArrowRight: index + 1, ArrowLeft: index - 1, Home: 0, End: TABS.length - 1 };
    if (!(event.key in moves)) return;
    event.preventDefault();
    this.show(TABS[(moves[event.key] + TABS.length) % TABS.length]);
  }

  /** The card read of the open task landed: patch the head and the details. */
  taskUpdated(task) {
    if (!this.isOpenOn(task.id)) return;
    this.renderHead(task);
    const commentArea = $(".tab-form", this.panels.get("comments"));
    if (commentArea.dataset.mode) comments.placeCommentForm(this, task, commentArea); // once the tab has drawn its form
    this.markStale(["details"]);
  }

  /** Live routing: these tabs of this task are out of date. */
  refreshTabs(taskId, tabs) {
    if (!this.isOpenOn(taskId)) return;
    if (tabs.includes("*")) {
      this.acceptance = null;
      this.markStale(TABS);
      return;
    }
    if (tabs.includes("acceptance")) {
      this.acceptance = null;
      this.markStale(["details"]);
    }
    // "details" follows the card read (taskUpdated), so it costs no read of its own here.
    this.markStale(tabs.filter((tab) => tab !== "details" && tab !== "acceptance"));
  }

  markStale(tabs) {
    for (const tab of tabs) {
      const status = this.tabState.get(tab);
      if (status) status.stale = true;
    }
    if (tabs.includes(this.tab)) this.load(this.tab);
  }

  async load(tab) {
    const loader = tabLoader(tab); // before any state changes: an unknown tab touches nothing
    const status = this.tabState.get(tab);
    status.stale = false;
    // Newest read wins: a slower, older read of the same tab must not overwrite a newer one.
    const ticket = (status.ticket = (status.ticket || 0) + 1);
    const generation = this.generation;
    const taskId = this.taskId;
    const panel = this.panels.get(tab);
    const body = $(".tab-body", panel);
    if (!status.loaded) body.replaceChildren(h("p", { class: "muted" }, "Loading…"));
    panel.setAttribute("aria-busy", "true");
    try {
      const content = await loader(this, taskId, panel);
      if (generation !== this.generation || ticket !== status.ticket) return; // superseded
      if (content) body.replaceChildren(fragment(content));
      status.loaded = true;
    } catch (error) {
      if (generation !== this.generation || ticket !== status.ticket) return;
      body.replaceChildren(h("p", { class: "form-error", role: "alert" }, `Could not load ${TAB_LABELS[tab].toLowerCase()}: ${errorText(error)}`));
    } finally {
      panel.removeAttribute("aria-busy");
    }
  }

  task() {
    return this.state.tasks.get(this.taskId);
  }

  ref() {
    return q(this.taskId);
  }

  /** Run a write from a form: disable it, show the refusal inline, hand the fresh task on. */
  async submit(form, write) {
    const error = $(".form-error", form);
    const button = $("button[type=submit]", form);
    error.textContent = "";
    button.disabled = true;
    try {
      const result = await write();
      if (result && result.id && result.identifier) this.onTask(result);
      return true;
    } catch (failure) {
      error.textContent = errorText(failure);
      return false;
    } finally {
      button.disabled = false;
    }
  }
}
