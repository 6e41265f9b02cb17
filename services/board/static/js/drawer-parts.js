// What every tab of the card drawer draws with: times, people, status pills, refusals.

import { STATUS_LABELS } from "./board-state.js";
import { h, hue, initials } from "./dom.js";
import { actorLabel, ago } from "./words.js";

export function when(timestamp) {
  if (!timestamp) return null;
  return h("time", { datetime: timestamp, title: new Date(timestamp).toLocaleString() }, ago(timestamp, Date.now()));
}

export function who(kind, id) {
  return h("span", { class: "who" }, h("span", { class: "avatar small", style: { "--hue": hue(id) }, "aria-hidden": "true" }, initials(id)), actorLabel(kind, id));
}

export function statusPill(status) {
  return h("span", { class: `status-pill status-${status}` }, STATUS_LABELS[status] || status);
}

export function errorText(error) {
  const code = error.code ? `${error.code}: ` : "";
  return `${code}${error.message}${error.hint ? ` — ${error.hint}` : ""}`;
}
