// Instance page: status, params, output or error, DAG graph, streams' latest values, timeline,
// steps; controls; live.

import { api, enc, follow, instancePath } from "./api.js";
import {
  FINISHED,
  formatDuration,
  formatTime,
  h,
  instanceBadge,
  isRetrying,
  jsonBlock,
  pretty,
  replace,
  retrySummary,
  timeCell,
  toast,
} from "./dom.js";
import { graph } from "./graph.js";
import { go } from "./router.js";
import { timeline } from "./timeline.js";
import { unservedBanner } from "./workers.js";

/** Why a due instance has not started (the API's `held`: its full limits), or null. */
function heldBanner(inst) {
  if (!inst.held || !inst.held.length) return null;
  return h("div", { class: "unserved", role: "status", "data-testid": "held" },
    `⏸ Held back by flow control: ${inst.held.join("; ")}`);
}

/** Which failed step a retrying instance will try again, and when (the API's `retry`). */
function retryBanner(inst) {
  if (!isRetrying(inst)) return null;
  const next = inst.retry.next_attempt_at;
  return h("div", { class: "unserved", role: "status", "data-testid": "retry" },
    `↻ Retrying ${retrySummary(inst.retry, 300)}`,
    next ? ["; next attempt ", timeCell(next)] : null);
}

function stepDuration(step) {
  if (!step.started_at) return null;
  const end = step.ended_at ?? (step.status === "waiting" || step.status === "running" ? Date.now() / 1000 : null);
  return end === null ? null : end - step.started_at;
}

function attemptsCell(step) {
  if (step.type !== "do" && step.type !== "rollback") return h("span", { class: "muted" }, "—");
  const failed = step.attempts.filter((a) => a.state === "failed").length;
  const total = step.attempts.length + (step.status === "running" ? 1 : 0);
  return h(
    "span",
    {},
    String(total),
    failed ? h("span", { class: "retries", title: `${failed} failed` }, ` (${failed} failed)`) : null,
  );
}

function outputCell(step, index) {
  if (step.error) {
    return h(
      "details",
      { class: "out err", "data-key": `err-${step.name}-${index}` },
      h("summary", {}, `${step.error.name}: ${step.error.message}`.slice(0, 90)),
      h("pre", { class: "json" }, pretty(step.error)),
    );
  }
  if (step.output === null || step.output === undefined) {
    if (step.status === "waiting" && step.wake_at) {
      return h("span", { class: "muted" }, step.type === "sleep" ? "wakes " : step.type === "do" ? "retries " : "times out ", timeCell(step.wake_at));
    }
    return h("span", { class: "muted" }, "—");
  }
  const text = pretty(step.output);
  return h(
    "details",
    { class: "out", "data-key": `out-${step.name}-${index}` },
    h("summary", { class: "mono" }, text.replace(/\s+/g, " ").slice(0, 60)),
    h("pre", { class: "json" }, text),
  );
}

function stepsTable(steps) {
  if (!steps.length) return h("div", { class: "empty" }, "No steps recorded yet.");
  return h(
    "table",
    { class: "table steps", "data-testid": "steps" },
    h("thead", {}, h("tr", {}, ["#", "Step", "Type", "State", "Attempts", "Duration", "Output"].map((t) => h("th", {}, t)))),
    h(
      "tbody",
      {},
      steps.map((step, i) =>
        h(
          "tr",
          { "data-testid": "step-row", "data-step": step.name },
          h("td", { class: "muted num-cell" }, String(i + 1)),
          h("td", { class: "mono" }, step.name),
          h("td", {}, h("span", { class: ["type", `t-${step.type}`] }, step.type)),
          h("td", {}, h("span", { class: ["state", `st-${step.status}`] }, step.status)),
          h("td", { class: "num-cell" }, attemptsCell(step)),
          h("td", { class: "num-cell" }, formatDuration(stepDuration(step))),
          h("td", { class: "out-cell" }, outputCell(step, i)),
        ),
      ),
    ),
  );
}

/** The latest item of each stream the instance publishes to (`step.publish`), or null. */
function streamsTable(streams) {
  if (!streams || !streams.length) return null;
  return h(
    "table",
    { class: "table streams", "data-testid": "streams" },
    h("thead", {}, h("tr", {}, ["Stream", "#", "Latest value", "Published"].map((t) => h("th", {}, t)))),
    h(
      "tbody",
      {},
      streams.map((item) => {
        const text = pretty(item.value);
        return h(
          "tr",
          { "data-testid": "stream-row", "data-stream": item.stream },
          h("td", { class: "mono" }, item.stream),
          h("td", { class: "num-cell muted" }, String(item.seq)),
          h(
            "td",
            { class: "out-cell" },
            h(
              "details",
              { class: "out", "data-key": `stream-${item.stream}` },
              h("summary", { class: "mono", "data-testid": "stream-value" }, text.replace(/\s+/g, " ").slice(0, 80)),
              h("pre", { class: "json" }, text),
            ),
          ),
          h("td", {}, timeCell(item.created_at)),
        );
      }),
    ),
  );
}

function fact(label, value) {
  return h("div", { class: "fact" }, h("dt", {}, label), h("dd", {}, value));
}

export function render(root, params) {
  const { workflow, id } = params;
  const path = instancePath(workflow, id);
  const badge = h("span", { "data-testid": "status" });
  const live = h("span", { class: "live", "data-testid": "live" });
  const facts = h("dl", { class: "facts", "data-testid": "facts" });
  const paramsBox = h("div", {});
  const resultBox = h("section", { class: "card" });
  const graphCard = h("section", { class: "card", hidden: true, "data-testid": "graph" },
    h("h3", {}, "Graph"), h("div", {}));
  const timelineBox = h("div", {});
  const stepsBox = h("div", { class: "table-scroll" });
  const streamsBox = h("div", { class: "table-scroll" });
  const streamsCard = h("section", { class: "card table-card", hidden: true },
    h("h3", {}, "Streams"), streamsBox);
  const warningBox = h("div", {});
  const heldBox = h("div", {});
  const retryBox = h("div", {});

  const button = (label, testid, cls, onclick, needs = "operate") =>
    h("button", { type: "button", class: cls, "data-testid": testid, "data-needs": needs, onclick }, label);
  const rollback = h("input", { type: "checkbox", "data-testid": "rollback" });
  const restartFrom = h("select", { "aria-label": "restart from", "data-testid": "restart-from" });
  const pauseBtn = button("Pause", "pause", null, () => change({ status: "pause" }));
  const resumeBtn = button("Resume", "resume", null, () => change({ status: "resume" }));
  const terminateBtn = button("Terminate", "terminate", "danger", () => {
    if (!confirm(`Terminate ${id}${rollback.checked ? " (with rollback)" : ""}?`)) return;
    change({ status: "terminate", ...(rollback.checked ? { rollback: true } : {}) });
  });
  const restartBtn = button("Restart", "restart", null, () => {
    const body = { status: "restart" };
    if (restartFrom.value) {
      const [step, count] = JSON.parse(restartFrom.value);
      body.from = step;
      body.count = count;
    }
    change(body);
  });
  const deleteBtn = button("Delete", "delete", "danger ghost", async () => {
    if (!confirm(`Delete instance ${id} and its history?`)) return;
    try {
      await api("DELETE", path);
      toast(`Deleted ${id}`, "ok");
      go(`#/instances?workflow=${enc(workflow)}`);
    } catch (err) {
      toast(err.message, "error");
    }
  }, "admin");

  const eventType = h("input", { type: "text", placeholder: "event type", required: true, "data-testid": "event-type", "aria-label": "event type" });
  const eventPayload = h("textarea", { class: "code", rows: "2", spellcheck: "false", placeholder: "payload (JSON, optional)", "data-testid": "event-payload", "aria-label": "event payload" });
  const eventError = h("div", { class: "form-error", role: "alert" });
  // What the instance waits for, under the field: a placeholder that long would be cut off.
  const eventHint = h("p", { class: "event-hint muted small", "data-testid": "event-hint", hidden: true });
  const eventBtn = h("button", { type: "submit", class: "primary", "data-testid": "send-event" }, "Send event");
  const eventForm = h(
    "form",
    { class: "event-form", "data-testid": "event-form", "data-needs": "operate" },
    h("div", { class: "row" }, eventType, eventBtn),
    eventHint,
    eventPayload,
    eventError,
  );
  eventForm.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    eventError.textContent = "";
    const type = eventType.value.trim();
    const text = eventPayload.value.trim();
    if (text) {
      try {
        JSON.parse(text);
      } catch (err) {
        eventError.textContent = `Payload is not valid JSON: ${err.message}`;
        return;
      }
    }
    eventBtn.disabled = true;
    try {
      await api("POST", `${path}/events/${enc(type)}`, text || undefined);
      toast(`Sent event "${type}"`, "ok");
      eventPayload.value = "";
      restartFollow();
    } catch (err) {
      eventError.textContent = err.message;
    } finally {
      eventBtn.disabled = false;
    }
  });

  root.append(
    h(
      "nav",
      { class: "crumbs" },
      h("a", { href: "#/workflows" }, "Workflows"),
      " › ",
      h("a", { href: `#/instances?workflow=${enc(workflow)}` }, workflow),
      " › ",
      h("span", { class: "mono" }, id),
    ),
    h(
      "div",
      { class: "page-head" },
      h("div", {}, h("h1", { class: "mono inst-id" }, id), h("div", { class: "summary" }, workflow)),
      h("div", { class: "head-status" }, live, badge),
    ),
    warningBox,
    heldBox,
    retryBox,
    h(
      "div",
      { class: "grid-2" },
      h(
        "section",
        { class: "card controls", "data-needs": "operate", "data-testid": "controls" },
        h("h3", {}, "Controls"),
        h(
          "div",
          { class: "buttons" },
          pauseBtn,
          resumeBtn,
          h("span", { class: "group" }, terminateBtn, h("label", { class: "check" }, rollback, " rollback")),
          h("span", { class: "group" }, restartBtn, restartFrom),
          deleteBtn,
        ),
        h("h3", {}, "Send an event"),
        eventForm,
      ),
      h("section", { class: "card" }, h("h3", {}, "Overview"), facts),
    ),
    h(
      "div",
      { class: "grid-2" },
      h("section", { class: "card" }, h("h3", {}, "Params"), paramsBox),
      resultBox,
    ),
    graphCard,
    streamsCard,
    h("section", { class: "card" }, h("h3", {}, "Timeline"), timelineBox),
    h("section", { class: "card table-card" }, h("h3", {}, "Steps"), stepsBox),
  );

  let current = null;
  let stop = null;
  let stopped = false;

  function update(detail) {
    current = detail;
    const inst = detail.workflow;
    replace(badge, instanceBadge(inst, "badge-lg"));
    replace(warningBox, unservedBanner(inst));
    replace(heldBox, heldBanner(inst));
    replace(retryBox, retryBanner(inst));
    const finished = FINISHED.has(inst.status);
    live.textContent = finished ? "" : "● live";
    pauseBtn.disabled = !["queued", "running", "waiting"].includes(inst.status);
    resumeBtn.disabled = !["paused", "waitingForPause"].includes(inst.status);
    terminateBtn.disabled = finished;
    rollback.disabled = finished;
    eventBtn.disabled = finished;
    // The API deletes finished instances only (the client's rule): terminate first.
    deleteBtn.disabled = !finished;
    deleteBtn.title = finished ? "" : "terminate the instance before deleting it";
    const awaited = detail.steps.find((s) => s.type === "wait_for_event" && s.status === "waiting");
    const awaitedType = awaited && awaited.info && awaited.info.type;
    eventHint.hidden = !awaitedType || finished;
    eventHint.textContent = awaitedType ? `It waits for an event of type "${awaitedType}".` : "";
    const end = inst.ended_at ?? (inst.started_at ? Date.now() / 1000 : null);
    replace(
      facts,
      fact("Created", h("span", { title: formatTime(inst.created_at) }, formatTime(inst.created_at))),
      fact("Started", inst.started_at ? formatTime(inst.started_at) : "—"),
      fact("Ended", inst.ended_at ? formatTime(inst.ended_at) : "—"),
      fact("Duration", inst.started_at ? formatDuration(end - inst.started_at) : "—"),
      fact("Trigger", inst.trigger),
      inst.key != null ? fact("Key", inst.key) : null,
      inst.priority ? fact("Priority", String(inst.priority)) : null,
      fact("Steps", String(detail.steps.length)),
      inst.wake_at ? fact("Wakes", timeCell(inst.wake_at)) : null,
      inst.delete_at ? fact("Deleted", timeCell(inst.delete_at)) : null,
      inst.parent ? fact("Parent", h("a", { href: `#/workflows/${enc(inst.parent.workflow)}/instances/${enc(inst.parent.id)}` }, `${inst.parent.workflow}/${inst.parent.id}`)) : null,
    );
    replace(paramsBox, jsonBlock(inst.params, "params"));
    if (inst.error) {
      replace(
        resultBox,
        h("h3", {}, "Error"),
        h("div", { class: "error-box", "data-testid": "error" }, h("strong", {}, inst.error.name), ": ", inst.error.message),
        inst.rollback ? h("details", {}, h("summary", {}, "Rollback"), jsonBlock(inst.rollback)) : null,
      );
    } else if (finished) {
      replace(resultBox, h("h3", {}, "Output"), jsonBlock(inst.output, "output"));
    } else {
      replace(resultBox); // no output before the instance ends: no card (it would show null)
    }
    resultBox.hidden = !inst.error && !finished;
    const chosen = restartFrom.value;
    replace(
      restartFrom,
      h("option", { value: "" }, "from the start"),
      detail.steps
        .filter((s) => s.type !== "rollback")
        .map((s) => h("option", { value: JSON.stringify([s.step, s.count]) }, `from ${s.name}`)),
    );
    restartFrom.value = [...restartFrom.options].some((o) => o.value === chosen) ? chosen : "";
    replace(timelineBox, timeline(detail));
    replace(stepsBox, stepsTable(detail.steps));
    const streams = streamsTable(detail.streams);
    streamsCard.hidden = !streams;
    replace(streamsBox, streams);
    graphCard.hidden = !detail.graph;
    if (detail.graph) replace(graphCard.lastChild, graph(detail.graph));
  }

  function restartFollow() {
    if (stop) stop();
    stop = follow(workflow, id, update);
  }

  async function change(body) {
    try {
      const result = await api("PATCH", `${path}/status`, body);
      toast(`${body.status}: now ${result.status}`, "ok");
      restartFollow();
    } catch (err) {
      toast(err.message, "error");
    }
  }

  // A ticking clock keeps running bars and durations moving between server updates.
  const ticker = setInterval(() => {
    if (current && !FINISHED.has(current.workflow.status)) {
      replace(timelineBox, timeline(current));
    }
  }, 1000);

  api("GET", path)
    .then((detail) => {
      update(detail);
      restartFollow();
    })
    .catch((err) => {
      if (stopped) return;
      replace(root, h("div", { class: "empty-state" }, h("h2", {}, "Cannot show this instance"), h("p", {}, err.message)));
    });

  return () => {
    stopped = true;
    clearInterval(ticker);
    if (stop) stop();
  };
}
