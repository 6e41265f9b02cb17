// The drawer's attachments tab: the card's files, and the upload form.

import { q } from "./api.js";
import { $, h } from "./dom.js";
import { errorText, when } from "./drawer-parts.js";

/** The tab's content for the open card (`drawer.load` puts it in the panel's body). */
export async function load(drawer, taskId, panel) {
  const { items } = await drawer.api.get(`/tasks/${q(taskId)}/attachments`);
  const form = $(".tab-form", panel);
  if (!form.firstChild) form.append(uploadForm(drawer));
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
        h("button", { type: "button", class: "link-button", onclick: (event) => removeAttachment(drawer, file, event.target) }, "Remove"),
      ),
    ),
  );
}

async function removeAttachment(drawer, file, button) {
  button.disabled = true;
  try {
    await drawer.api.delete(`/attachments/${q(file.id)}`);
    drawer.markStale(["attachments", "activity"]);
  } catch (error) {
    drawer.toast(errorText(error), "error");
    button.disabled = false;
  }
}

function uploadForm(drawer) {
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
    drawer.submit(form, () =>
      drawer.api.request("POST", `/tasks/${drawer.ref()}/attachments?filename=${q(file.name)}`, { raw: file, contentType: file.type || "application/octet-stream" }),
    ).then((ok) => {
      if (ok) {
        form.reset();
        drawer.markStale(["attachments", "activity"]);
      }
    });
  });
  return form;
}
