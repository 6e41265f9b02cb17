// The drawer's reports tab: the delivery reports, newest round first.

import { q } from "./api.js";
import { h } from "./dom.js";
import { when, who } from "./drawer-parts.js";
import { markdownBlock } from "./markdown.js";

/** The tab's content for the open card (`drawer.load` puts it in the panel's body). */
export async function load(drawer, taskId) {
  const items = await drawer.api.all(`/tasks/${q(taskId)}/reports`);
  if (!items.length) return h("p", { class: "muted" }, "No delivery reports yet.");
  return h(
    "ol",
    { class: "thread" },
    items.slice().reverse().map((report) =>
      h("li", { class: "report" }, h("div", { class: "comment-head" }, h("strong", {}, `Round ${report.round}`), who(report.actor_kind, report.actor_id), when(report.created_at)), markdownBlock(report.body)),
    ),
  );
}
