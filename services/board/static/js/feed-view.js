// The activity feed panel: folded entries of the shown project, newest first, unread marked.

import { h, hue, initials } from "./dom.js";
import { unreadCount, wording } from "./feed.js";
import { FEED_TEXT_MAX, capText } from "./text-cap.js";
import { actorLabel, ago } from "./words.js";

export const FEED_SHOWN = 200;

export class FeedView {
  constructor(root, { onOpenTask }) {
    this.root = root;
    this.onOpenTask = onOpenTask;
    this.list = root.querySelector(".feed-list");
    this.empty = root.querySelector(".feed-empty");
    this.signature = "";
  }

  /** Render entries; returns the unread count against seenAt. */
  render(entries, { seenAt, me, name }) {
    const shown = entries.slice(0, FEED_SHOWN);
    const now = Date.now();
    const signature = JSON.stringify([shown.map((entry) => [entry.key, entry.rows.length]), seenAt, me, Math.floor(now / 30000)]);
    const unread = unreadCount(entries, seenAt, me);
    if (signature === this.signature) return unread;
    this.signature = signature;
    this.empty.hidden = shown.length > 0;
    this.list.replaceChildren(
      ...shown.map((entry) => {
        const { verb, detail } = wording(entry.rows, name);
        const isUnread = entry.revision > seenAt && !(me && entry.actor_kind === me.kind && entry.actor_id === me.id);
        return h(
          "li",
          { class: "feed-entry", dataset: { key: entry.key, event: entry.rows[entry.rows.length - 1].event, unread: isUnread ? "true" : "false" } },
          h("span", { class: "avatar small", style: { "--hue": hue(entry.actor_id) }, "aria-hidden": "true" }, initials(entry.actor_id)),
          h(
            "div",
            { class: "feed-text" },
            h(
              "p",
              {},
              h("strong", {}, actorLabel(entry.actor_kind, entry.actor_id)),
              ` ${verb} `,
              h("button", { type: "button", class: "link-button identifier", onclick: () => this.onOpenTask(entry.task_id) }, name(entry.task_id)),
              entry.rows.length > 1 ? h("span", { class: "fold", title: `${entry.rows.length} changes folded` }, `×${entry.rows.length}`) : null,
            ),
            detail ? h("p", { class: "feed-detail" }, capText(detail, FEED_TEXT_MAX).text) : null,
            h("time", { datetime: entry.created_at, title: new Date(entry.created_at).toLocaleString() }, ago(entry.created_at, now)),
          ),
          isUnread ? h("span", { class: "visually-hidden" }, "(unread)") : null,
        );
      }),
    );
    return unread;
  }
}
