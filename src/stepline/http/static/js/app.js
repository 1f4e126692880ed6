// Dashboard entry point: routing, navigation state and the API token prompt.

import { api, getToken, onTokenNeeded, setToken } from "./api.js";
import { renderJob as renderBulkJob, renderList as renderBulk } from "./bulk.js";
import { clear, h, replace } from "./dom.js";
import { render as renderInstance } from "./instance.js";
import { render as renderInstances } from "./instances.js";
import { parse } from "./router.js";
import { render as renderWorkflows } from "./workflows.js";

const PAGES = {
  workflows: renderWorkflows,
  instances: renderInstances,
  instance: renderInstance,
  bulk: renderBulk,
  bulkjob: renderBulkJob,
  notfound: (root, params) => {
    root.append(
      h("div", { class: "empty-state" }, h("h2", {}, "Page not found"), h("p", {}, `#${params.path}`),
        h("a", { href: "#/workflows" }, "Back to workflows")),
    );
    return null;
  },
};

let cleanup = null;

function route() {
  const { page, params } = parse(location.hash);
  if (cleanup) cleanup();
  cleanup = null;
  const root = clear(document.getElementById("view"));
  for (const link of document.querySelectorAll("[data-nav]")) {
    const parent = { instance: "instances", bulkjob: "bulk" }[page];
    const active = link.dataset.nav === page || link.dataset.nav === parent;
    link.classList.toggle("active", active);
  }
  cleanup = PAGES[page](root, params) || null;
  window.scrollTo(0, 0);
}

function askForToken(wrong) {
  const dialog = document.getElementById("token-dialog");
  const input = dialog.querySelector("input");
  const note = dialog.querySelector("[data-role=note]");
  note.textContent = wrong
    ? "That token was refused. Enter the server's API token."
    : "This server needs an API token (STEPLINE_API_TOKEN or --token).";
  input.value = "";
  // Escape closes the dialog without touching returnValue: clear the last one.
  dialog.returnValue = "";
  return new Promise((resolve) => {
    dialog.addEventListener(
      "close",
      () => resolve(dialog.returnValue === "ok" ? input.value.trim() : ""),
      { once: true },
    );
    dialog.showModal();
    input.focus();
  }).then((token) => {
    updateLock();
    if (!token) {
      tokenNeeded();
      throw new Error("an API token is needed to use this dashboard");
    }
    return token;
  });
}

/** After Cancel: stop the page and say what is missing, with a way back to the prompt. */
function tokenNeeded() {
  if (cleanup) cleanup();
  cleanup = null;
  replace(
    document.getElementById("view"),
    h(
      "div",
      { class: "empty-state", "data-testid": "token-needed" },
      h("h2", {}, "This server needs an API token"),
      h("p", {}, "It was set with ", h("code", {}, "STEPLINE_API_TOKEN"), " or ", h("code", {}, "--token"),
        " when the server started."),
      h("button", { type: "button", class: "primary", onclick: route }, "Enter the token"),
    ),
  );
}

function updateLock() {
  const lock = document.getElementById("lock");
  lock.hidden = !getToken();
}

/** Learn the token's role (GET /api/whoami): the page hides what the role cannot do. */
async function refreshRole() {
  const badge = document.getElementById("role");
  try {
    const me = await api("GET", "/api/whoami");
    document.body.dataset.role = me.role;
    badge.textContent = me.name ? `${me.name} · ${me.role}` : me.role;
    badge.hidden = !me.secured;
  } catch {
    delete document.body.dataset.role;
    badge.hidden = true;
  }
}

onTokenNeeded(askForToken);
window.addEventListener("stepline-token", refreshRole);
refreshRole();
document.querySelector("#token-dialog [data-testid=token-cancel]").addEventListener("click", () => {
  document.getElementById("token-dialog").close("cancel");
});
document.getElementById("lock").addEventListener("click", () => {
  setToken("");
  updateLock();
  route();
});
updateLock();
window.addEventListener("hashchange", route);
route();
