// Working the board from the page: Claim and Release buttons, drag and drop between columns,
// the keyboard's drops, the dialog a drop into review / done / back from a terminal column needs,
// and the board's refusal written on the card itself. What a drop *means* is drag.js (pure);
// this module only listens, asks and shows.

import { STATUS_LABELS } from "./board-state.js";
import { h } from "./dom.js";
import { DIALOG_INTENTS, claimable, dropIntent, keyboardTarget, refusalText, releasable, releaseRequest, requestsFor } from "./drag.js";
import { epicProgress, progressLabel } from "./epics.js";
import { shortcutAction } from "./shortcuts.js";

const DRAG_TYPE = "application/x-taskloom-task";
/** How long a refusal stays on a card (it also goes at the next action on that card). */
const REFUSAL_MS = 12000;

export class BoardWork {
  constructor(view, { api, state, applyTask, epics, dialog, toast }) {
    this.view = view;
    this.api = api;
    this.state = state;
    this.applyTask = applyTask; // (task) => void: a write answered with the fresh task
    this.epics = epics; // Map epicId -> child ids
    this.dialog = dialog; // the <dialog> a drop's words are asked in
    this.toast = toast;
    this.refusals = new Map(); // taskId -> { text, timer }
    this.busy = new Set(); // taskIds with a write in flight
    this.dragging = null;
    view.decorate = (el, task) => this.decorate(el, task);
    this.listen(view.root);
  }

  // -- what a card carries besides its summary ---------------------------------------------------

  /** The card's work strip (epic progress, Claim/Release, the refusal); rebuilt when it changed. */
  decorate(el, task) {
    el.draggable = !task.archived_at;
    const me = this.api.actor;
    const progress = task.kind === "epic" ? progressLabel(epicProgress(this.epics.get(task.id), this.state.tasks)) : null;
    const refusal = this.refusals.get(task.id)?.text || null;
    const signature = JSON.stringify([claimable(task), releasable(task, me), progress, refusal, this.busy.has(task.id)]);
    const current = el.querySelector(":scope > .card-work");
    if (current && current.dataset.signature === signature) return;
    const strip = h(
      "div",
      { class: "card-work", dataset: { signature } },
      progress
        ? h(
            "div",
            { class: "epic-progress", title: `${progress.text} (canceled children are not counted)` },
            h("span", { class: "epic-progress-text" }, progress.text),
            h("span", { class: "epic-bar", role: "progressbar", "aria-label": `${task.identifier} progress`, "aria-valuemin": "0", "aria-valuemax": "100", "aria-valuenow": String(progress.percent) },
              h("span", { class: "epic-bar-fill", style: { width: `${progress.percent}%` } })),
          )
        : null,
      claimable(task)
        ? h("button", { type: "button", class: "card-action claim", disabled: this.busy.has(task.id), title: `Claim as ${me.id} (c)`, onclick: () => this.claim(task.id) }, "Claim")
        : null,
      releasable(task, me)
        ? h("button", { type: "button", class: "card-action release", disabled: this.busy.has(task.id), title: "Back to To do (r)", onclick: () => this.release(task.id) }, "Release")
        : null,
      refusal ? h("p", { class: "card-refusal", role: "alert" }, refusal) : null,
    );
    if (current) current.replaceWith(strip);
    else el.append(strip);
  }

  redecorate(taskId) {
    const card = this.view.cards.get(taskId);
    const task = this.state.tasks.get(taskId);
    if (card && task) this.decorate(card.el, task);
  }

  refuse(taskId, error) {
    const held = this.refusals.get(taskId);
    if (held) clearTimeout(held.timer);
    const timer = setTimeout(() => {
      this.refusals.delete(taskId);
      this.redecorate(taskId);
    }, REFUSAL_MS);
    this.refusals.set(taskId, { text: refusalText(error), timer });
    this.redecorate(taskId);
  }

  clearRefusal(taskId) {
    const held = this.refusals.get(taskId);
    if (!held) return;
    clearTimeout(held.timer);
    this.refusals.delete(taskId);
  }

  // -- actions -----------------------------------------------------------------------------------

  claim(taskId) {
    const task = this.state.tasks.get(taskId);
    if (task) return this.run(task, requestsFor({ action: "claim" }, task));
    return null;
  }

  release(taskId) {
    const task = this.state.tasks.get(taskId);
    if (task) return this.run(task, [releaseRequest(task)]);
    return null;
  }

  /** A drop (pointer or keyboard) of `taskId` on the column `to`. */
  async drop(taskId, to) {
    const task = this.state.tasks.get(taskId);
    if (!task) return;
    const intent = dropIntent(task, to);
    if (intent.action === "none") return;
    if (!DIALOG_INTENTS.has(intent.action)) {
      await this.run(task, requestsFor(intent, task));
      return;
    }
    this.ask(task, intent);
  }

  /** Send the requests in order; the last answer that is a task is applied, a refusal shown. */
  async run(task, requests, { onError = (error) => this.refuse(task.id, error) } = {}) {
    this.clearRefusal(task.id);
    this.busy.add(task.id);
    this.redecorate(task.id);
    try {
      let fresh = null;
      for (const request of requests) {
        const answer = await this.api.request(request.method, request.path, { body: request.body });
        if (answer && answer.id === task.id && answer.identifier) fresh = answer;
      }
      if (fresh) this.applyTask(fresh);
      return true;
    } catch (error) {
      onError(error);
      return false;
    } finally {
      this.busy.delete(task.id);
      this.redecorate(task.id);
    }
  }

  // -- the dialog a drop needs words for ---------------------------------------------------------

  ask(task, intent) {
    const dialog = this.dialog;
    const form = dialog.querySelector("form");
    const title = { deliver: `Deliver ${task.identifier} for review`, approve: `Approve ${task.identifier}`, reopen: `Reopen ${task.identifier}` }[intent.action];
    const error = h("p", { class: "form-error", role: "alert" });
    const fields = {
      deliver: () => [
        h("p", { class: "muted" }, "Into review goes with a delivery report for this round, or without one for a stated reason."),
        h("label", { class: "choice" }, h("input", { type: "radio", name: "how", value: "report", checked: true }), h("span", {}, "With a report (markdown: ## Summary, ## Changes, ## Verification)")),
        h("label", {}, h("span", { class: "visually-hidden" }, "Report"), h("textarea", { name: "report", rows: "8", placeholder: "## Summary\n\n## Changes\n\n## Verification\n" })),
        h("label", { class: "choice" }, h("input", { type: "radio", name: "how", value: "waiver" }), h("span", {}, "Without a report")),
        h("label", {}, h("span", {}, "Why no report (at least 8 characters)"), h("input", { name: "waiver", autocomplete: "off" })),
      ],
      approve: () => [
        h("p", { class: "muted" }, "Done needs an approving comment from someone other than who delivered it."),
        h("label", {}, h("span", {}, "Approval note"), h("textarea", { name: "note", rows: "3", placeholder: "Looks good." })),
      ],
      reopen: () => [h("label", {}, h("span", {}, "Why reopen it (at least 8 characters)"), h("input", { name: "reason", required: true, autocomplete: "off" }))],
    }[intent.action]();
    const submit = h("button", { type: "submit", class: "primary" }, { deliver: "Deliver", approve: "Approve and mark done", reopen: "Reopen" }[intent.action]);
    form.replaceChildren(
      h("h2", { id: "drop-title" }, title),
      h("p", { class: "muted" }, `${STATUS_LABELS[intent.from]} → ${STATUS_LABELS[intent.to]}`),
      ...fields,
      error,
      h("div", { class: "row end" }, h("button", { type: "button", onclick: () => dialog.close() }, "Cancel"), submit),
    );
    form.onsubmit = async (event) => {
      event.preventDefault();
      const values = Object.fromEntries(new FormData(form).entries());
      const input = intent.action === "deliver" ? (values.how === "waiver" ? { waiver: values.waiver || "" } : { report: values.report || "" }) : values;
      if (intent.action === "deliver" && values.how !== "waiver" && !(values.report || "").trim()) {
        error.textContent = "Write the report, or choose to deliver without one.";
        return;
      }
      const current = this.state.tasks.get(task.id) || task;
      if (intent.action === "approve" && current.acceptance_mode === "review" && current.delivered_by === this.api.actor.id) {
        // Checked before writing: the confirm comment would land and the move be refused.
        error.textContent = `APPROVAL_REQUIRED: ${current.identifier} was delivered by ${current.delivered_by}; someone else must approve it.`;
        return;
      }
      submit.disabled = true;
      const ok = await this.run(current, requestsFor(intent, current, input), { onError: (failure) => (error.textContent = refusalText(failure)) });
      submit.disabled = false;
      if (ok) dialog.close();
    };
    dialog.showModal();
    const first = form.querySelector("textarea, input:not([type=radio])");
    if (first) first.focus();
  }

  // -- pointer and keyboard ----------------------------------------------------------------------

  listen(root) {
    root.addEventListener("dragstart", (event) => {
      const card = event.target.closest && event.target.closest(".card");
      if (!card) return;
      this.dragging = card.dataset.id;
      event.dataTransfer.effectAllowed = "move";
      event.dataTransfer.setData(DRAG_TYPE, card.dataset.id);
      event.dataTransfer.setData("text/plain", card.dataset.identifier);
      card.classList.add("dragging");
    });
    root.addEventListener("dragend", (event) => {
      const card = event.target.closest && event.target.closest(".card");
      if (card) card.classList.remove("dragging");
      this.dragging = null;
      this.markColumn(null);
    });
    root.addEventListener("dragover", (event) => {
      const column = event.target.closest && event.target.closest(".column");
      if (!column || !this.dragging) return;
      event.preventDefault(); // every column takes the drop; the board decides what it means
      const task = this.state.tasks.get(this.dragging);
      const intent = task ? dropIntent(task, column.dataset.status) : null;
      event.dataTransfer.dropEffect = "move";
      this.markColumn(column, intent && intent.legal ? "legal" : "illegal");
    });
    root.addEventListener("dragleave", (event) => {
      const column = event.target.closest && event.target.closest(".column");
      if (column && !column.contains(event.relatedTarget)) this.markColumn(null);
    });
    root.addEventListener("drop", (event) => {
      const column = event.target.closest && event.target.closest(".column");
      const taskId = (event.dataTransfer && event.dataTransfer.getData(DRAG_TYPE)) || this.dragging;
      this.markColumn(null);
      if (!column || !taskId) return;
      event.preventDefault();
      this.dragging = null;
      this.drop(taskId, column.dataset.status);
    });
    root.addEventListener("keydown", (event) => {
      const card = event.target.closest && event.target.closest(".card");
      if (!card || event.target.closest("input, textarea, select")) return;
      const action = shortcutAction(event, "card");
      if (!action) return;
      event.preventDefault();
      event.stopPropagation();
      const taskId = card.dataset.id;
      if (action === "claim") this.claim(taskId);
      else if (action === "release") this.release(taskId);
      else {
        const to = keyboardTarget(card.dataset.status, event);
        if (to) this.drop(taskId, to);
      }
    });
  }

  markColumn(column, verdict) {
    for (const other of this.view.root.querySelectorAll(".column[data-drop]")) if (other !== column) delete other.dataset.drop;
    if (column && column.dataset.drop !== verdict) column.dataset.drop = verdict;
  }
}
