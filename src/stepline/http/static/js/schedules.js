// Cron schedules: the schedules panel on the workflows page (GET /api/schedules), with pause,
// resume and trigger buttons, and delete for those made at run time (source "api"); the buttons
// need an admin token (hidden otherwise, see app.js).

import { api, enc } from "./api.js";
import { h, replace, timeCell, toast } from "./dom.js";
import { go } from "./router.js";

const REFRESH_MS = 4000;

function policies(s) {
  const catchUp = s.catch_up === "all" ? `all (at most ${s.catch_up_limit})` : s.catch_up;
  return `catch-up ${catchUp}, overlap ${s.overlap}`;
}

/** The admin's form that makes a schedule at run time (POST /api/schedules); kept outside the
 * refreshed table so what is typed survives a refresh. */
function createForm(onCreated) {
  const field = (name, placeholder, label) =>
    h("input", { type: "text", autocomplete: "off", placeholder, "aria-label": label, "data-testid": `new-schedule-${name}` });
  const name = field("name", "name", "schedule name");
  const workflow = field("workflow", "workflow", "workflow");
  const cron = field("cron", "0 3 * * *", "cron expression");
  const zone = field("timezone", "UTC", "time zone");
  const error = h("div", { class: "form-error", role: "alert", "data-testid": "new-schedule-error" });
  const button = h("button", { type: "submit", class: "primary", "data-testid": "new-schedule-create" }, "Create");
  const form = h("form", { class: "schedule-form" }, h("div", { class: "row" }, name, workflow, cron, zone, button), error);
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    error.textContent = "";
    const body = { name: name.value.trim(), workflow: workflow.value.trim(), cron: cron.value.trim() };
    if (zone.value.trim()) body.timezone = zone.value.trim();
    button.disabled = true;
    try {
      const made = await api("POST", "/api/schedules", body);
      toast(`Schedule ${made.name} created`, "ok");
      for (const input of [name, workflow, cron, zone]) input.value = "";
      await onCreated();
    } catch (err) {
      error.textContent = err.message;
    } finally {
      button.disabled = false;
    }
  });
  return h(
    "details",
    { class: "schedule-new", "data-needs": "admin", "data-testid": "new-schedule" },
    h("summary", {}, "New schedule"),
    form,
  );
}

/** The schedules panel: a card that lists the stored schedules and refreshes itself. */
export function schedulesPanel() {
  const summary = h("span", { class: "muted", "data-testid": "schedules-summary" });
  const body = h("div", { class: "table-scroll" });
  const el = h(
    "section",
    { class: "card table-card schedules-card", "data-testid": "schedules" },
    h("h3", {}, "Schedules ", summary),
    body,
    createForm(() => load()),
  );
  let timer = null;
  let stopped = false;

  async function act(s, action, button) {
    button.disabled = true;
    try {
      if (action === "delete") {
        if (!confirm(`Delete schedule ${s.name}? Its instances stay.`)) {
          button.disabled = false;
          return;
        }
        await api("DELETE", `/api/schedules/${enc(s.name)}`);
        toast(`Schedule ${s.name} deleted`);
        await load();
        return;
      }
      const path = `/api/schedules/${enc(s.name)}/${action}`;
      const result = await api("POST", path);
      if (action === "trigger") {
        toast(`Triggered ${result.id}`);
        go(`#/workflows/${enc(result.workflow)}/instances/${enc(result.id)}`);
        return;
      }
      toast(`Schedule ${s.name} ${action === "pause" ? "paused" : "resumed"}`);
      await load();
    } catch (err) {
      toast(err.message, "error");
      button.disabled = false;
    }
  }

  function row(s) {
    const toggle = h(
      "button",
      { type: "button", class: "small", "data-needs": "admin", "data-testid": s.paused ? "schedule-resume" : "schedule-pause" },
      s.paused ? "Resume" : "Pause",
    );
    toggle.addEventListener("click", () => act(s, s.paused ? "resume" : "pause", toggle));
    const trigger = h("button", { type: "button", class: "small", "data-needs": "admin", "data-testid": "schedule-trigger" }, "Trigger now");
    trigger.addEventListener("click", () => act(s, "trigger", trigger));
    let remove = null;
    if (s.source === "api") {
      remove = h("button", { type: "button", class: "small danger ghost", "data-needs": "admin", "data-testid": "schedule-delete" }, "Delete");
      remove.addEventListener("click", () => act(s, "delete", remove));
    }
    return h(
      "tr",
      { "data-testid": "schedule-row", "data-name": s.name, "data-paused": String(s.paused), "data-source": s.source },
      h("td", { class: "mono id-cell", title: s.name }, s.name),
      h("td", { "data-testid": "schedule-source", title: s.source === "api" ? "made at run time" : "declared in code" }, s.source),
      h("td", { class: "mono" }, s.workflow),
      h("td", { class: "mono", title: s.timezone }, `${s.cron} · ${s.timezone}`),
      h(
        "td",
        {},
        h("span", { class: ["schedule-state", s.paused ? "paused" : "active"], "data-testid": "schedule-state" },
          s.paused ? "⏸ paused" : "▶ active"),
      ),
      h("td", {}, s.last_run === null ? "—" : timeCell(s.last_run)),
      h("td", { "data-testid": "schedule-next" }, s.next_run === null ? "—" : timeCell(s.next_run)),
      h("td", { class: "muted" }, policies(s)),
      h("td", { class: "schedule-actions" }, toggle, trigger, remove),
    );
  }

  async function load() {
    clearTimeout(timer);
    try {
      const data = await api("GET", "/api/schedules");
      if (stopped) return;
      const paused = data.schedules.filter((s) => s.paused).length;
      replace(summary, `· ${data.schedules.length} · ${paused} paused`);
      if (!data.schedules.length) {
        replace(
          body,
          h(
            "p",
            { class: "schedules-none", "data-testid": "no-schedules" },
            "No cron schedules are stored: a worker serving a workflow that declares schedules stores them when it starts; `stepline schedules create` or POST /api/schedules makes one at run time.",
          ),
        );
        return;
      }
      replace(
        body,
        h(
          "table",
          { class: "table" },
          h("thead", {}, h("tr", {}, ["Schedule", "Source", "Workflow", "Cron", "State", "Last run", "Next run", "Policies", ""].map((t) => h("th", {}, t)))),
          h("tbody", {}, data.schedules.map(row)),
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
