// DAG graph as SVG: nodes by level (left to right), coloured by the state of their step.

import { h, svg } from "./dom.js";

const NODE_W = 150;
const NODE_H = 38;
const GAP_X = 70;
const GAP_Y = 18;
const PAD = 16;

function nodeName(node) {
  if (typeof node === "string") return node;
  if (node && typeof node === "object") return String(node.name ?? node.id ?? "");
  return String(node);
}

function edgeEnds(edge) {
  if (Array.isArray(edge)) return [nodeName(edge[0]), nodeName(edge[1])];
  if (edge && typeof edge === "object") {
    return [nodeName(edge.from ?? edge.source ?? edge.src), nodeName(edge.to ?? edge.target ?? edge.dst)];
  }
  return [null, null];
}

/** Levels from the definition, or computed as longest-path layers. */
function levelsOf(names, edges, given) {
  if (Array.isArray(given) && given.length) {
    const levels = given.map((level) => (Array.isArray(level) ? level.map(nodeName) : [nodeName(level)]));
    const placed = new Set(levels.flat());
    const rest = names.filter((n) => !placed.has(n));
    if (rest.length) levels.push(rest);
    return levels;
  }
  const depth = new Map(names.map((n) => [n, 0]));
  for (let i = 0; i < names.length; i += 1) {
    for (const [a, b] of edges) {
      if (depth.has(a) && depth.has(b) && depth.get(b) < depth.get(a) + 1) depth.set(b, depth.get(a) + 1);
    }
  }
  const levels = [];
  for (const n of names) {
    const d = depth.get(n);
    (levels[d] = levels[d] || []).push(n);
  }
  return levels.filter(Boolean);
}

function stateClass(state) {
  return `n-${String(state).replace(/[^a-z]+/gi, "-")}`;
}

/** The graph of a DAG or pipeline instance: def = {nodes, edges, levels, states}. */
export function graph(def) {
  const nodes = new Map((def.nodes || []).map((n) => [nodeName(n), n]));
  const names = [...nodes.keys()];
  const edges = (def.edges || []).map(edgeEnds).filter(([a, b]) => a && b);
  const levels = levelsOf(names, edges, def.levels);
  const states = def.states || {};
  const tallest = Math.max(1, ...levels.map((l) => l.length));
  const width = PAD * 2 + levels.length * NODE_W + (levels.length - 1) * GAP_X;
  const height = PAD * 2 + tallest * NODE_H + (tallest - 1) * GAP_Y;
  const pos = new Map();
  levels.forEach((level, x) => {
    const offset = ((tallest - level.length) * (NODE_H + GAP_Y)) / 2;
    level.forEach((name, y) => {
      pos.set(name, { x: PAD + x * (NODE_W + GAP_X), y: PAD + offset + y * (NODE_H + GAP_Y) });
    });
  });
  const root = svg("svg", {
    class: "dag",
    viewBox: `0 0 ${width} ${height}`,
    width: String(width),
    height: String(height),
    role: "img",
    "aria-label": "workflow graph",
    "data-testid": "dag",
  });
  root.append(
    svg(
      "defs",
      {},
      svg(
        "marker",
        { id: "arrow", viewBox: "0 0 10 10", refX: "9", refY: "5", markerWidth: "7", markerHeight: "7", orient: "auto-start-reverse" },
        svg("path", { d: "M 0 0 L 10 5 L 0 10 z", class: "arrow" }),
      ),
    ),
  );
  for (const [a, b] of edges) {
    const p = pos.get(a);
    const q = pos.get(b);
    if (!p || !q) continue;
    const x1 = p.x + NODE_W;
    const y1 = p.y + NODE_H / 2;
    const x2 = q.x;
    const y2 = q.y + NODE_H / 2;
    const mid = (x1 + x2) / 2;
    const done = states[a] === "complete";
    root.append(
      svg("path", {
        class: ["edge", done ? "edge-done" : null],
        d: `M ${x1} ${y1} C ${mid} ${y1}, ${mid} ${y2}, ${x2 - 2} ${y2}`,
        "marker-end": "url(#arrow)",
      }),
    );
  }
  for (const name of names) {
    const p = pos.get(name);
    if (!p) continue;
    const state = states[name] || "pending";
    const node = nodes.get(name);
    const child = node && typeof node === "object" && node.type === "child";
    const text = child ? `↗ ${name}` : name;
    const label = text.length > 18 ? `${text.slice(0, 17)}…` : text;
    const what = child && node.workflow ? ` (workflow ${node.workflow})` : "";
    root.append(
      svg(
        "g",
        { class: ["node", stateClass(state)], transform: `translate(${p.x} ${p.y})`, "data-node": name, "data-state": state },
        svg("title", {}, `${name}${what}: ${state}`),
        svg("rect", { width: String(NODE_W), height: String(NODE_H), rx: "8", ry: "8" }),
        svg("circle", { cx: "16", cy: String(NODE_H / 2), r: "5", class: "node-dot" }),
        svg("text", { x: "28", y: String(NODE_H / 2 + 4) }, label),
      ),
    );
  }
  return h(
    "div",
    { class: "dag-wrap" },
    root,
    h(
      "div",
      { class: "legend" },
      ["pending", "running", "retrying", "waiting", "complete", "errored", "rolled back"].map((s) =>
        h("span", { class: "lg" }, h("span", { class: ["sw", stateClass(s)] }), s)),
    ),
  );
}
