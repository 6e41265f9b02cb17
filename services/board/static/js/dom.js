// A tiny element builder: h("li", { class: "card", dataset: { id } }, child, "text").

export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") el.className = value;
    else if (key === "dataset") Object.assign(el.dataset, value);
    // Through the CSSOM, which the page's CSP allows; a style attribute would not be.
    else if (key === "style") for (const [name, v] of Object.entries(value)) el.style.setProperty(name, String(v));
    else if (key === "text") el.textContent = value;
    else if (key.startsWith("on") && typeof value === "function") el.addEventListener(key.slice(2), value);
    else if (value === true) el.setAttribute(key, "");
    else el.setAttribute(key, String(value));
  }
  append(el, children);
  return el;
}

/** Children (nested arrays, text, nodes; null/false skipped) as one fragment. */
export function fragment(...children) {
  const frag = document.createDocumentFragment();
  append(frag, children);
  return frag;
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

export function $(selector, root = document) {
  return root.querySelector(selector);
}

export function $$(selector, root = document) {
  return [...root.querySelectorAll(selector)];
}

/** Form fields as an object; empty strings left out unless keepEmpty. */
export function formValues(form, { keepEmpty = false } = {}) {
  const values = {};
  for (const [key, value] of new FormData(form).entries()) {
    if (typeof value === "string" && value.trim() === "" && !keepEmpty) continue;
    values[key] = typeof value === "string" ? value.trim() : value;
  }
  return values;
}

export function initials(text) {
  const words = String(text || "?").split(/[\s._-]+/).filter(Boolean);
  return ((words[0] || "?")[0] + (words[1] ? words[1][0] : "")).toUpperCase();
}

/** A stable hue per name, so an actor keeps their colour across the page. */
export function hue(text) {
  let value = 0;
  for (const char of String(text)) value = (value * 31 + char.codePointAt(0)) % 360;
  return value;
}
