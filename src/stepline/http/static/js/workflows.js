// Workflows page: every workflow with its counts by status and a trigger form.

import { activityPanel } from "./activity.js";
import { api, enc } from "./api.js";
import { STATUSES, clear, h, relativeTime, replace, toast } from "./dom.js";
import { go } from "./router.js";
import { schedulesPanel } from "./schedules.js";
import { versionsBox } from "./versions.js";
import { workersPanel } from "./workers.js";

const REFRESH_MS = 4000;

function kindOf(wf) {
  const kind = wf.definition && typeof wf.definition.kind === "string" ? wf.definition.kind : null;
  return kind || "workflow";
}

function distribution(wf) {
  const bar = h("div", { class: "dist", "aria-hidden": "true" });
  if (!wf.total) {
    bar.classList.add("dist-empty");
    return bar;
  }
  for (const status of STATUSES) {
    const n = wf.counts[status] || 0;
    if (!n) continue;
    const seg = h("span", { class: ["seg", `s-${status}`], title: `${status}: ${n}` });
    seg.style.flexGrow = String(n);
    bar.append(seg);
  }
  return bar;
}

function counts(wf) {
  const list = h("div", { class: "counts", "data-testid": "counts" });
  for (const status of STATUSES) {
    const n = wf.counts[status] || 0;
    list.append(
      h(
        "a",
        {
          class: ["count", `s-${status}`, n ? null : "zero"],
          href: `#/instances?workflow=${enc(wf.name)}&status=${enc(status)}`,
          "data-status": status,
          title: `${n} ${status}`,
        },
        h("span", { class: "num", "data-testid": `count-${status}` }, String(n)),
        h("span", { class: "label" }, status === "waitingForPause" ? "pausing" : status),
      ),
    );
  }
  return list;
}

function triggerForm(wf) {
  const params = h("textarea", {
    class: "code",
    rows: "3",
    spellcheck: "false",
    placeholder: '{"key": "value"}',
    "aria-label": `params for ${wf.name}`,
    "data-testid": "trigger-params",
  });
  const id = h("input", {
    type: "text",
    placeholder: "optional id",
    autocomplete: "off",
    "aria-label": `instance id for ${wf.name}`,
    "data-testid": "trigger-id",
  });
  const error = h("div", { class: "form-error", role: "alert" });
  const button = h("button", { type: "submit", class: "primary", "data-testid": "trigger" },
    "Trigger");
  const form = h(
    "form",
    { class: "trigger", "data-testid": `trigger-form-${wf.name}` },
    h("label", { class: "field" }, h("span", {}, "Params (JSON)"), params),
    h("div", { class: "row" }, id, button),
    error,
  );
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    error.textContent = "";
    const text = params.value.trim();
    if (text) {
      try {
        JSON.parse(text);
      } catch (err) {
        error.textContent = `Params are not valid JSON: ${err.message}`;
        params.focus();
        return;
      }
    }
    // The params are sent as typed: a JS number would round integers past 2**53.
    const fields = [];
    if (text) fields.push(`"params": ${text}`);
    if (id.value.trim()) fields.push(`"id": ${JSON.stringify(id.value.trim())}`);
    const body = `{${fields.join(", ")}}`;
    button.disabled = true;
    try {
      const created = await api("POST", `/api/workflows/${enc(wf.name)}/instances`, body);
      toast(`Created ${created.id}`, "ok");
      go(`#/workflows/${enc(wf.name)}/instances/${enc(created.id)}`);
    } catch (err) {
      error.textContent = err.message;
    } finally {
      button.disabled = false;
    }
  });
  return form;
}

function card(wf, forms) {
  const kind = kindOf(wf);
  const doc = wf.definition && typeof wf.definition.doc === "string" ? wf.definition.doc : null;
  const graph = wf.graph && Array.isArray(wf.graph.nodes) ? wf.graph.nodes.length : null;
  return h(
    "section",
    { class: "card wf-card", "data-testid": `workflow-${wf.name}`, "data-workflow": wf.name },
    h(
      "header",
      { class: "card-head" },
      h(
        "div",
        { class: "title" },
        h("h2", {}, h("a", { href: `#/instances?workflow=${enc(wf.name)}` }, wf.name)),
        h("span", { class: ["tag", `k-${kind}`] }, graph !== null ? `${kind} · ${graph} steps` : kind),
      ),
      h(
        "a",
        { class: "total", href: `#/instances?workflow=${enc(wf.name)}`, title: "all instances" },
        h("strong", {}, String(wf.total)),
        ` instance${wf.total === 1 ? "" : "s"}`,
      ),
    ),
    h("div", { class: "sub mono", title: "class" }, wf.class_name),
    doc ? h("p", { class: "doc" }, doc) : null,
    distribution(wf),
    counts(wf),
    h(
      "details",
      { class: "trigger-box", "data-key": `trigger-${wf.name}`, "data-needs": "operate", open: forms.has(wf.name) },
      h("summary", {}, "Trigger an instance"),
      triggerForm(wf),
    ),
    versionsBox(wf),
    h("footer", { class: "card-foot muted" }, `registered ${relativeTime(wf.created_at)}`),
  );
}

export function render(root) {
  const grid = h("div", { class: "wf-grid", "data-testid": "workflows" });
  const summary = h("div", { class: "summary" });
  root.append(
    h(
      "div",
      { class: "page-head" },
      h("div", {}, h("h1", {}, "Workflows"), summary),
      h("a", { class: "button", href: "#/instances" }, "All instances →"),
    ),
  );
  const activity = activityPanel();
  root.append(activity.el, grid);
  const schedules = schedulesPanel();
  const workers = workersPanel();
  root.append(schedules.el, workers.el);
  let timer = null;
  let stopped = false;
  const cards = new Map();

  async function load() {
    try {
      const data = await api("GET", "/api/workflows");
      if (stopped) return;
      const total = data.workflows.reduce((n, wf) => n + wf.total, 0);
      const running = data.workflows.reduce((n, wf) => n + (wf.counts.running || 0), 0);
      replace(summary, `${data.workflows.length} workflows · ${total} instances · ${running} running`);
      if (!data.workflows.length) {
        replace(
          grid,
          h(
            "div",
            { class: "empty-state" },
            h("h2", {}, "No workflows yet"),
            h("p", {}, "Workflows appear here once a worker or client has registered them."),
          ),
        );
        return;
      }
      // Cards whose trigger form is in use are kept as they are; the others are redrawn.
      const busy = new Set();
      for (const [name, el] of cards) {
        const box = el.querySelector("details.trigger-box");
        const active = el.contains(document.activeElement);
        const typed = [...el.querySelectorAll("textarea, input")].some((f) => f.value);
        if (box && box.open && (active || typed)) busy.add(name);
      }
      const open = new Set(
        [...cards].filter(([, el]) => el.querySelector("details.trigger-box[open]")).map(([n]) => n),
      );
      const next = new Map();
      const nodes = [];
      for (const wf of data.workflows) {
        let el = busy.has(wf.name) ? cards.get(wf.name) : null;
        if (el) {
          el.querySelector(".dist").replaceWith(distribution(wf));
          el.querySelector(".counts").replaceWith(counts(wf));
        } else {
          el = card(wf, open);
        }
        next.set(wf.name, el);
        nodes.push(el);
      }
      cards.clear();
      for (const [k, v] of next) cards.set(k, v);
      // Reorder without detaching busy cards (keeps focus and typed text).
      if (grid.querySelector(".empty-state")) clear(grid);
      for (const el of [...grid.children]) if (!nodes.includes(el)) el.remove();
      nodes.forEach((el, i) => {
        if (grid.children[i] !== el) grid.insertBefore(el, grid.children[i] || null);
      });
    } catch (err) {
      if (!stopped) toast(err.message, "error");
    } finally {
      if (!stopped) timer = setTimeout(load, REFRESH_MS);
    }
  }
  load();
  return () => {
    stopped = true;
    clearTimeout(timer);
    schedules.stop();
    workers.stop();
    activity.stop();
  };
}
