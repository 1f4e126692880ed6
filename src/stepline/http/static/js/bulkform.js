// The instances page's "Bulk action" panel: the action runs on what the page's filters match.
// It first asks for a dry run (POST /api/bulk with dry_run) and shows the count and the first
// instances; only then does a Start button appear, which starts exactly the previewed filter
// and opens the job's page. Admin only, as the API (hidden for other roles, see app.js).

import { api, enc } from "./api.js";
import { h, instanceBadge, replace, toast } from "./dom.js";
import { go } from "./router.js";

const ACTIONS = ["terminate", "pause", "resume", "restart", "delete"];

/** The page's filters as the bulk API takes them: the status select joins the `where` box. */
export function bulkFilter({ workflow, status, where }) {
  const parts = [];
  if (where) parts.push(status ? `(${where})` : where);
  if (status) parts.push(`status = '${status}'`);
  return { where: parts.join(" and ") || null, workflow: workflow || null };
}

/** The panel; `filters()` gives the page's current {workflow, status, where}. Call `reset()`
 * when they change, so that a preview never stands for another filter. */
export function bulkPanel(filters) {
  const action = h(
    "select",
    { "aria-label": "bulk action", "data-testid": "bulk-action-select" },
    ACTIONS.map((a) => h("option", { value: a }, a)),
  );
  const fromStep = h("input", {
    type: "text",
    autocomplete: "off",
    placeholder: "from step (optional)",
    "aria-label": "restart from step",
    "data-testid": "bulk-from-step",
    hidden: true,
  });
  const preview = h("button", { type: "submit", "data-testid": "bulk-preview" }, "Preview");
  const error = h("div", { class: "form-error", role: "alert", "data-testid": "bulk-error" });
  const result = h("div", { class: "bulk-preview", "aria-live": "polite", "data-testid": "bulk-dry-run" });
  const form = h(
    "form",
    { class: "bulk-form" },
    h("div", { class: "row" }, action, fromStep, preview),
    error,
    result,
  );

  function reset() {
    error.textContent = "";
    replace(result);
  }

  async function start(chosen, button) {
    button.disabled = true;
    try {
      const job = await api("POST", "/api/bulk", chosen);
      toast(`Bulk ${job.action} started: ${job.total} instances`, "ok");
      go(`#/bulk/${enc(job.id)}`);
    } catch (err) {
      error.textContent = err.message;
      button.disabled = false;
    }
  }

  function showDryRun(chosen, run) {
    const verb = chosen.from_step ? `restart from ${chosen.from_step}` : chosen.action;
    const items = run.first.map((inst) =>
      h(
        "li",
        { "data-testid": "bulk-first" },
        h("a", { class: "mono", href: `#/workflows/${enc(inst.workflow)}/instances/${enc(inst.id)}` }, inst.id),
        " ",
        h("span", { class: "muted" }, inst.workflow),
        " ",
        instanceBadge(inst, "badge-sm"),
      ));
    const more = run.count > run.first.length ? h("p", { class: "muted small" }, `and ${run.count - run.first.length} more`) : null;
    if (!run.count) {
      replace(result, h("p", { "data-testid": "bulk-count" }, "No instance matches: nothing to do."));
      return;
    }
    const startButton = h(
      "button",
      { type: "button", class: "primary danger-primary", "data-testid": "bulk-start" },
      `Start: ${verb} ${run.count} instance${run.count === 1 ? "" : "s"}`,
    );
    startButton.addEventListener("click", () => start(chosen, startButton));
    const back = h("button", { type: "button", "data-testid": "bulk-back" }, "Cancel");
    back.addEventListener("click", () => {
      reset();
      preview.focus();
    });
    replace(
      result,
      h(
        "p",
        { "data-testid": "bulk-count", tabindex: "-1" },
        h("strong", {}, String(run.count)),
        run.count === 1 ? ` instance matches: ${verb} would act on it` : ` instances match: ${verb} would act on them`,
      ),
      h("p", { class: "muted small mono bulk-filter-full" }, run.filter),
      h("ul", { class: "bulk-first" }, items),
      more,
      h("div", { class: "row bulk-confirm" }, startButton, back),
    );
    // The count takes the focus (a screen reader reads it), not Start: a second Enter after
    // Preview must not start the job.
    result.querySelector("[data-testid=bulk-count]").focus();
  }

  action.addEventListener("change", () => {
    fromStep.hidden = action.value !== "restart";
    reset();
  });
  fromStep.addEventListener("input", reset);
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    reset();
    const chosen = { action: action.value, ...bulkFilter(filters()) };
    const step = fromStep.value.trim();
    if (action.value === "restart" && step) chosen.from_step = step;
    preview.disabled = true;
    try {
      const { from_step: _, ...dry } = chosen;
      showDryRun(chosen, await api("POST", "/api/bulk", { ...dry, dry_run: true }));
    } catch (err) {
      error.textContent = err.message;
    } finally {
      preview.disabled = false;
    }
  });

  const el = h(
    "details",
    { class: "bulk-box card", "data-needs": "admin", "data-testid": "bulk-box" },
    h("summary", {}, "Bulk action on the filtered instances"),
    form,
  );
  return { el, reset };
}
