// Hash routing: #/workflows, #/instances?workflow=&status=, #/workflows/{name}/instances/{id},
// #/bulk and #/bulk/{id}.

export function go(hash) {
  if (location.hash === hash) window.dispatchEvent(new HashChangeEvent("hashchange"));
  else location.hash = hash;
}

/** Parse location.hash into {page, params}. */
export function parse(hash) {
  const raw = (hash || "").replace(/^#/, "") || "/workflows";
  const [path, query = ""] = raw.split("?");
  const params = Object.fromEntries(new URLSearchParams(query));
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  if (parts[0] === "instances" && parts.length === 1) return { page: "instances", params };
  if (parts[0] === "workflows" && parts.length === 4 && parts[2] === "instances") {
    return { page: "instance", params: { ...params, workflow: parts[1], id: parts[3] } };
  }
  if (parts[0] === "workflows" && parts.length === 1) return { page: "workflows", params };
  if (parts[0] === "bulk" && parts.length === 1) return { page: "bulk", params };
  if (parts[0] === "bulk" && parts.length === 2) return { page: "bulkjob", params: { ...params, id: parts[1] } };
  return { page: "notfound", params: { path } };
}

/** Set the query of the current hash route without adding a history entry. */
export function setQuery(params) {
  const [path] = location.hash.replace(/^#/, "").split("?");
  const query = new URLSearchParams(
    Object.entries(params).filter(([, v]) => v !== "" && v !== null && v !== undefined),
  ).toString();
  history.replaceState(null, "", `#${path || "/"}${query ? `?${query}` : ""}`);
}
