// notifyd-api.js — what the notifyd web components share: the API's error
// type and one JSON request helper. Served beside them at /ui/ and imported
// by relative URL, so a page loads it without knowing it exists.

/** An error answered by the notifyd API, or a network failure (status 0). */
export class NotifydError extends Error {
  constructor(status, body, fallback) {
    const e = (body && body.error) || {};
    super(e.message || fallback || `HTTP ${status}`);
    this.name = "NotifydError";
    this.status = status;
    this.code = e.code || (status === 0 ? "network_error" : "http_error");
    this.details = Array.isArray(e.details) ? e.details : [];
  }
}

/** endpoint (a base URL, or "" for the same origin) joined with an API path. */
export function apiURL(endpoint, path) {
  return String(endpoint || "").replace(/\/+$/, "") + path;
}

/**
 * Calls the API with the recipient token: JSON in, JSON out. A refusal throws
 * a NotifydError with the API's error code and details; an aborted request
 * throws one whose message is "aborted".
 */
export async function request({ endpoint, token, method, path, body, signal, keepalive = false }) {
  const headers = { Authorization: "Bearer " + token, Accept: "application/json" };
  const init = { method, headers, cache: "no-store", credentials: "omit", keepalive };
  if (signal) init.signal = signal;
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let res;
  try {
    res = await fetch(apiURL(endpoint, path), init);
  } catch (err) {
    throw new NotifydError(0, null, err && err.name === "AbortError" ? "aborted" : "network error: " + (err && err.message));
  }
  const text = await res.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = null;
  }
  if (!res.ok) throw new NotifydError(res.status, data, text.slice(0, 200));
  return data;
}
