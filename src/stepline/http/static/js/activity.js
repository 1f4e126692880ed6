// The activity panel (on the workflows page): instances ended per minute over the last hour,
// complete and failed, and the fleet's backlog and held instances now, from GET /api/activity.

import { api } from "./api.js";
import { formatClock, h, replace, svg, toast } from "./dom.js";

const REFRESH_MS = 10000;
const WIDTH = 600;
const HEIGHT = 120;

function figure(label, value, testid, title) {
  return h(
    "div",
    { class: "figure", "data-testid": testid, title },
    h("span", { class: "num" }, String(value)),
    h("span", { class: "label" }, label),
  );
}

/** Stacked bars, one per minute: complete below, errored and terminated above. */
function chart(data) {
  const rows = data.ended;
  const top = Math.max(1, ...rows.map((r) => r.complete + r.errored + r.terminated));
  const step = WIDTH / rows.length;
  const bars = [];
  rows.forEach((row, i) => {
    let y = HEIGHT;
    for (const status of ["complete", "errored", "terminated"]) {
      const n = row[status];
      if (!n) continue;
      const height = Math.max(1, (n / top) * (HEIGHT - 4));
      y -= height;
      bars.push(
        svg(
          "rect",
          {
            class: `bar s-${status}`,
            x: (i * step + 0.5).toFixed(1),
            y: y.toFixed(1),
            width: Math.max(1, step - 1).toFixed(1),
            height: height.toFixed(1),
            "data-status": status,
          },
          svg("title", {}, `${formatClock(row.start)}: ${n} ${status}`),
        ),
      );
    }
  });
  return svg(
    "svg",
    {
      class: "activity-chart",
      viewBox: `0 0 ${WIDTH} ${HEIGHT}`,
      preserveAspectRatio: "none",
      role: "img",
      "aria-label": "instances ended per minute, last hour",
      "data-testid": "activity-chart",
    },
    svg("line", { class: "axis", x1: 0, y1: HEIGHT, x2: WIDTH, y2: HEIGHT }),
    ...bars,
  );
}

/** The panel: a card that refreshes itself until stopped. */
export function activityPanel() {
  const figures = h("div", { class: "figures" });
  const plot = h("div", { class: "plot" });
  const scale = h("div", { class: "scale muted" });
  const el = h(
    "section",
    { class: "card activity-card", "data-testid": "activity" },
    h("h3", {}, "Activity ", h("span", { class: "muted" }, "· last hour")),
    figures,
    plot,
    scale,
  );
  let timer = null;
  let stopped = false;

  async function load() {
    try {
      const data = await api("GET", "/api/activity");
      if (stopped) return;
      const sum = (status) => data.ended.reduce((n, r) => n + r[status], 0);
      const failed = sum("errored") + sum("terminated");
      replace(
        figures,
        figure("completed", sum("complete"), "activity-complete", "instances completed in the last hour"),
        figure("failed", failed, "activity-failed", "errored or terminated in the last hour"),
        figure("backlog", data.backlog, "activity-backlog", "due to run, no worker runs them yet"),
        figure("held", data.held, "activity-held", "due, held back by a full limit"),
        figure("live workers", data.workers_live, "activity-workers", "workers heartbeating now"),
      );
      replace(plot, chart(data));
      const top = Math.max(0, ...data.ended.map((r) => r.complete + r.errored + r.terminated));
      replace(
        scale,
        h("span", {}, formatClock(data.since)),
        h("span", {}, `peak ${top}/min`),
        h("span", {}, "now"),
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
