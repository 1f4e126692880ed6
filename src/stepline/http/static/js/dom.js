// DOM helpers. Every piece of user data reaches the page as a text node or an attribute value
// (textContent / setAttribute); the dashboard never parses a string as HTML.

const SVG_NS = "http://www.w3.org/2000/svg";

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

function setAttrs(el, attrs) {
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith("on") && typeof value === "function") {
      el.addEventListener(key.slice(2).toLowerCase(), value);
    } else if (key === "class") {
      el.setAttribute("class", Array.isArray(value) ? value.filter(Boolean).join(" ") : value);
    } else if (key === "text") {
      el.textContent = String(value);
    } else if (key === "value" && "value" in el) {
      el.value = value;
    } else if (key === "checked" || key === "disabled" || key === "selected") {
      el[key] = Boolean(value);
    } else {
      el.setAttribute(key, value === true ? "" : String(value));
    }
  }
}

/** h("div", {class: "x"}, "text", child, [more]) -> an element. */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  setAttrs(el, attrs);
  append(el, children);
  return el;
}

/** The SVG twin of h(). */
export function svg(tag, attrs, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  setAttrs(el, attrs);
  append(el, children);
  return el;
}

export function clear(el) {
  while (el.firstChild) el.removeChild(el.firstChild);
  return el;
}

/** Replace el's children, keeping the scroll position and open <details> by data-key. */
export function replace(el, ...children) {
  const open = new Set(
    [...el.querySelectorAll("details[open][data-key]")].map((d) => d.getAttribute("data-key")),
  );
  clear(el);
  append(el, children);
  for (const d of el.querySelectorAll("details[data-key]")) {
    if (open.has(d.getAttribute("data-key"))) d.open = true;
  }
  return el;
}

export const STATUSES = [
  "queued",
  "running",
  "waiting",
  "paused",
  "waitingForPause",
  "complete",
  "errored",
  "terminated",
];
export const FINISHED = new Set(["complete", "errored", "terminated"]);

const STATUS_LABELS = { waitingForPause: "pausing" };

export function statusBadge(status, extra) {
  return h(
    "span",
    { class: ["badge", `s-${status}`, extra], "data-status": status, title: status },
    h("span", { class: "dot" }),
    STATUS_LABELS[status] || status,
  );
}

/** Whether the instance waits to try a failed step again (the API's `retry`): its status is
 * `waiting`, but "retrying" says why. */
export function isRetrying(inst) {
  return Boolean(inst.retry) && inst.status === "waiting";
}

/** The instance's status badge: "retrying" (its status is still `waiting`) while a failed step
 * waits for its next attempt. */
export function instanceBadge(inst, extra) {
  if (!isRetrying(inst)) return statusBadge(inst.status, extra);
  return h(
    "span",
    { class: ["badge", "s-retrying", extra], "data-status": inst.status, title: "waiting to retry a failed step" },
    h("span", { class: "dot" }),
    "retrying",
  );
}

/** "charge-1: attempt 2 failed, ValueError: declined" (the error cut to `limit` characters). */
export function retrySummary(retry, limit = 80) {
  const error = `${retry.error.name}: ${retry.error.message}`;
  return `${retry.step}: attempt ${retry.attempt} failed, ${truncate(error, limit)}`;
}

// -- formatting ----------------------------------------------------------------------------------

export function formatDuration(seconds) {
  if (seconds === null || seconds === undefined || !isFinite(seconds)) return "—";
  if (seconds < 0) seconds = 0;
  if (seconds < 1) return `${Math.round(seconds * 1000)} ms`;
  if (seconds < 60) return `${seconds.toFixed(seconds < 10 ? 2 : 1)} s`;
  const m = Math.floor(seconds / 60);
  const s = Math.round(seconds % 60);
  if (m < 60) return `${m}m ${s}s`;
  const hrs = Math.floor(m / 60);
  if (hrs < 48) return `${hrs}h ${m % 60}m`;
  return `${Math.floor(hrs / 24)}d ${hrs % 24}h`;
}

export function formatTime(epoch) {
  if (epoch === null || epoch === undefined) return "—";
  const d = new Date(epoch * 1000);
  const pad = (n, w = 2) => String(n).padStart(w, "0");
  return (
    `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ` +
    `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`
  );
}

export function formatClock(epoch) {
  const d = new Date(epoch * 1000);
  const pad = (n) => String(n).padStart(2, "0");
  return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

export function relativeTime(epoch) {
  if (epoch === null || epoch === undefined) return "—";
  const delta = Date.now() / 1000 - epoch;
  const future = delta < 0;
  const a = Math.abs(delta);
  let text;
  if (a < 5) return future ? "in a moment" : "just now";
  if (a < 60) text = `${Math.round(a)}s`;
  else if (a < 3600) text = `${Math.round(a / 60)}m`;
  else if (a < 86400 * 2) text = `${Math.round(a / 3600)}h`;
  else text = `${Math.round(a / 86400)}d`;
  return future ? `in ${text}` : `${text} ago`;
}

/** A <time> showing relative time, with the absolute time as its tooltip. */
export function timeCell(epoch) {
  if (epoch === null || epoch === undefined) return h("span", { class: "muted" }, "—");
  return h("time", { datetime: new Date(epoch * 1000).toISOString(), title: formatTime(epoch) },
    relativeTime(epoch));
}

export function pretty(value) {
  if (value === undefined) return "";
  return JSON.stringify(value, null, 2);
}

/** A <pre> with JSON (or a muted placeholder for null). */
export function jsonBlock(value, testid) {
  if (value === null || value === undefined) {
    return h("pre", { class: "json empty", "data-testid": testid }, "null");
  }
  return h("pre", { class: "json", "data-testid": testid }, pretty(value));
}

export function truncate(text, length) {
  text = String(text);
  return text.length > length ? `${text.slice(0, length - 1)}…` : text;
}

// -- toasts --------------------------------------------------------------------------------------

export function toast(message, kind = "info") {
  let box = document.getElementById("toasts");
  if (!box) {
    box = h("div", { id: "toasts", role: "status", "aria-live": "polite" });
    document.body.append(box);
  }
  const item = h("div", { class: ["toast", `toast-${kind}`], "data-testid": "toast" }, message);
  box.append(item);
  setTimeout(() => item.classList.add("leaving"), 4200);
  setTimeout(() => item.remove(), 4600);
}
