// The drawer's sessions tab: the agent sessions working the card.

import { q } from "./api.js";
import { h } from "./dom.js";
import { when, who } from "./drawer-parts.js";

/** The tab's content for the open card (`drawer.load` puts it in the panel's body). */
export async function load(drawer, taskId) {
  const { items } = await drawer.api.get(`/tasks/${q(taskId)}/sessions`);
  if (!items.length) return h("p", { class: "muted" }, "No agent sessions on this card.");
  return h(
    "table",
    { class: "grid" },
    h("thead", {}, h("tr", {}, ["Owner", "Segment", "Phase", "Status", "Updated"].map((label) => h("th", { scope: "col" }, label)))),
    h("tbody", {}, items.map((session) => h("tr", {}, h("td", {}, who(session.owner_kind, session.owner_id)), h("td", {}, String(session.seg)), h("td", {}, session.phase), h("td", {}, h("span", { class: `tag tag-${session.status}` }, session.status)), h("td", {}, when(session.updated_at))))),
  );
}
