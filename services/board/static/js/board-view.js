// The columns and their cards. A card's element is kept per task and touched only when what it
// shows changed (cardSignature), so a refresh that changes nothing visible mutates nothing.

import { STATUSES, STATUS_LABELS, byPriority, cardSignature } from "./board-state.js";
import { h, hue, initials } from "./dom.js";
import { CARD_TEXT_MAX, CARD_TITLE_MAX, capText } from "./text-cap.js";

const PRIORITY_LABELS = { urgent: "Urgent", high: "High", medium: "Medium", low: "Low" };
const KIND_MARKS = { epic: "Epic", bug: "Bug", review: "Review" };
/** Terminal columns fold to a strip, so all eight fit a laptop's width (docs/ui.md). */
const COLLAPSIBLE = new Set(["done", "canceled"]);

export class BoardView {
  /** Hooks set by the page: the work strip on each card (board-work.js), the filter bar's test. */
  decorate = null;
  filter = null;

  constructor(root, { onOpen, conditions = null }) {
    this.root = root;
    this.onOpen = onOpen;
    this.conditions = conditions; // a ConditionState (conditions.js): headers and card markers
    this.cards = new Map(); // taskId -> { el, signature }
    this.lists = new Map(); // status -> <ol>
    this.counts = new Map(); // status -> <span>
    this.build();
    root.addEventListener("keydown", (event) => this.onKey(event));
  }

  build() {
    const columns = STATUSES.map((status) => {
      const list = h("ol", { class: "cards", "aria-labelledby": `col-${status}` });
      const count = h("span", { class: "count", "aria-label": "cards" }, "0");
      this.lists.set(status, list);
      this.counts.set(status, count);
      return h(
        "section",
        { class: "column", dataset: { status }, "aria-labelledby": `col-${status}` },
        h("header", { class: "column-head" }, h("h2", { id: `col-${status}` }, STATUS_LABELS[status]), count, COLLAPSIBLE.has(status) ? this.collapseButton(status) : null),
        list,
        h("p", { class: "empty-column", "aria-hidden": "true" }, "Nothing here"),
      );
    });
    this.root.replaceChildren(...columns);
  }

  collapseButton(status) {
    return h("button", {
      type: "button", class: "icon-button collapse", "aria-expanded": "true", "aria-controls": `col-${status}`,
      title: `Fold or unfold ${STATUS_LABELS[status]}`, onclick: () => this.onCollapse(status, !this.isCollapsed(status)),
    }, h("span", { "aria-hidden": "true" }, "⇔"), h("span", { class: "visually-hidden" }, `Fold ${STATUS_LABELS[status]}`));
  }

  /** Set by the page: remember a fold (the page keeps it per browser). */
  onCollapse = (status, collapsed) => this.setCollapsed(status, collapsed);

  isCollapsed(status) {
    return this.lists.get(status).closest(".column").dataset.collapsed === "true";
  }

  /** A folded terminal column is a narrow strip (name and count) that still takes drops. */
  setCollapsed(status, collapsed) {
    const column = this.lists.get(status).closest(".column");
    column.dataset.collapsed = String(collapsed);
    const button = column.querySelector(".collapse");
    if (button) button.setAttribute("aria-expanded", String(!collapsed));
  }

  /** Render a whole state (first load, project switch, resync). */
  renderAll(state) {
    const keep = new Set();
    for (const status of STATUSES) {
      const tasks = state.column(status);
      const list = this.lists.get(status);
      const els = tasks.map((task) => {
        keep.add(task.id);
        return this.cardFor(task);
      });
      // Reorder only when the order differs, so an unchanged column is left alone.
      const current = [...list.children];
      if (current.length !== els.length || current.some((el, i) => el !== els[i])) list.replaceChildren(...els);
      this.setCount(status, tasks.length);
    }
    for (const [id, card] of this.cards) {
      if (!keep.has(id)) {
        card.el.remove();
        this.cards.delete(id);
      }
    }
  }

  setCount(status, n) {
    const count = this.counts.get(status);
    const header = this.conditions ? this.conditions.header(status, n) : { text: String(n), label: "cards", warning: false };
    if (count.textContent !== header.text) count.textContent = header.text;
    const column = count.closest(".column");
    const empty = n === 0 ? "true" : "false";
    if (column.dataset.empty !== empty) column.dataset.empty = empty;
    // conditions.js: "count / limit", and a warning while wip_exceeded holds.
    const wip = header.warning ? "exceeded" : "";
    if ((column.dataset.wip || "") !== wip) column.dataset.wip = wip;
    if (count.getAttribute("aria-label") !== header.label) count.setAttribute("aria-label", header.label);
  }

  /** The element for a task, rebuilt only when its visible signature changed. */
  cardEl(task) {
    const markers = this.conditionMarkers(task);
    const signature = cardSignature(task) + JSON.stringify(markers);
    const known = this.cards.get(task.id);
    if (known && known.signature === signature) return known.el;
    const el = known ? known.el : h("li", { class: "card", dataset: { id: task.id } });
    const hadFocus = known && el.contains(document.activeElement);
    el.dataset.status = task.status;
    el.dataset.identifier = task.identifier;
    el.dataset.priority = task.priority;
    el.replaceChildren(this.cardBody(task, markers));
    this.cards.set(task.id, { el, signature });
    if (hadFocus) el.querySelector("button").focus({ preventScroll: true });
    return el;
  }

  /** conditions.js: the markers a card carries now (dependency-blocked, stale claim). */
  conditionMarkers(task) {
    return this.conditions ? this.conditions.markers(task) : [];
  }

  /** The card's element with what the page adds to it (work strip, filter), both kept current. */
  cardFor(task) {
    const el = this.cardEl(task);
    if (this.decorate) this.decorate(el, task);
    const hidden = Boolean(this.filter && !this.filter(task));
    if (el.hidden !== hidden) el.hidden = hidden;
    return el;
  }

  /** Show only the cards `filter` keeps (null: all of them). */
  setFilter(state, filter) {
    this.filter = filter;
    for (const [id, card] of this.cards) {
      const task = state.tasks.get(id);
      const hidden = Boolean(filter && task && !filter(task));
      if (card.el.hidden !== hidden) card.el.hidden = hidden;
    }
  }

  cardBody(task, markers = []) {
    const marker =
      task.status === "awaiting"
        ? h("p", { class: "marker awaiting" }, h("span", { class: "marker-icon", "aria-hidden": "true" }, "?"), h("span", {}, capText(task.awaiting_reason || "Waiting for an answer", CARD_TEXT_MAX).text))
        : task.status === "blocked"
          ? h("p", { class: "marker blocked" }, h("span", { class: "marker-icon", "aria-hidden": "true" }, "!"), h("span", {}, capText(task.blocked_reason || "Blocked", CARD_TEXT_MAX).text))
          : null;
    const assignee = task.assignee_id
      ? h("span", { class: "avatar", style: { "--hue": hue(task.assignee_id) }, title: `Assignee: ${task.assignee_id}${task.assignee_kind && task.assignee_kind !== "human" ? ` (${task.assignee_kind})` : ""}` }, initials(task.assignee_id))
      : null;
    const label = [
      task.identifier,
      task.title,
      `${PRIORITY_LABELS[task.priority] || task.priority} priority`,
      task.assignee_id ? `assigned to ${task.assignee_id}` : "unassigned",
      task.status === "awaiting" ? "awaiting an answer" : null,
      task.status === "blocked" ? "blocked" : null,
      ...markers.map((m) => m.label),
    ].filter(Boolean).join(", ");
    return h(
      "button",
      { type: "button", class: "card-button", "aria-label": label, onclick: () => this.onOpen(task.id) },
      h(
        "span",
        { class: "card-top" },
        h("span", { class: "identifier", title: task.identifier }, task.identifier),
        KIND_MARKS[task.kind] ? h("span", { class: `kind kind-${task.kind}` }, KIND_MARKS[task.kind]) : null,
        h("span", { class: `priority priority-${task.priority}`, title: `${PRIORITY_LABELS[task.priority]} priority` }, PRIORITY_LABELS[task.priority] || task.priority),
      ),
      h("span", { class: "title" }, capText(task.title, CARD_TITLE_MAX).text),
      marker,
      ...markers.map((m) => h("span", { class: `marker condition condition-${m.kind}`, dataset: { condition: m.kind } }, h("span", { class: "marker-icon", "aria-hidden": "true" }, m.kind === "stale" ? "…" : "←"), h("span", {}, m.label))),
      task.labels.length || assignee
        ? h(
            "span",
            { class: "card-foot" },
            h("span", { class: "labels" }, task.labels.map((name) => h("span", { class: "label", style: { "--hue": hue(name) } }, name))),
            assignee,
          )
        : null,
    );
  }

  /** Apply one task's fresh read; `outcome` comes from BoardState.applyTask. */
  update(state, taskId, task, outcome) {
    if (outcome === "unchanged" || outcome === "stale" || outcome === "elsewhere") return;
    const known = this.cards.get(taskId);
    if (outcome === "removed") {
      if (!known) return;
      const status = known.el.dataset.status;
      known.el.remove();
      this.cards.delete(taskId);
      this.setCount(status, this.lists.get(status).children.length);
      return;
    }
    const oldStatus = known ? known.el.dataset.status : null;
    const el = this.cardFor(task);
    const list = this.lists.get(task.status);
    const siblings = state.column(task.status).filter((other) => other.id !== task.id);
    const next = siblings.find((other) => byPriority(task, other) < 0);
    const before = next ? this.cards.get(next.id)?.el : null;
    const inPlace = el.parentElement === list && (before ? el.nextElementSibling === before : el === list.lastElementChild);
    if (!inPlace) {
      const hadFocus = el.contains(document.activeElement);
      list.insertBefore(el, before || null);
      if (hadFocus) el.querySelector("button").focus({ preventScroll: true });
    }
    if (oldStatus && oldStatus !== task.status) this.setCount(oldStatus, this.lists.get(oldStatus).children.length);
    this.setCount(task.status, list.children.length);
    this.flash(el);
  }

  flash(el) {
    el.classList.remove("flash");
    void el.offsetWidth; // restart the animation
    el.classList.add("flash");
  }

  /** Arrow keys move between cards: up/down in a column, left/right across columns. */
  onKey(event) {
    // Shift+arrows drop the card on the next column (board-work.js); plain arrows move the focus.
    if (event.shiftKey || !["ArrowUp", "ArrowDown", "ArrowLeft", "ArrowRight", "Home", "End"].includes(event.key)) return;
    const card = event.target.closest && event.target.closest(".card");
    if (!card) return;
    const list = card.parentElement;
    const cards = [...list.children].filter((el) => !el.hidden);
    const index = cards.indexOf(card);
    let target = null;
    if (event.key === "ArrowUp") target = cards[index - 1];
    else if (event.key === "ArrowDown") target = cards[index + 1];
    else if (event.key === "Home") target = cards[0];
    else if (event.key === "End") target = cards[cards.length - 1];
    else {
      const step = event.key === "ArrowLeft" ? -1 : 1;
      let at = STATUSES.indexOf(card.dataset.status) + step;
      while (at >= 0 && at < STATUSES.length && !target) {
        const other = [...this.lists.get(STATUSES[at]).children].filter((el) => !el.hidden);
        target = other[Math.min(index, other.length - 1)] || null;
        at += step;
      }
    }
    if (target) {
      event.preventDefault();
      const button = target.querySelector("button");
      button.focus();
      button.scrollIntoView({ block: "nearest", inline: "nearest" });
    }
  }

  focusCard(taskId) {
    const card = this.cards.get(taskId);
    if (card) card.el.querySelector("button").focus();
  }

  firstCard() {
    return this.root.querySelector(".card:not([hidden]) button");
  }
}
