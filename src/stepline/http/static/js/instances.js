// Instances page: filter by workflow, status and a filter expression (docs/operations.md),
// search by id, page newest first, auto-refresh; a bulk action on what the filters match.

import { api, enc, instancePath } from "./api.js";
import { bulkPanel } from "./bulkform.js";
import {
  STATUSES,
  formatDuration,
  h,
  instanceBadge,
  isRetrying,
  replace,
  retrySummary,
  timeCell,
  toast,
  truncate,
} from "./dom.js";
import { go, setQuery } from "./router.js";

const REFRESH_MS = 3000;
const PAGE_SIZE = 25;

function duration(inst) {
  if (!inst.started_at) return null;
  const end = inst.ended_at || Date.now() / 1000;
  return end - inst.started_at;
}

function row(inst) {
  const link = `#/workflows/${enc(inst.workflow)}/instances/${enc(inst.id)}`;
  return h(
    "tr",
    { "data-testid": "instance-row", "data-id": inst.id, class: "clickable", onclick: (ev) => {
      if (ev.target.closest("a")) return;
      go(link);
    } },
    h("td", { class: "mono id-cell" }, h("a", { href: link, title: inst.id }, inst.id)),
    h("td", {}, inst.workflow),
    h("td", {}, instanceBadge(inst)),
    h("td", {}, timeCell(inst.created_at)),
    h("td", { class: "num-cell" }, formatDuration(duration(inst))),
    h(
      "td",
      { class: "err-cell" },
      inst.error
        ? h("span", { class: "err-text", title: `${inst.error.name}: ${inst.error.message}` },
          truncate(`${inst.error.name}: ${inst.error.message}`, 80))
        : inst.warning
          ? h("span", { class: "unserved-text", "data-testid": "unserved" }, `⚠ ${inst.warning}`)
          : isRetrying(inst)
          ? h(
            "span",
            { class: "retry-text", "data-testid": "retry", title: `${inst.retry.error.name}: ${inst.retry.error.message}` },
            retrySummary(inst.retry),
            inst.retry.next_attempt_at ? [" · next ", timeCell(inst.retry.next_attempt_at)] : null,
          )
          : inst.status === "waiting" && inst.wake_at
          ? h("span", { class: "muted" }, "wakes ", timeCell(inst.wake_at))
          : null,
    ),
  );
}

export function render(root, params) {
  const state = {
    workflow: params.workflow || "",
    status: params.status || "",
    where: params.where || "",
    cursors: [null], // cursor of each page seen so far; the last one is the current page
    auto: params.auto !== "off",
  };
  const workflowSelect = h(
    "select",
    { "aria-label": "workflow", "data-testid": "filter-workflow" },
    h("option", { value: "" }, "All workflows"),
  );
  const statusSelect = h(
    "select",
    { "aria-label": "status", "data-testid": "filter-status" },
    h("option", { value: "" }, "Any status"),
    STATUSES.map((s) => h("option", { value: s }, s)),
  );
  statusSelect.value = state.status;
  const search = h("input", {
    type: "search",
    placeholder: "Go to instance id…",
    "aria-label": "instance id",
    "data-testid": "search-id",
  });
  const whereBox = h("input", {
    type: "search",
    placeholder: "Filter: customer = 'c-42' and status = 'errored'",
    "aria-label": "filter",
    "data-testid": "filter-where",
    class: "where",
    value: state.where,
  });
  const autoBox = h("input", { type: "checkbox", checked: state.auto, "data-testid": "auto" });
  const body = h("tbody", {});
  const info = h("span", { class: "muted", "data-testid": "page-info" });
  const newer = h("button", { type: "button", "data-testid": "newer" }, "← Newer");
  const older = h("button", { type: "button", "data-testid": "older" }, "Older →");
  const updated = h("span", { class: "muted small" });
  const bulk = bulkPanel(() => ({ workflow: state.workflow, status: state.status, where: state.where }));

  root.append(
    h(
      "div",
      { class: "page-head" },
      h("div", {}, h("h1", {}, "Instances"), h("div", { class: "summary" }, "Newest first")),
      h("label", { class: "toggle" }, autoBox, " Auto-refresh ", updated),
    ),
    h(
      "div",
      { class: "toolbar card" },
      workflowSelect,
      statusSelect,
      h("form", { class: "search", onsubmit: (ev) => { ev.preventDefault(); filtersChanged(); } },
        whereBox, h("button", { type: "submit", "data-testid": "apply-where" }, "Filter")),
      h("form", { class: "search", onsubmit: (ev) => { ev.preventDefault(); find(); } },
        search, h("button", { type: "submit" }, "Go")),
    ),
    bulk.el,
    h(
      "div",
      { class: "card table-card" },
      h(
        "div",
        { class: "table-scroll" },
        h(
          "table",
          { class: "table", "data-testid": "instances" },
          h(
            "thead",
            {},
            h("tr", {}, ["Instance", "Workflow", "Status", "Created", "Duration", "Detail"].map(
              (t) => h("th", {}, t))),
          ),
          body,
        ),
      ),
      h("div", { class: "pager" }, newer, info, older),
    ),
  );

  let timer = null;
  let stopped = false;
  let seq = 0;

  async function load() {
    clearTimeout(timer);
    const mine = ++seq;
    const cursor = state.cursors[state.cursors.length - 1];
    const query = new URLSearchParams({ limit: String(PAGE_SIZE) });
    if (state.workflow) query.set("workflow", state.workflow);
    if (state.status) query.set("status", state.status);
    if (state.where) query.set("where", state.where);
    if (cursor) query.set("cursor", cursor);
    try {
      const page = await api("GET", `/api/instances?${query}`);
      if (stopped || mine !== seq) return;
      const rows = page.instances.map(row);
      replace(
        body,
        rows.length
          ? rows
          : h("tr", {}, h("td", { colspan: "6", class: "empty" }, "No instances match.")),
      );
      const pageNo = state.cursors.length;
      info.textContent = `Page ${pageNo} · ${page.instances.length} shown`;
      newer.disabled = pageNo === 1;
      older.disabled = !page.cursor;
      older.dataset.cursor = page.cursor || "";
      updated.textContent = `updated ${new Date().toLocaleTimeString()}`;
    } catch (err) {
      if (!stopped) toast(err.message, "error");
    } finally {
      if (!stopped && mine === seq && state.auto) timer = setTimeout(load, REFRESH_MS);
    }
  }

  async function find() {
    const id = search.value.trim();
    if (!id) return;
    const names = state.workflow ? [state.workflow] : [...workflowSelect.options]
      .map((o) => o.value).filter(Boolean);
    for (const name of names) {
      try {
        await api("GET", instancePath(name, id));
        go(`#/workflows/${enc(name)}/instances/${enc(id)}`);
        return;
      } catch (err) {
        if (err.status !== 404 && err.status !== 400) {
          toast(err.message, "error");
          return;
        }
      }
    }
    toast(`No instance ${id} in ${state.workflow || "any workflow"}`, "error");
  }

  function filtersChanged() {
    state.workflow = workflowSelect.value;
    state.status = statusSelect.value;
    state.where = whereBox.value.trim();
    state.cursors = [null];
    bulk.reset();
    setQuery(shown());
    load();
  }
  function shown() {
    return {
      workflow: state.workflow, status: state.status, where: state.where,
      auto: state.auto ? "" : "off",
    };
  }
  workflowSelect.addEventListener("change", filtersChanged);
  statusSelect.addEventListener("change", filtersChanged);
  autoBox.addEventListener("change", () => {
    state.auto = autoBox.checked;
    setQuery(shown());
    load();
  });
  newer.addEventListener("click", () => {
    if (state.cursors.length > 1) state.cursors.pop();
    load();
  });
  older.addEventListener("click", () => {
    if (older.dataset.cursor) state.cursors.push(older.dataset.cursor);
    load();
  });

  api("GET", "/api/workflows")
    .then((data) => {
      const names = data.workflows.map((wf) => wf.name);
      if (state.workflow && !names.includes(state.workflow)) names.push(state.workflow);
      for (const name of names) workflowSelect.append(h("option", { value: name }, name));
      workflowSelect.value = state.workflow;
    })
    .catch((err) => {
      if (!stopped) toast(err.message, "error");
    });
  load();
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}
