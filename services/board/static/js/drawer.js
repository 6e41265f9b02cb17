// The card drawer: a head, seven tabs, and the forms for what a person does to a card.
// Each tab keeps its list and its form apart, so a live refresh never eats what you typed.

import { STATUS_LABELS, TERMINAL, TRANSITIONS } from "./board-state.js";
import { q } from "./api.js";
import { $, formValues, fragment, h, hue, initials } from "./dom.js";
import { actorLabel, ago, sentence } from "./words.js";

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
const COMMENT_KINDS = ["note", "question", "discuss", "decision", "confirm", "change", "defect"];
const RELATION_TYPES = { blocks: "blocks", related: "is related to", parent: "is parent of", review_of: "reviews" };
const PRIORITIES = ["urgent", "high", "medium", "low"];
const KINDS = ["task", "bug", "epic", "review"];

function when(timestamp) {
  if (!timestamp) return null;
  return h("time", { datetime: timestamp, title: new Date(timestamp).toLocaleString() }, ago(timestamp, Date.now()));
}

function who(kind, id) {
  return h("span", { class: "who" }, h("span", { class: "avatar small", style: { "--hue": hue(id) }, "aria-hidden": "true" }, initials(id)), actorLabel(kind, id));
}

function statusPill(status) {
  return h("span", { class: `status-pill status-${status}` }, STATUS_LABELS[status] || status);
}

function errorText(error) {
  const code = error.code ? `${error.code}: ` : "";
  return `${code}${error.message}${error.hint ? ` — ${error.hint}` : ""}`;
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
    const commentForm = $(".tab-form", this.panels.get("comments"));
    const mode = task.status === "awaiting" ? "answer" : "comment";
    if (commentForm.dataset.mode && commentForm.dataset.mode !== mode) {
      commentForm.dataset.mode = mode;
      commentForm.replaceChildren(this.commentForm(task));
    }
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
      const content = await this[`load_${tab}`](taskId, panel);
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

  // -- details ------------------------------------------------------------------------------

  async load_details(taskId, panel) {
    const task = this.state.tasks.get(taskId);
    if (this.acceptance === null) {
      const generation = this.generation;
      let acceptance;
      try {
        acceptance = await this.api.get(`/tasks/${q(taskId)}/acceptance`);
      } catch {
        acceptance = { items: [] }; // unreadable: show none rather than a broken tab
      }
      if (generation !== this.generation) return null; // another card is open now
      this.acceptance = acceptance;
    }
    const acceptance = this.acceptance;
    if (this.actionsFor !== task.status) {
      this.actionsFor = task.status;
      $(".tab-form", panel).replaceChildren(...this.actions(task));
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
      task.description ? h("div", { class: "prose" }, task.description) : h("p", { class: "muted" }, "No description."),
      acceptance && acceptance.items.length
        ? [h("h3", {}, "Acceptance"), h("ul", { class: "acceptance" }, acceptance.items.map((item) => h("li", {}, item.text)))]
        : null,
    ];
  }

  actions(task) {
    const blocks = [];
    if (task.status === "in_review") blocks.push(this.approveForm(task));
    const moves = TRANSITIONS[task.status] || [];
    if (moves.length) blocks.push(this.moveForm(task, moves));
    if (TERMINAL.has(task.status)) blocks.push(this.reopenForm(task));
    blocks.push(this.editForm(task));
    return blocks;
  }

  moveForm(task, moves) {
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
      this.submit(form, () => this.api.post(`/tasks/${this.ref()}/move`, values));
    });
    return form;
  }

  approveForm(task) {
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
      const current = this.task();
      if (current.acceptance_mode === "review" && current.delivered_by === this.api.actor.id) {
        // Checked before writing: the confirm comment would land and the move be refused.
        $(".form-error", form).textContent = `APPROVAL_REQUIRED: ${current.identifier} was delivered by ${current.delivered_by}; someone else must approve it.`;
        return;
      }
      this.submit(form, async () => {
        await this.api.post(`/tasks/${this.ref()}/comments`, { body: body || "Approved.", kind: "confirm" });
        const done = await this.api.post(`/tasks/${this.ref()}/move`, { to: "done" });
        form.reset();
        return done;
      });
    });
    return form;
  }

  reopenForm(task) {
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
      this.submit(form, () => this.api.post(`/tasks/${this.ref()}/reopen`, formValues(form)));
    });
    return form;
  }

  editForm(task) {
    const details = h("details", { class: "action edit" }, h("summary", {}, "Edit fields"));
    const option = (value, current) => h("option", { value, selected: value === current }, value);
    const form = h(
      "form",
      { class: "edit-form", "aria-label": "Edit the card" },
      h("label", {}, h("span", {}, "Title"), h("input", { name: "title", required: true, value: task.title })),
      h("label", {}, h("span", {}, "Description"), h("textarea", { name: "description", rows: "5" }, task.description || "")),
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
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      const values = formValues(form, { keepEmpty: true });
      const patch = {};
      if (values.title !== base.title) patch.title = values.title;
      if (values.description !== (base.description || "")) patch.description = values.description;
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
      this.submit(form, () => this.api.patch(`/tasks/${this.ref()}`, patch)).then((ok) => {
        if (ok) {
          this.actionsFor = null; // rebuild the form from the saved values
          this.markStale(["details"]);
        } else if (/VERSION_CONFLICT/.test($(".form-error", form).textContent)) {
          $(".form-error", form).append(
            " ",
            h("button", { type: "button", class: "link-button", onclick: () => { this.actionsFor = null; this.markStale(["details"]); } }, "Load the latest values"),
          );
        }
      });
    });
    details.append(form);
    return details;
  }

  // -- comments -----------------------------------------------------------------------------

  async load_comments(taskId, panel) {
    const items = await this.api.all(`/tasks/${q(taskId)}/comments`);
    const form = $(".tab-form", panel);
    const task = this.state.tasks.get(taskId);
    const mode = task.status === "awaiting" ? "answer" : "comment";
    if (form.dataset.mode !== mode) {
      form.dataset.mode = mode;
      form.replaceChildren(this.commentForm(task));
    }
    if (!items.length) return h("p", { class: "muted" }, "No comments yet.");
    return h(
      "ol",
      { class: "thread" },
      items.map((comment) =>
        h(
          "li",
          { class: `comment comment-${comment.kind}`, dataset: { id: comment.id } },
          h("div", { class: "comment-head" }, who(comment.actor_kind, comment.actor_id), comment.kind !== "note" ? h("span", { class: `tag tag-${comment.kind}` }, comment.kind) : null, when(comment.created_at)),
          h("div", { class: "prose" }, comment.body),
        ),
      ),
    );
  }

  commentForm(task) {
    const answering = task.status === "awaiting";
    const form = h(
      "form",
      { class: "action comment-form", "aria-label": answering ? "Answer the question" : "Add a comment" },
      h("h3", {}, answering ? "Answer the question" : "Add a comment"),
      answering ? h("p", { class: "muted" }, "Your answer moves the card back to To do.") : null,
      h("label", {}, h("span", { class: "visually-hidden" }, "Comment"), h("textarea", { name: "body", rows: "3", required: true, placeholder: answering ? "Your answer…" : "Write a comment…" })),
      h(
        "div",
        { class: "row" },
        h("label", {}, h("span", {}, "Kind"), h("select", { name: "kind" }, COMMENT_KINDS.map((kind) => h("option", { value: kind }, kind)))),
        h("button", { type: "submit", class: "primary" }, answering ? "Answer" : "Comment"),
      ),
      h("p", { class: "form-error", role: "alert" }),
    );
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      const values = formValues(form);
      this.submit(form, () => this.api.post(`/tasks/${this.ref()}/comments`, values)).then((ok) => {
        if (ok) {
          form.reset();
          this.markStale(["comments", "activity"]);
        }
      });
    });
    form.querySelector("textarea").addEventListener("keydown", (event) => {
      if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) form.requestSubmit();
    });
    return form;
  }

  // -- relations ----------------------------------------------------------------------------

  async load_relations(taskId, panel) {
    const { items } = await this.api.get(`/tasks/${q(taskId)}/relations`);
    const form = $(".tab-form", panel);
    if (!form.firstChild) form.append(this.relationForm());
    if (!items.length) return h("p", { class: "muted" }, "No relations.");
    return h(
      "ul",
      { class: "relations" },
      items.map((relation) => {
        const phrase = relation.direction === "outgoing"
          ? `${RELATION_TYPES[relation.type] || relation.type}`
          : { blocks: "is blocked by", related: "is related to", parent: "is child of", review_of: "is reviewed by" }[relation.type] || relation.type;
        return h(
          "li",
          { class: "relation", dataset: { id: relation.id } },
          h("span", { class: "phrase" }, `This ${phrase}`),
          h("span", { class: "identifier" }, relation.other.identifier),
          h("span", { class: "other-title" }, relation.other.title),
          statusPill(relation.other.status),
          relation.direction === "outgoing"
            ? h("button", { type: "button", class: "link-button", onclick: (event) => this.removeRelation(relation, event.target) }, "Remove")
            : null,
        );
      }),
    );
  }

  async removeRelation(relation, button) {
    button.disabled = true;
    try {
      await this.api.delete(`/tasks/${this.ref()}/relations/${q(relation.id)}`);
      this.markStale(["relations", "activity"]);
    } catch (error) {
      this.toast(errorText(error), "error");
      button.disabled = false;
    }
  }

  relationForm() {
    const form = h(
      "form",
      { class: "action relation-form", "aria-label": "Add a relation" },
      h("h3", {}, "Add a relation"),
      h(
        "div",
        { class: "row" },
        h("label", {}, h("span", {}, "This card"), h("select", { name: "type" }, Object.entries(RELATION_TYPES).map(([value, label]) => h("option", { value }, label)))),
        h("label", { class: "grow" }, h("span", {}, "Card"), h("input", { name: "target", required: true, placeholder: "DEMO-0002", autocomplete: "off" })),
        h("button", { type: "submit" }, "Add"),
      ),
      h("p", { class: "form-error", role: "alert" }),
    );
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      this.submit(form, () => this.api.post(`/tasks/${this.ref()}/relations`, formValues(form))).then((ok) => {
        if (ok) {
          form.reset();
          this.markStale(["relations", "activity"]);
        }
      });
    });
    return form;
  }

  // -- reports, sessions, attachments ---------------------------------------------------------

  async load_reports(taskId) {
    const items = await this.api.all(`/tasks/${q(taskId)}/reports`);
    if (!items.length) return h("p", { class: "muted" }, "No delivery reports yet.");
    return h(
      "ol",
      { class: "thread" },
      items.slice().reverse().map((report) =>
        h("li", { class: "report" }, h("div", { class: "comment-head" }, h("strong", {}, `Round ${report.round}`), who(report.actor_kind, report.actor_id), when(report.created_at)), h("div", { class: "prose" }, report.body)),
      ),
    );
  }

  async load_sessions(taskId) {
    const { items } = await this.api.get(`/tasks/${q(taskId)}/sessions`);
    if (!items.length) return h("p", { class: "muted" }, "No agent sessions on this card.");
    return h(
      "table",
      { class: "grid" },
      h("thead", {}, h("tr", {}, ["Owner", "Segment", "Phase", "Status", "Updated"].map((label) => h("th", { scope: "col" }, label)))),
      h("tbody", {}, items.map((session) => h("tr", {}, h("td", {}, who(session.owner_kind, session.owner_id)), h("td", {}, String(session.seg)), h("td", {}, session.phase), h("td", {}, h("span", { class: `tag tag-${session.status}` }, session.status)), h("td", {}, when(session.updated_at))))),
    );
  }

  async load_attachments(taskId, panel) {
    const { items } = await this.api.get(`/tasks/${q(taskId)}/attachments`);
    const form = $(".tab-form", panel);
    if (!form.firstChild) form.append(this.uploadForm());
    if (!items.length) return h("p", { class: "muted" }, "No attachments.");
    const size = (bytes) => (bytes < 1024 ? `${bytes} B` : bytes < 1 << 20 ? `${(bytes / 1024).toFixed(1)} KiB` : `${(bytes / (1 << 20)).toFixed(1)} MiB`);
    return h(
      "ul",
      { class: "files" },
      items.map((file) =>
        h(
          "li",
          {},
          h("a", { href: `/api/v1/attachments/${q(file.id)}`, download: file.filename }, file.filename),
          h("span", { class: "muted" }, `${size(file.size)} · ${file.content_type}`),
          when(file.updated_at),
          h("button", { type: "button", class: "link-button", onclick: (event) => this.removeAttachment(file, event.target) }, "Remove"),
        ),
      ),
    );
  }

  async removeAttachment(file, button) {
    button.disabled = true;
    try {
      await this.api.delete(`/attachments/${q(file.id)}`);
      this.markStale(["attachments", "activity"]);
    } catch (error) {
      this.toast(errorText(error), "error");
      button.disabled = false;
    }
  }

  uploadForm() {
    const form = h(
      "form",
      { class: "action upload-form", "aria-label": "Attach a file" },
      h("div", { class: "row" }, h("label", { class: "grow" }, h("span", {}, "Attach a file (up to 8 MiB)"), h("input", { type: "file", name: "file", required: true })), h("button", { type: "submit" }, "Upload")),
      h("p", { class: "form-error", role: "alert" }),
    );
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      const file = form.elements.file.files[0];
      if (!file) return;
      this.submit(form, () =>
        this.api.request("POST", `/tasks/${this.ref()}/attachments?filename=${q(file.name)}`, { raw: file, contentType: file.type || "application/octet-stream" }),
      ).then((ok) => {
        if (ok) {
          form.reset();
          this.markStale(["attachments", "activity"]);
        }
      });
    });
    return form;
  }

  // -- activity -----------------------------------------------------------------------------

  async load_activity(taskId) {
    const items = await this.api.all(`/tasks/${q(taskId)}/activities?order=desc`);
    if (!items.length) return h("p", { class: "muted" }, "No activity.");
    const name = (id) => this.state.nameOf(id);
    return h(
      "ol",
      { class: "trail" },
      items.map((row) =>
        h("li", { class: `trail-row event-${row.event}`, dataset: { event: row.event, revision: row.revision } }, who(row.actor_kind, row.actor_id), h("span", { class: "sentence" }, sentence(row, name)), when(row.created_at)),
      ),
    );
  }
}
