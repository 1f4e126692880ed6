// Bulk jobs (docs/operations.md, "Bulk actions"): the list (GET /api/bulk) and one job's page
// (GET /api/bulk/{id}), both polled while a job runs, with Cancel for an admin token (POST
// /api/bulk/{id}/cancel; hidden for other roles, see app.js). Jobs start from the instances page
// (bulkform.js).

import { api, enc } from "./api.js";
import { formatDuration, formatTime, h, replace, timeCell, toast } from "./dom.js";

const LIST_MS = 2000;
const JOB_MS = 1000;
export const JOB_STATUSES = ["running", "complete", "cancelled"];

function jobBadge(status) {
  return h(
    "span",
    { class: ["badge", `s-bulk-${status}`], "data-status": status, title: status },
    h("span", { class: "dot" }),
    status,
  );
}

/** The action as a person reads it: "restart from charge". */
function actionText(job) {
  return job.from_step ? `${job.action} from ${job.from_step}` : job.action;
}

/** A bar of the job's progress: acted on (done) and passed over (skipped) out of its total. */
export function progressBar(job) {
  const reached = job.done + job.skipped;
  const segment = (kind, n) => {
    const seg = h("span", { class: ["seg", kind] });
    // CSSOM, not a style attribute: the Content-Security-Policy refuses inline styles.
    seg.style.width = job.total ? `${(100 * n) / job.total}%` : "0%";
    return seg;
  };
  return h(
    "div",
    {
      class: "bulk-progress",
      role: "progressbar",
      "aria-label": `progress of ${job.id}`,
      "aria-valuemin": "0",
      "aria-valuemax": String(job.total),
      "aria-valuenow": String(reached),
      "aria-valuetext": `${job.done} done, ${job.skipped} skipped of ${job.total}`,
      "data-testid": "bulk-progress",
    },
    segment("done", job.done),
    segment("skipped", job.skipped),
  );
}

function progressText(job) {
  const skipped = job.skipped ? ` · ${job.skipped} skipped` : "";
  return `${job.done}/${job.total}${skipped}`;
}

function jobRow(job) {
  const link = `#/bulk/${enc(job.id)}`;
  return h(
    "tr",
    { "data-testid": "bulk-row", "data-id": job.id, "data-status": job.status },
    h("td", { class: "mono id-cell" }, h("a", { href: link, title: `Open ${job.id}` }, job.id)),
    h("td", { "data-testid": "bulk-action" }, actionText(job)),
    h("td", { class: "mono bulk-filter", title: job.filter }, job.filter),
    h("td", {}, jobBadge(job.status)),
    h(
      "td",
      { class: "bulk-progress-cell" },
      progressBar(job),
      h("span", { class: "num-cell small", "data-testid": "bulk-count" }, progressText(job)),
    ),
    h("td", {}, timeCell(job.created_at)),
    h("td", {}, job.ended_at === null ? "—" : timeCell(job.ended_at)),
    h("td", { "data-testid": "bulk-by" }, job.started_by || "—"),
  );
}

/** #/bulk: the jobs, newest first, filtered by status. */
export function renderList(root, params) {
  const statusSelect = h(
    "select",
    { "aria-label": "job status", "data-testid": "bulk-filter-status" },
    h("option", { value: "" }, "Any status"),
    JOB_STATUSES.map((s) => h("option", { value: s }, s)),
  );
  statusSelect.value = JOB_STATUSES.includes(params.status) ? params.status : "";
  const body = h("tbody", {});
  const summary = h("div", { class: "summary", "data-testid": "bulk-summary" }, "Newest first");
  root.append(
    h(
      "div",
      { class: "page-head" },
      h("div", {}, h("h1", {}, "Bulk jobs"), summary),
    ),
    h(
      "div",
      { class: "toolbar card" },
      statusSelect,
      h("span", { class: "muted small bulk-hint" },
        "Start one from ", h("a", { href: "#/instances" }, "Instances"), ": filter, then ",
        h("em", {}, "Bulk action"), "."),
    ),
    h(
      "div",
      { class: "card table-card" },
      h(
        "div",
        { class: "table-scroll" },
        h(
          "table",
          { class: "table", "data-testid": "bulk-jobs" },
          h("thead", {}, h("tr", {}, ["Job", "Action", "Filter", "Status", "Progress", "Started", "Ended", "By"]
            .map((t) => h("th", { scope: "col" }, t)))),
          body,
        ),
      ),
    ),
  );

  let timer = null;
  let stopped = false;
  async function load() {
    clearTimeout(timer);
    const query = statusSelect.value ? `?status=${enc(statusSelect.value)}` : "";
    try {
      const data = await api("GET", `/api/bulk${query}`);
      if (stopped) return;
      const running = data.jobs.filter((j) => j.status === "running").length;
      summary.textContent = `Newest first · ${data.jobs.length} shown · ${running} running`;
      replace(
        body,
        data.jobs.length
          ? data.jobs.map(jobRow)
          : h("tr", {}, h("td", { colspan: "8", class: "empty", "data-testid": "no-bulk" },
            "No bulk jobs. Start one from the Instances page (Bulk action), the CLI or POST /api/bulk.")),
      );
    } catch (err) {
      if (!stopped) toast(err.message, "error");
    } finally {
      if (!stopped) timer = setTimeout(load, LIST_MS);
    }
  }
  statusSelect.addEventListener("change", load);
  load();
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}

function fact(label, value, testid) {
  return h("div", { class: "fact" }, h("dt", {}, label), h("dd", { "data-testid": testid }, value));
}

/** #/bulk/{id}: one job, its progress followed live until it ends; Cancel while it runs. */
export function renderJob(root, params) {
  const jobId = params.id;
  const head = h("div", { class: "head-status" });
  const progress = h("div", { class: "bulk-progress-box" });
  const facts = h("dl", { class: "facts", "data-testid": "bulk-facts" });
  const cancel = h(
    "button",
    { type: "button", class: "danger", "data-needs": "admin", "data-testid": "bulk-cancel", hidden: true },
    "Cancel job",
  );
  const live = h("span", { class: "live", "aria-live": "polite" });
  root.append(
    h("div", { class: "crumbs" }, h("a", { href: "#/bulk" }, "Bulk jobs"), " / ", jobId),
    h(
      "div",
      { class: "page-head" },
      h("div", {}, h("h1", { class: "mono inst-id" }, jobId), head),
      h("div", { class: "row" }, live, cancel),
    ),
    h("section", { class: "card" }, h("h3", {}, "Progress"), progress),
    h("section", { class: "card" }, h("h3", {}, "Job"), facts),
  );

  let timer = null;
  let stopped = false;

  function show(job) {
    replace(head, jobBadge(job.status));
    head.firstChild.setAttribute("data-testid", "bulk-status");
    replace(
      progress,
      progressBar(job),
      h(
        "p",
        { class: "bulk-figures", "data-testid": "bulk-figures" },
        `${job.done} done · ${job.skipped} skipped · ${job.total - job.done - job.skipped} to go · ${job.total} matched`,
      ),
    );
    const end = job.ended_at || Date.now() / 1000;
    replace(
      facts,
      fact("Action", actionText(job), "bulk-job-action"),
      fact("Filter", h("code", { class: "mono bulk-filter-full" }, job.filter), "bulk-job-filter"),
      fact("Started by", job.started_by || "—", "bulk-job-by"),
      fact("Started", formatTime(job.created_at)),
      fact("Ended", job.ended_at === null ? "—" : formatTime(job.ended_at)),
      fact("Duration", formatDuration(end - job.created_at)),
      fact("Last progress", formatTime(job.updated_at)),
      job.last_skip ? fact("Last skipped because", job.last_skip, "bulk-last-skip") : null,
      fact("Instances", h("a", { href: `#/instances?where=${enc(job.filter)}` }, "Those matching the filter now")),
    );
    cancel.hidden = job.status !== "running";
    live.textContent = job.status === "running" ? "● live" : "";
  }

  async function load() {
    clearTimeout(timer);
    let running = true;
    try {
      const job = await api("GET", `/api/bulk/${enc(jobId)}`);
      if (stopped) return;
      show(job);
      running = job.status === "running";
    } catch (err) {
      if (stopped) return;
      if (err.status === 404) {
        replace(root, h("div", { class: "empty-state", "data-testid": "bulk-missing" },
          h("h2", {}, "No such bulk job"), h("p", { class: "mono" }, jobId),
          h("a", { href: "#/bulk" }, "Back to bulk jobs")));
        return;
      }
      toast(err.message, "error");
    }
    if (!stopped && running) timer = setTimeout(load, JOB_MS);
  }

  cancel.addEventListener("click", async () => {
    if (!confirm(`Cancel bulk job ${jobId}? What it did stays done.`)) return;
    cancel.disabled = true;
    try {
      show(await api("POST", `/api/bulk/${enc(jobId)}/cancel`));
      toast(`Bulk job ${jobId} cancelled`, "ok");
    } catch (err) {
      toast(err.message, "error");
    } finally {
      cancel.disabled = false;
    }
  });
  load();
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}
