// The drawer's relations tab: links to other cards, and the form that adds one.

import { q } from "./api.js";
import { $, formValues, h } from "./dom.js";
import { errorText, statusPill } from "./drawer-parts.js";

const RELATION_TYPES = { blocks: "blocks", related: "is related to", parent: "is parent of", review_of: "reviews" };

/** The tab's content for the open card (`drawer.load` puts it in the panel's body). */
export async function load(drawer, taskId, panel) {
  const { items } = await drawer.api.get(`/tasks/${q(taskId)}/relations`);
  const form = $(".tab-form", panel);
  if (!form.firstChild) form.append(relationForm(drawer));
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
          ? h("button", { type: "button", class: "link-button", onclick: (event) => removeRelation(drawer, relation, event.target) }, "Remove")
          : null,
      );
    }),
  );
}

async function removeRelation(drawer, relation, button) {
  button.disabled = true;
  try {
    await drawer.api.delete(`/tasks/${drawer.ref()}/relations/${q(relation.id)}`);
    drawer.markStale(["relations", "activity"]);
  } catch (error) {
    drawer.toast(errorText(error), "error");
    button.disabled = false;
  }
}

function relationForm(drawer) {
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
    drawer.submit(form, () => drawer.api.post(`/tasks/${drawer.ref()}/relations`, formValues(form))).then((ok) => {
      if (ok) {
        form.reset();
        drawer.markStale(["relations", "activity"]);
      }
    });
  });
  return form;
}
