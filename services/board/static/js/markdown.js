// Markdown for descriptions, comments and reports: marked parses, DOMPurify cleans, and the
// page inserts the cleaned nodes (never an HTML string). Both are vendored in static/vendor/
// (docs/dependencies.md); nothing is fetched from elsewhere.
//
// Three walls, each enough on its own against a script in a field:
// 1. raw HTML in the markdown is shown as text (marked's `html` tokens are escaped), so a
//    `<script>` or `<img onerror=…>` someone typed reads as what they typed;
// 2. DOMPurify keeps only the tags and attributes markdown produces, and links whose scheme is
//    http, https or mailto (or relative ones): `javascript:` and `data:` links lose their href;
// 3. the page's Content-Security-Policy runs no inline script or handler at all.

import DOMPurify from "../vendor/dompurify/purify.es.js";
import { Marked } from "../vendor/marked/marked.esm.js";
import { h } from "./dom.js";
import { markdownChunks } from "./text-cap.js";

const ESCAPES = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };
const escapeHtml = (text) => String(text).replace(/[&<>"']/g, (char) => ESCAPES[char]);

const marked = new Marked({
  gfm: true,
  breaks: true, // a line break in a comment is a line break, as people type them
  renderer: {
    html: ({ text }) => escapeHtml(text),
    // Images would load from anywhere (and the CSP refuses other origins): show them as links.
    image: ({ href, text }) => `<a href="${escapeHtml(href)}">${escapeHtml(text || href)}</a>`,
  },
});

const ALLOWED_TAGS = [
  "a", "p", "br", "hr", "strong", "em", "del", "code", "pre", "blockquote", "ul", "ol", "li",
  "h1", "h2", "h3", "h4", "h5", "h6", "table", "thead", "tbody", "tr", "th", "td", "input", "span",
];
const PURIFY = {
  ALLOWED_TAGS,
  ALLOWED_ATTR: ["href", "title", "type", "checked", "disabled", "align", "start"],
  ALLOWED_URI_REGEXP: /^(?:https?:|mailto:|#|\/(?!\/))/i,
  RETURN_DOM_FRAGMENT: true,
};

let hooked = false;
function hookLinks() {
  if (hooked) return;
  hooked = true;
  DOMPurify.addHook("afterSanitizeAttributes", (node) => {
    if (node.tagName === "A" && node.hasAttribute("href")) {
      // Links open beside the board and do not tell the other site where they came from.
      node.setAttribute("target", "_blank");
      node.setAttribute("rel", "noopener noreferrer nofollow");
    }
    if (node.tagName === "INPUT" && node.getAttribute("type") !== "checkbox") node.remove();
  });
}

/** The markdown `text` as cleaned DOM nodes (a DocumentFragment). */
export function renderMarkdown(text) {
  hookLinks();
  const html = marked.parse(String(text ?? ""), { async: false });
  return DOMPurify.sanitize(html, PURIFY);
}

/**
 * A `.prose.markdown` block for the drawer. A long text is drawn a slice per task (the first at
 * once, the rest on the following turns of the event loop), so a 100 KB description never holds
 * the page for longer than a slice takes.
 */
export function markdownBlock(text, { className = "" } = {}) {
  const value = String(text ?? "");
  // Without a DOM DOMPurify can clean (it says so), the text is shown as typed: never unclean HTML.
  if (!DOMPurify.isSupported) return h("div", { class: `prose plain ${className}`.trim() }, value);
  const block = h("div", { class: `prose markdown ${className}`.trim() });
  const chunks = markdownChunks(value);
  if (chunks.length === 1) {
    block.append(renderMarkdown(value));
    return block;
  }
  block.append(slice(chunks[0]));
  drawRest(block, chunks, 1, false);
  return block;
}

/** One slice of a long text, which the browser lays out and paints only when it is scrolled to. */
function slice(text) {
  const part = h("div", { class: "md-slice" });
  part.append(renderMarkdown(text));
  return part;
}

function drawRest(block, chunks, next, wasShown) {
  block.dataset.drawing = "true";
  setTimeout(() => {
    // Taken off the page (the drawer moved to another card): stop drawing.
    if (wasShown && !block.isConnected) return;
    block.append(slice(chunks[next]));
    if (next + 1 < chunks.length) drawRest(block, chunks, next + 1, wasShown || block.isConnected);
    else delete block.dataset.drawing;
  }, 0);
}
