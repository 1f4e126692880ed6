// Worker liveness: the workers panel (on the workflows page) and the "no live worker" banner.

import { api } from "./api.js";
import { h, replace, timeCell, toast } from "./dom.js";

const REFRESH_MS = 4000;

function workerRow(w) {
  return h(
    "tr",
    { "data-testid": "worker-row", "data-id": w.id, "data-live": String(w.live) },
    h("td", { class: "mono id-cell", title: w.id }, w.id),
    h("td", {}, `${w.host} · pid ${w.pid}`),
    h(
      "td",
      {},
      h("span", { class: ["worker-state", w.live ? "live" : "dead"], "data-testid": "worker-state" },
        w.live ? "● live" : "✖ dead"),
    ),
    h("td", {}, timeCell(w.last_seen)),
    h("td", { class: "num-cell" }, `${w.running}/${w.concurrency}`),
    h("td", { class: "mono" }, w.workflows.join(", ") || "—"),
  );
}

/** The workers panel: a card that lists the workers and refreshes itself until stopped. */
export function workersPanel() {
  const summary = h("span", { class: "muted", "data-testid": "workers-summary" });
  const body = h("div", { class: "table-scroll" });
  const el = h(
    "section",
    { class: "card table-card workers-card", "data-testid": "workers" },
    h("h3", {}, "Workers ", summary),
    body,
  );
  let timer = null;
  let stopped = false;

  async function load() {
    try {
      const data = await api("GET", "/api/workers");
      if (stopped) return;
      const live = data.workers.filter((w) => w.live).length;
      replace(summary, `· ${live} live`);
      if (!data.workers.length) {
        replace(
          body,
          h(
            "p",
            { class: "workers-none", "data-testid": "no-workers" },
            "No worker is running: queued instances wait until one runs their workflow. ",
            "Start one with ",
            h("code", {}, "stepline worker"),
            ".",
          ),
        );
        return;
      }
      replace(
        body,
        h(
          "table",
          { class: "table" },
          h("thead", {}, h("tr", {}, ["Worker", "Where", "State", "Last seen", "Running", "Workflows"].map((t) => h("th", {}, t)))),
          h("tbody", {}, data.workers.map(workerRow)),
        ),
      );
    } catch (err) {
      if (!stopped) toast(err.message, "error");
    } finally {
      if (!stopped) timer = setTimeout(load, REFRESH_MS);
    }
  }
  load();
  return {
    el,
    stop() {
      stopped = true;
      clearTimeout(timer);
    },
  };
}

/** The "no live worker serves 'x'" banner of an instance (the API's `warning`), or null. */
export function unservedBanner(inst) {
  if (!inst.warning) return null;
  return h(
    "div",
    { class: "unserved", role: "status", "data-testid": "unserved" },
    `⚠ ${inst.warning}. Start a worker that runs it (`,
    h("code", {}, "stepline worker"),
    ").",
  );
}
