// The drawer's comments tab: the thread, and the form that adds a comment or answers a question.

import { q } from "./api.js";
import { $, formValues, h } from "./dom.js";
import { when, who } from "./drawer-parts.js";
import { markdownBlock } from "./markdown.js";

const COMMENT_KINDS = ["note", "question", "discuss", "decision", "confirm", "change", "defect"];

/** The tab's content for the open card (`drawer.load` puts it in the panel's body). */
export async function load(drawer, taskId, panel) {
  const items = await drawer.api.all(`/tasks/${q(taskId)}/comments`);
  const form = $(".tab-form", panel);
  placeCommentForm(drawer, drawer.state.tasks.get(taskId), form);
  if (!items.length) return h("p", { class: "muted" }, "No comments yet.");
  return h(
    "ol",
    { class: "thread" },
    items.map((comment) =>
      h(
        "li",
        { class: `comment comment-${comment.kind}`, dataset: { id: comment.id } },
        h("div", { class: "comment-head" }, who(comment.actor_kind, comment.actor_id), comment.kind !== "note" ? h("span", { class: `tag tag-${comment.kind}` }, comment.kind) : null, when(comment.created_at)),
        markdownBlock(comment.body),
      ),
    ),
  );
}

/**
 * Put the form the card's status asks for (an answer while it is awaiting, else a comment) in
 * `area`. A live move between the two keeps what the person had typed and the kind they chose:
 * the card changing under a half-written comment must not throw the comment away.
 */
export function placeCommentForm(drawer, task, area) {
  const mode = task.status === "awaiting" ? "answer" : "comment";
  if (area.dataset.mode === mode) return;
  const previous = $("form", area);
  area.dataset.mode = mode;
  const form = commentForm(drawer, task);
  if (previous) {
    form.elements.body.value = previous.elements.body.value;
    form.elements.kind.value = previous.elements.kind.value;
  }
  area.replaceChildren(form);
}

function commentForm(drawer, task) {
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
    drawer.submit(form, () => drawer.api.post(`/tasks/${drawer.ref()}/comments`, values)).then((ok) => {
      if (ok) {
        form.reset();
        drawer.markStale(["comments", "activity"]);
      }
    });
  });
  form.querySelector("textarea").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) form.requestSubmit();
  });
  return form;
}
