// The drawer's details tab: the card's facts and acceptance, and the forms that move, approve,
// reopen and edit it.

import { STATUS_LABELS, TERMINAL, TRANSITIONS } from "./board-state.js";
import { q } from "./api.js";
import { $, formValues, h, hue } from "./dom.js";
import { statusPill, when, who } from "./drawer-parts.js";
import { markdownBlock } from "./markdown.js";

const PRIORITIES = ["urgent", "high", "medium", "low"];
const KINDS = ["task", "bug", "epic", "review"];

/** The tab's content for the open card (`drawer.load` puts it in the panel's body). */
export async function load(drawer, taskId, panel) {
  const task = drawer.state.tasks.get(taskId);
  if (drawer.acceptance === null) {
    const generation = drawer.generation;
    let acceptance;
    try {
      acceptance = await drawer.api.get(`/tasks/${q(taskId)}/acceptance`);
    } catch {
      acceptance = { items: [] }; // unreadable: show none rather than a broken tab
    }
    if (generation !== drawer.generation) return null; // another card is open now
    drawer.acceptance = acceptance;
  }
  const acceptance = drawer.acceptance;
  if (drawer.actionsFor !== task.status) {
    drawer.actionsFor = task.status;
    const forms = $(".tab-form", panel);
    // The moves on offer follow the new status; an edit the person has typed and not saved stays
    // as typed (saving it then is a version conflict, never an overwrite, and never a lost text).
    forms.replaceChildren(...actions(drawer, task, $("details.edit[data-unsaved=true]", forms)));
  }
  const fact = (label, value) => [h("dt", {}, label), h("dd", {}, value ?? h("span", { class: "muted" }, "—"))];
  const reasons = [
    task.awaiting_reason && h("p", { class: "marker awaiting" }, h("span", { class: "marker-icon", "aria-hidden": "true" }, "?"), `Waiting for an answer: ${task.awaiting_reason}`),
    task.status === "blocked" && task.blocked_reason && h("p", { class: "marker blocked" }, h("span", { class: "marker-icon", "aria-hidden": "true" }, "!"), `Blocked: ${task.blocked_reason}`),
    task.waiver_reason && h("p", { class: "marker" }, `Delivered without a report: ${task.waiver_reason}`),
  ];
  return [
    ...reasons,
    h(
      "dl",
      { class: "facts" },
      fact("Status", statusPill(task.status)),
      fact("Priority", h("span", { class: `priority priority-${task.priority}` }, task.priority)),
      fact("Kind", task.kind),
      fact("Assignee", task.assignee_id ? who(task.assignee_kind, task.assignee_id) : null),
      fact("Reporter", task.reporter_id ? who(task.reporter_kind, task.reporter_id) : null),
      fact("Claimed by", task.claimed_by ? who(task.claimed_by_kind, task.claimed_by) : null),
      fact("Labels", task.labels.length ? h("span", { class: "labels" }, task.labels.map((name) => h("span", { class: "label", style: { "--hue": hue(name) } }, name))) : null),
      fact("Round", String(task.delivery_round)),
      fact("Review", task.acceptance_mode === "review" ? "needs approval" : "no approval needed"),
      fact("Updated", when(task.updated_at)),
    ),
    h("h3", {}, "Description"),
    task.description ? markdownBlock(task.description, { className: "description" }) : h("p", { class: "muted" }, "No description."),
    acceptance && acceptance.items.length
      ? [h("h3", {}, "Acceptance"), h("ul", { class: "acceptance" }, acceptance.items.map((item) => h("li", {}, item.text)))]
      : null,
  ];
}

function actions(drawer, task, unsavedEdit = null) {
  const blocks = [];
  if (task.status === "in_review") blocks.push(approveForm(drawer, task));
  const moves = TRANSITIONS[task.status] || [];
  if (moves.length) blocks.push(moveForm(drawer, task, moves));
  if (TERMINAL.has(task.status)) blocks.push(reopenForm(drawer, task));
  blocks.push(unsavedEdit || editForm(drawer, task));
  return blocks;
}

function moveForm(drawer, task, moves) {
  const form = h(
    "form",
    { class: "action move-form", "aria-label": "Move the card" },
    h("h3", {}, "Move"),
    h(
      "div",
      { class: "row" },
      h("label", {}, h("span", {}, "To"), h("select", { name: "to", required: true }, moves.map((status) => h("option", { value: status }, STATUS_LABELS[status])))),
      h("label", { class: "grow" }, h("span", {}, "Reason (optional)"), h("input", { name: "reason", autocomplete: "off", placeholder: "why, for the trail" })),
      h("button", { type: "submit" }, "Move"),
    ),
    h("p", { class: "form-error", role: "alert" }),
  );
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const values = formValues(form);
    drawer.submit(form, () => drawer.api.post(`/tasks/${drawer.ref()}/move`, values));
  });
  return form;
}

function approveForm(drawer, task) {
  const form = h(
    "form",
    { class: "action approve-form", "aria-label": "Approve the delivery" },
    h("h3", {}, "Review"),
    h("label", {}, h("span", {}, "Approval note"), h("textarea", { name: "body", rows: "2", placeholder: "Looks good." })),
    h("div", { class: "row" }, h("button", { type: "submit", class: "primary" }, "Approve and mark done")),
    h("p", { class: "form-error", role: "alert" }),
  );
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const { body } = formValues(form);
    const current = drawer.task();
    if (current.acceptance_mode === "review" && current.delivered_by === drawer.api.actor.id) {
      // Checked before writing: the confirm comment would land and the move be refused.
      $(".form-error", form).textContent = `APPROVAL_REQUIRED: ${current.identifier} was delivered by ${current.delivered_by}; someone else must approve it.`;
      return;
    }
    drawer.submit(form, async () => {
      await drawer.api.post(`/tasks/${drawer.ref()}/comments`, { body: body || "Approved.", kind: "confirm" });
      const done = await drawer.api.post(`/tasks/${drawer.ref()}/move`, { to: "done" });
      form.reset();
      return done;
    });
  });
  return form;
}

function reopenForm(drawer, task) {
  const form = h(
    "form",
    { class: "action reopen-form", "aria-label": "Reopen the card" },
    h("h3", {}, "Reopen"),
    h(
      "div",
      { class: "row" },
      h("label", { class: "grow" }, h("span", {}, "Reason (at least 8 characters)"), h("input", { name: "reason", required: true, autocomplete: "off" })),
      h("button", { type: "submit" }, "Reopen"),
    ),
    h("p", { class: "form-error", role: "alert" }),
  );
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    drawer.submit(form, () => drawer.api.post(`/tasks/${drawer.ref()}/reopen`, formValues(form)));
  });
  return form;
}

function editForm(drawer, task) {
  const details = h("details", { class: "action edit" }, h("summary", {}, "Edit fields"));
  const option = (value, current) => h("option", { value, selected: value === current }, value);
  const form = h(
    "form",
    { class: "edit-form", "aria-label": "Edit the card" },
    h("label", {}, h("span", {}, "Title"), h("input", { name: "title", required: true, value: task.title })),
    // Filled when the editor opens: a 64K-character text in a closed form would still cost a layout.
    h("label", {}, h("span", {}, "Description"), h("textarea", { name: "description", rows: "5" })),
    h(
      "div",
      { class: "row" },
      h("label", {}, h("span", {}, "Priority"), h("select", { name: "priority" }, PRIORITIES.map((p) => option(p, task.priority)))),
      h("label", {}, h("span", {}, "Kind"), h("select", { name: "kind" }, KINDS.map((k) => option(k, task.kind)))),
    ),
    h("label", {}, h("span", {}, "Labels (comma separated)"), h("input", { name: "labels", value: task.labels.join(", "), autocomplete: "off" })),
    h(
      "div",
      { class: "row" },
      h("label", { class: "grow" }, h("span", {}, "Assignee"), h("input", { name: "assignee_id", value: task.assignee_id || "", autocomplete: "off", placeholder: "nobody" })),
      h("label", {}, h("span", {}, "Assignee kind"), h("input", { name: "assignee_kind", value: task.assignee_kind || "human", autocomplete: "off", size: "8" })),
    ),
    h("div", { class: "row" }, h("button", { type: "submit", class: "primary" }, "Save")),
    h("p", { class: "form-error", role: "alert" }),
  );
  // The edit is against the version the form shows; a change made meanwhile is a conflict,
  // never silently overwritten.
  const base = task;
  // Typed into since it was built from `base`: a rebuild of the forms around it keeps it.
  form.addEventListener("input", () => {
    details.dataset.unsaved = "true";
  });
  /** Drop the typed values: the next load builds the editor from the latest card. */
  const rebuild = () => {
    delete details.dataset.unsaved;
    drawer.actionsFor = null;
    drawer.markStale(["details"]);
  };
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const values = formValues(form, { keepEmpty: true });
    const patch = {};
    if (values.title !== base.title) patch.title = values.title;
    // An editor never opened was never filled: its empty field is not a wish to clear the text.
    if (form.elements.description.dataset.filled && values.description !== (base.description || "")) patch.description = values.description;
    if (values.priority !== base.priority) patch.priority = values.priority;
    if (values.kind !== base.kind) patch.kind = values.kind;
    const labels = values.labels.split(",").map((name) => name.trim()).filter(Boolean);
    if (JSON.stringify(labels) !== JSON.stringify(base.labels)) patch.labels = labels;
    const assignee = values.assignee_id || null;
    const assigneeKind = assignee ? values.assignee_kind || "human" : null;
    if (assignee !== base.assignee_id || assigneeKind !== base.assignee_kind) {
      patch.assignee_id = assignee;
      patch.assignee_kind = assigneeKind;
    }
    if (!Object.keys(patch).length) {
      details.open = false;
      return;
    }
    patch.if_version = base.version;
    drawer.submit(form, () => drawer.api.patch(`/tasks/${drawer.ref()}`, patch)).then((ok) => {
      if (ok) {
        rebuild(); // from the saved values
      } else if (/VERSION_CONFLICT/.test($(".form-error", form).textContent)) {
        $(".form-error", form).append(" ", h("button", { type: "button", class: "link-button", onclick: rebuild }, "Load the latest values"));
      }
    });
  });
  details.addEventListener("toggle", () => {
    const field = form.elements.description;
    if (details.open && !field.dataset.filled) {
      field.value = base.description || "";
      field.dataset.filled = "true";
    }
  });
  details.append(form);
  return details;
}
