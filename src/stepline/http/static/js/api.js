// The API client: JSON over fetch, with the bearer token kept in sessionStorage.

const TOKEN_KEY = "stepline.token";

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

export function getToken() {
  return sessionStorage.getItem(TOKEN_KEY) || "";
}

export function setToken(token) {
  if (token) sessionStorage.setItem(TOKEN_KEY, token);
  else sessionStorage.removeItem(TOKEN_KEY);
  window.dispatchEvent(new Event("stepline-token"));
}

let askToken = null;
let pendingAsk = null;

/** Install the function that asks the user for a token (returns a promise of the token). */
export function onTokenNeeded(fn) {
  askToken = fn;
}

function headers(extra) {
  const out = { Accept: "application/json", ...extra };
  const token = getToken();
  if (token) out.Authorization = `Bearer ${token}`;
  return out;
}

async function tokenFromUser(wrong) {
  if (!askToken) throw new ApiError(401, "unauthorized", "this server needs an API token");
  if (!pendingAsk) {
    pendingAsk = askToken(wrong).finally(() => {
      pendingAsk = null;
    });
  }
  const token = await pendingAsk;
  setToken(token);
}

/** fetch an API path; JSON in, JSON out; errors raise ApiError with the server's message. */
export async function api(method, path, body) {
  for (let attempt = 0; attempt < 5; attempt += 1) {
    const init = { method, headers: headers() };
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = typeof body === "string" ? body : JSON.stringify(body);
    }
    let response;
    try {
      response = await fetch(path, init);
    } catch (err) {
      throw new ApiError(0, "network", `cannot reach the server: ${err.message}`);
    }
    if (response.status === 401) {
      await tokenFromUser(Boolean(getToken()));
      continue;
    }
    const text = await response.text();
    let data = null;
    try {
      data = text ? JSON.parse(text) : null;
    } catch {
      data = null;
    }
    if (!response.ok) {
      const err = data && data.error ? data.error : {};
      throw new ApiError(
        response.status,
        err.code || "http_error",
        err.message || `${method} ${path} failed with HTTP ${response.status}`,
      );
    }
    return data;
  }
  throw new ApiError(401, "unauthorized", "the API token was refused");
}

export const enc = encodeURIComponent;

export function instancePath(workflow, id) {
  return `/api/workflows/${enc(workflow)}/instances/${enc(id)}`;
}

/**
 * Follow an instance live over Server-Sent Events (read with fetch so the token can be sent).
 * Calls onData(detail) for every change; returns a function that stops. Falls back to polling
 * when streaming fails.
 */
export function follow(workflow, id, onData, { pollMs = 1500 } = {}) {
  let stopped = false;
  let finished = false;
  const controller = new AbortController();
  let timer = null;

  async function poll() {
    while (!stopped) {
      try {
        const detail = await api("GET", instancePath(workflow, id));
        if (stopped) return;
        onData(detail);
        if (["complete", "errored", "terminated"].includes(detail.workflow.status)) return;
      } catch (err) {
        if (err.status === 404) return;
      }
      await new Promise((resolve) => {
        timer = setTimeout(resolve, pollMs);
      });
    }
  }

  async function stream() {
    const response = await fetch(`${instancePath(workflow, id)}/stream`, {
      headers: headers({ Accept: "text/event-stream" }),
      signal: controller.signal,
    });
    if (!response.ok || !response.body) throw new Error(`stream HTTP ${response.status}`);
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value;
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        let event = "message";
        const data = [];
        for (const line of block.split("\n")) {
          if (line.startsWith("event:")) event = line.slice(6).trim();
          else if (line.startsWith("data:")) data.push(line.slice(5).trimStart());
        }
        if (event === "instance" && !stopped) {
          const detail = JSON.parse(data.join("\n"));
          finished = ["complete", "errored", "terminated"].includes(detail.workflow.status);
          onData(detail);
        }
        if (event === "end" || event === "error") return;
      }
    }
  }

  stream().then(
    () => {
      if (!stopped && !finished) poll();
    },
    () => {
      if (!stopped) poll();
    },
  );
  return () => {
    stopped = true;
    controller.abort();
    if (timer) clearTimeout(timer);
  };
}
