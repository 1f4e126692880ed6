// Seeing a deploy: a workflow card's "Versions" box, per version its unfinished and finished
// instances, the live workers that serve it, and "drained" (docs/versioning.md).

import { api, enc } from "./api.js";
import { h, replace } from "./dom.js";

const opened = new Set();

function countsText(counts) {
  const parts = Object.entries(counts).map(([status, n]) => `${n} ${status}`);
  return parts.length ? parts.join(", ") : "—";
}

function stateOf(v) {
  if (v.drained) return h("span", { class: "version-state drained" }, "drained");
  if (v.workers.length) return h("span", { class: "version-state running" }, "running");
  return h("span", { class: "version-state unserved-text" }, "⚠ no live worker");
}

function versionsTable(data) {
  return h(
    "table",
    { class: "versions", "data-testid": "versions" },
    h("thead", {}, h("tr", {}, ...["Version", "Unfinished", "Finished", "Live workers", "State"]
      .map((label) => h("th", {}, label)))),
    h(
      "tbody",
      {},
      ...data.versions.map((v) =>
        h(
          "tr",
          { "data-testid": "version-row", "data-version": v.version },
          h("td", { class: "mono" }, v.version),
          h("td", {}, countsText(v.unfinished)),
          h("td", {}, countsText(v.finished)),
          h("td", { class: "mono" }, v.workers.join(", ") || "none"),
          h("td", {}, stateOf(v)),
        ),
      ),
    ),
  );
}

/** The box: loaded when opened, and again at each redraw of an open card. */
export function versionsBox(wf) {
  const body = h("div", { class: "table-scroll" }, "Loading…");
  const box = h(
    "details",
    { class: "versions-box", "data-testid": `versions-${wf.name}`, open: opened.has(wf.name) },
    h("summary", {}, "Versions"),
    body,
  );
  async function load() {
    try {
      replace(body, versionsTable(await api("GET", `/api/workflows/${enc(wf.name)}/versions`)));
    } catch (err) {
      replace(body, h("div", { class: "form-error", role: "alert" }, err.message));
    }
  }
  box.addEventListener("toggle", () => {
    if (box.open) {
      opened.add(wf.name);
      load();
    } else {
      opened.delete(wf.name);
    }
  });
  if (box.open) load();
  return box;
}
