// notifyd-api.js — what the notifyd web components share: the API's error
// type and one JSON request helper. Served beside them at /ui/ and imported
// by relative URL, so a page loads it without knowing it exists.

/**
 * An error answered by the notifyd API, or a network failure (status 0). A
 * page on an origin the daemon does not take gets code origin_not_allowed
 * (403), whose message says to add it to http.allowed_origins.
 */
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

/**
 * crossOriginHint says what to check when a request to another origin failed
 * without an answer: the browser hides why (a refused CORS preflight looks
 * like a network failure), and the usual cause is an origin missing from the
 * daemon's http.allowed_origins. A daemon that refuses an origin answers
 * 403 origin_not_allowed, which the page can read; this is for one that
 * could not say (not running, older, behind a proxy that answered instead).
 */
export function crossOriginHint(url) {
  let target;
  try {
    target = new URL(url, location.href);
  } catch {
    return "";
  }
  if (target.origin === location.origin) return "";
  return ` (calling ${target.origin} from ${location.origin}: check that notifyd is running there,` +
    ` and add this origin, ${location.origin}, to http.allowed_origins in its config)`;
}

/**
 * withTenant adds ?tenant= (or &tenant=) to an API path when tenant is set:
 * the inbox and preference routes then reach only that tenant's items and
 * rules.
 */
export function withTenant(path, tenant) {
  if (!tenant) return path;
  return path + (path.includes("?") ? "&" : "?") + "tenant=" + encodeURIComponent(tenant);
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
  const url = apiURL(endpoint, path);
  try {
    res = await fetch(url, init);
  } catch (err) {
    if (err && err.name === "AbortError") throw new NotifydError(0, null, "aborted");
    throw new NotifydError(0, null, "network error: " + (err && err.message) + crossOriginHint(url));
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
