// The timeline: one row per step, one bar per attempt; sleeps, waits and retry delays visible.

import { formatClock, formatDuration, h } from "./dom.js";

const TYPE_LABELS = {
  do: "do",
  sleep: "sleep",
  wait_for_event: "event",
  rollback: "rollback",
  start_workflow: "start",
  wait_for_workflow: "child",
};

/** Bars of one step: [{start, end, kind, label, open}] (end null = still going). */
export function barsOf(step, now) {
  const bars = [];
  if (step.type === "sleep") {
    const end = step.ended_at ?? step.wake_at;
    bars.push({
      start: step.started_at,
      end,
      kind: "sleep",
      label: step.status === "waiting" ? `sleeping until ${formatClock(step.wake_at)}` : "slept",
      open: step.status === "waiting" && end > now,
    });
    return bars;
  }
  if (step.type === "wait_for_event" || step.type === "wait_for_workflow") {
    const what = step.info && step.info.type ? `event "${step.info.type}"` : "child workflow";
    let label = `waited for ${what}`;
    if (step.status === "waiting") label = `waiting for ${what}`;
    if (step.status === "errored") label = `timed out waiting for ${what}`;
    bars.push({
      start: step.started_at,
      end: step.ended_at,
      kind: step.status === "errored" ? "wait timeout" : "wait",
      label,
      open: step.ended_at === null || step.ended_at === undefined,
    });
    return bars;
  }
  let previousEnd = null;
  for (const attempt of step.attempts) {
    if (previousEnd !== null && attempt.started_at > previousEnd) {
      bars.push({ start: previousEnd, end: attempt.started_at, kind: "delay", label: "retry delay" });
    }
    const failed = attempt.state === "failed" || attempt.state === "interrupted";
    bars.push({
      start: attempt.started_at,
      end: attempt.ended_at,
      kind: failed ? attempt.state : attempt.state === "running" ? "running" : "ok",
      label: failed
        ? `attempt ${attempt.number} ${attempt.state}: ${attempt.error?.name}: ${attempt.error?.message}`
        : `attempt ${attempt.number}`,
      attempt: attempt.number,
    });
    previousEnd = attempt.ended_at;
  }
  if (step.status === "running" && step.info && step.info.attempt_started_at) {
    if (previousEnd !== null && step.info.attempt_started_at > previousEnd) {
      bars.push({
        start: previousEnd,
        end: step.info.attempt_started_at,
        kind: "delay",
        label: "retry delay",
      });
    }
    bars.push({
      start: step.info.attempt_started_at,
      end: null,
      kind: "running",
      label: `attempt ${step.attempts.length + 1} running`,
      attempt: step.attempts.length + 1,
      open: true,
    });
  } else if (step.status === "waiting" && step.wake_at && previousEnd !== null) {
    bars.push({
      start: previousEnd,
      end: step.wake_at,
      kind: "delay",
      label: `retry at ${formatClock(step.wake_at)}`,
      open: step.wake_at > now,
    });
  }
  if (!bars.length && step.started_at) {
    bars.push({ start: step.started_at, end: step.ended_at, kind: "ok", label: step.type });
  }
  return bars;
}

// A narrow axis hides the quarter ticks, then the middle one (style.css, by container width).
const TICK_CLASSES = ["tick", "tick quarter", "tick mid", "tick quarter", "tick"];

function ticks(t0, t1) {
  const out = h("div", { class: "tl-axis" });
  for (let i = 0; i <= 4; i += 1) {
    const tick = h("span", { class: TICK_CLASSES[i] }, `+${formatDuration(((t1 - t0) * i) / 4)}`);
    tick.style.left = `${i * 25}%`;
    out.append(tick);
  }
  return out;
}

function barEl(step, bar, cls, left, width, count) {
  const el = h(
    "div",
    {
      class: ["tl-bar", ...bar.kind.split(" ").map((k) => `b-${k}`), ...cls],
      title: `${step.name}: ${bar.label}`,
      "data-kind": bar.kind,
    },
    bar.attempt && count > 1 ? h("span", { class: "n" }, `#${bar.attempt}`) : null,
  );
  el.style.left = left;
  el.style.width = width;
  return el;
}

export function timeline(detail) {
  const inst = detail.workflow;
  const steps = detail.steps;
  const now = Date.now() / 1000;
  if (!steps.length) {
    return h("div", { class: "empty", "data-testid": "timeline" }, "No steps yet.");
  }
  const rows = steps.map((step) => ({ step, bars: barsOf(step, now) }));
  const starts = rows.flatMap((r) => r.bars.map((b) => b.start)).filter((t) => t != null);
  const t0 = Math.min(inst.started_at ?? inst.created_at, ...starts);
  const finished = ["complete", "errored", "terminated"].includes(inst.status);
  let t1 = finished && inst.ended_at ? inst.ended_at : now;
  for (const r of rows) {
    for (const b of r.bars) if (b.end != null && b.end <= now) t1 = Math.max(t1, b.end);
  }
  if (!finished) {
    // Show planned wake-ups (sleeps, retry delays) when they are near enough to fit.
    const horizon = t0 + 4 * Math.max(now - t0, 1);
    for (const r of rows) {
      for (const b of r.bars) if (b.end != null && b.end > t1 && b.end <= horizon) t1 = b.end;
    }
  }
  if (t1 - t0 < 0.001) t1 = t0 + 0.001;
  const span = t1 - t0;
  const at = (t) => (Math.max(0, Math.min(t, t1) - t0) / span) * 100;

  const list = h("div", { class: "tl-rows" });
  for (const { step, bars } of rows) {
    const track = h("div", { class: "tl-track" });
    const count = bars.filter((b) => b.attempt).length;
    for (const bar of bars) {
      const end = bar.end == null ? now : bar.end;
      const split = !finished && end > now && bar.start < now;
      const cut = split ? now : end;
      const clipped = end > t1 ? ["clipped"] : [];
      track.append(
        barEl(step, { ...bar, label: `${bar.label} · ${formatDuration(end - bar.start)}` },
          [bar.open || split ? "open" : null, ...(split ? [] : clipped)],
          `${at(bar.start)}%`, `${at(cut) - at(bar.start)}%`, count),
      );
      if (split) {
        track.append(barEl(step, { ...bar, attempt: null, label: `${bar.label} (planned)` },
          ["future", ...clipped], `${at(now)}%`, `${at(end) - at(now)}%`, count));
      }
    }
    if (!finished) {
      const line = h("div", { class: "tl-now" });
      line.style.left = `${at(now)}%`;
      track.append(line);
    }
    const retries = step.attempts.filter((a) => a.state === "failed").length;
    list.append(
      h(
        "div",
        { class: "tl-row", "data-testid": "timeline-row", "data-step": step.name },
        h(
          "div",
          { class: "tl-label", title: step.name },
          h("span", { class: ["type", `t-${step.type}`] }, TYPE_LABELS[step.type] || step.type),
          h("span", { class: "mono" }, step.name),
          retries ? h("span", { class: "retries", title: `${retries} failed attempts` }, `↻${retries}`) : null,
        ),
        track,
      ),
    );
  }
  return h(
    "div",
    { class: "timeline", "data-testid": "timeline" },
    h("div", { class: "tl-head" }, h("div", { class: "tl-label muted" }, "step"), ticks(t0, t1)),
    list,
    h(
      "div",
      { class: "legend" },
      [["ok", "attempt ok"], ["failed", "attempt failed"], ["running", "running"],
        ["delay", "retry delay"], ["sleep", "sleep"], ["wait", "waiting for event"]].map(([k, t]) =>
        h("span", { class: "lg" }, h("span", { class: ["sw", `b-${k}`] }), t)),
    ),
  );
}
