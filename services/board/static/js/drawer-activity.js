// The drawer's activity tab: the card's trail, in plain sentences.

import { q } from "./api.js";
import { h } from "./dom.js";
import { when, who } from "./drawer-parts.js";
import { sentence } from "./words.js";

/** The tab's content for the open card (`drawer.load` puts it in the panel's body). */
export async function load(drawer, taskId) {
  const items = await drawer.api.all(`/tasks/${q(taskId)}/activities?order=desc`);
  if (!items.length) return h("p", { class: "muted" }, "No activity.");
  const name = (id) => drawer.state.nameOf(id);
  return h(
    "ol",
    { class: "trail" },
    items.map((row) =>
      h("li", { class: `trail-row event-${row.event}`, dataset: { event: row.event, revision: row.revision } }, who(row.actor_kind, row.actor_id), h("span", { class: "sentence" }, sentence(row, name)), when(row.created_at)),
    ),
  );
}
