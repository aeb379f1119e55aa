// console.js: notifyd's operator console. Plain JavaScript, no build step,
// served by the daemon at /admin/. Every view reads the admin API of the same
// origin, the one a script would use, with the admin token the operator
// pasted (kept in this tab's sessionStorage, sent as a bearer token), or,
// signed in with single sign-on, the session cookie and its CSRF token.
//
// Views are URL fragments, so a view can be linked:
//   #/                      notifications, newest first (filters in the query: #/?status=failed)
//   #/overview              charts: deliveries per hour, failure rate, queue depth
//   #/deliveries            deliveries across notifications (#/deliveries?status=failed&channel=email&range=1h)
//   #/n/<id>                a notification: fan-out progress and every delivery
//   #/d/<id>                a delivery, the message it sends and its failed attempts
//   #/r/<recipient>         a recipient: profile, preferences, mutes, subscriptions, suppressions, inbox, deliveries
//   #/preview               template preview per notifier and channel
//   #/send                  send a test notification, params from the notifier's schema
//   #/audit                 the audit log: who changed what (#/audit?action=delivery.retry), with a JSON-lines export
//
// Nothing from the API is ever parsed as HTML: text goes in as text nodes.
// No request path is built from data by concatenation alone: every id, key
// or name goes in as one encoded path segment (seg), and "." or "..", which a
// URL parser resolves however they are encoded, is refused.

const TOKEN_KEY = "notifyd.admin_token";
// Statuses a delivery can be retried from (the API says the same with 409).
const RETRYABLE = ["failed", "rate_limited", "pending", "expired", "refused"];
const NOTIFICATION_STATUSES = ["scheduled", "pending", "fanned_out", "cancelled", "rejected"];
// Statuses that count as failures: the list marks them, the charts paint them red.
const FAILED = ["failed", "refused", "expired", "digest_failed"];
const SVG = "http://www.w3.org/2000/svg";

const $ = (sel) => document.querySelector(sel);

/** el builds an element: attributes (on* are listeners) and children (strings become text). */
function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (k === "dataset") Object.assign(e.dataset, v);
    else e.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

class APIError extends Error {
  constructor(status, body) {
    const e = (body && body.error) || {};
    super(e.message || `HTTP ${status}`);
    this.status = status;
    this.code = e.code || "http_error";
    // details: [{field, message}] for request fields, [{pointer, message}]
    // (a JSON pointer into params) for invalid_params.
    this.details = Array.isArray(e.details) ? e.details : [];
  }
}

function token() {
  return sessionStorage.getItem(TOKEN_KEY) || "";
}

// csrf is the CSRF token of a single sign-on session (the notifyd_csrf
// cookie, set with the HttpOnly session cookie at sign-in); "" for none.
function csrf() {
  const m = document.cookie.match(/(?:^|;\s*)notifyd_csrf=([^;]*)/);
  return m ? decodeURIComponent(m[1]) : "";
}

function forgetSession() {
  document.cookie = "notifyd_csrf=; Max-Age=0; Path=/; SameSite=Lax";
}

// authInit is how a request authenticates: the pasted token as a bearer
// token (no cookies), or else the session cookie with, on a state-changing
// request, the session's CSRF token.
function authInit(method) {
  const headers = { Accept: "application/json" };
  if (token()) {
    headers.Authorization = "Bearer " + token();
    return { method, headers, cache: "no-store", credentials: "omit" };
  }
  if (method !== "GET" && method !== "HEAD") headers["X-CSRF-Token"] = csrf();
  return { method, headers, cache: "no-store", credentials: "same-origin" };
}

/**
 * api calls the admin API. State-changing calls also send X-Notifyd-Console
 * (the server refuses cross-site browser requests by their Origin and
 * Sec-Fetch-Site headers; the bearer token itself is never sent by a browser
 * on its own, which is what makes the API safe from forged requests).
 */
async function api(method, path, body) {
  const init = authInit(method);
  const headers = init.headers;
  if (method !== "GET") headers["X-Notifyd-Console"] = "1";
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const res = await fetch(path, init);
  const text = await res.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = null;
  }
  if (res.status === 401) {
    sessionStorage.removeItem(TOKEN_KEY);
    forgetSession();
    showSignin("Refused: " + ((data && data.error && data.error.message) || "401"));
  }
  if (!res.ok) throw new APIError(res.status, data);
  return data;
}

function say(text, error = false, details = []) {
  const s = $("#status");
  s.textContent = text || "";
  s.classList.toggle("error", !!error);
  $("#status-details").replaceChildren(...details.map((d) => el("li", {}, detailText(d))));
}

/** detailText is one error detail: the field (or params pointer) and its message. */
function detailText(d) {
  const where = d.field !== undefined ? d.field : d.pointer !== undefined ? "params" + (d.pointer || "") : "";
  return where ? `${where}: ${d.message}` : d.message;
}

function fmtTime(t) {
  if (!t) return "";
  const d = new Date(t);
  return isNaN(d) ? String(t) : d.toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
}

function status(s) {
  return el("span", { class: "status " + s, "data-status": s }, s);
}

const enc = encodeURIComponent;
const link = (href, text) => el("a", { href }, text);

/**
 * seg is one path segment of an API request: encoded, and never "." or "..",
 * which URL parsers resolve as a step up however they are written ("%2e%2e"
 * included), so that no id, key or name from the data can turn a request into
 * one for another route.
 */
function seg(s) {
  const v = String(s);
  if (v === "" || v === "." || v === "..") throw new Error(`cannot address ${JSON.stringify(v)} in a request path`);
  return encodeURIComponent(v);
}

/** svg builds an SVG element (attributes only: presentation attributes, never style). */
function svg(tag, attrs = {}, ...children) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null) continue;
    if (k === "dataset") Object.assign(e.dataset, v);
    else e.setAttribute(k, String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

// --- notifications ---

async function viewNotifications(params) {
  const here = location.hash;
  const f = {
    notifier: params.get("notifier") || "",
    key: params.get("key") || "",
    recipient: params.get("recipient") || "",
    tenant: params.get("tenant") || "",
    status: params.get("status") || "",
    after: params.get("after") || "",
    before: params.get("before") || "",
  };
  const notifiers = await notifierCatalog();
  const form = el("form", { class: "filters", id: "filters" },
    el("label", {}, "Notifier", el("select", { name: "notifier" }, el("option", { value: "" }, "any"),
      notifiers.notifiers.map((n) => el("option", { value: n.name, selected: n.name === f.notifier }, n.name)))),
    el("label", {}, "Key", el("input", { name: "key", value: f.key })),
    el("label", {}, "Recipient", el("input", { name: "recipient", value: f.recipient })),
    el("label", {}, "Tenant", tenantSelect("notification-tenant", f.tenant)),
    el("label", {}, "Status", el("select", { name: "status" }, el("option", { value: "" }, "any"),
      NOTIFICATION_STATUSES.map((s) => el("option", { value: s, selected: s === f.status }, s)))),
    el("label", {}, "Created after", el("input", { name: "after", type: "datetime-local", value: localInput(f.after) })),
    el("label", {}, "Created before", el("input", { name: "before", type: "datetime-local", value: localInput(f.before) })),
    el("button", { type: "submit" }, "Filter"),
    el("a", { href: "#/" }, "clear"));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const q = new URLSearchParams();
    for (const [k, v] of new FormData(form)) {
      if (!v) continue;
      q.set(k, k === "after" || k === "before" ? new Date(v).toISOString() : v);
    }
    location.hash = "#/?" + q.toString();
  });
  const body = el("tbody", { id: "notifications" });
  const more = el("button", { type: "button", id: "more", hidden: true }, "Older");
  const table = el("table", {},
    el("thead", {}, el("tr", {}, ["Created", "Notifier", "Key", "Actor", "Status", "Deliveries", "Error"].map((h) => el("th", {}, h)))), body);
  view(here, el("section", {}, el("h2", {}, "Notifications"), form), el("section", {}, table, el("p", {}, more)));

  let cursor = "";
  const load = async () => {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(f)) if (v) q.set(k, v);
    if (cursor) q.set("cursor", cursor);
    q.set("limit", "50");
    say("Loading…");
    const page = await api("GET", "/v1/notifications?" + q.toString());
    for (const n of page.items) {
      // A notification whose deliveries failed is marked, whatever its own
      // status says (fanned_out only means the fan-out finished).
      body.append(el("tr", { dataset: { id: n.id, failed: String(n.failed || 0) }, class: n.failed ? "has-failures" : null },
        el("td", { class: "mono" }, fmtTime(n.created_at)),
        el("td", {}, n.notifier),
        el("td", {}, link("#/n/" + enc(n.id), n.key)),
        el("td", {}, n.actor || ""),
        el("td", {}, status(n.status), n.failed ? [" ", el("span", { class: "badge failures", title: "failed, refused or expired deliveries" }, `${n.failed} failed`)] : null),
        el("td", { class: "channels" }, channelCounts(n.channels, n.counts_truncated)),
        el("td", { class: "err" }, n.error || "")));
    }
    cursor = page.next_cursor || "";
    more.hidden = !cursor;
    const rows = body.children.length;
    say(rows === 0 && !cursor ? "No notifications match." : `${rows} shown${cursor ? "; more are older" : ""}.`);
  };
  more.addEventListener("click", () => load().catch(fail));
  await load();
}

/** channelCounts shows a notification's deliveries per channel: "email 2 sent · 1 failed". */
function channelCounts(channels, truncated) {
  const names = Object.keys(channels || {}).sort();
  if (names.length === 0) return el("span", { class: "muted" }, "none yet");
  return el("ul", { class: "counts" }, names.map((ch) => el("li", { dataset: { channel: ch } }, `${ch} `,
    Object.entries(channels[ch]).sort(([a], [b]) => a.localeCompare(b)).map(([s, c], i) =>
      [i > 0 ? " · " : "", el("span", { class: FAILED.includes(s) ? "count failed" : "count", dataset: { status: s } },
        `${c}${truncated ? "+" : ""} ${s}`)]))));
}

function localInput(iso) {
  if (!iso) return "";
  const d = new Date(iso);
  if (isNaN(d)) return "";
  const pad = (n) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}`;
}

let catalog = null;
const isInbox = (channel) => !!(catalog && catalog.channels.some((c) => c.name === channel && c.inbox));
async function notifierCatalog() {
  if (!catalog) catalog = await api("GET", "/v1/notifiers");
  return catalog;
}

/**
 * tenantSelect is a tenant filter: "any", then the tenants (the first 200),
 * filled in when GET /v1/tenants answers so that the view does not wait for
 * it; a selected tenant is there from the start.
 */
function tenantSelect(id, selected) {
  const sel = el("select", { name: "tenant", id },
    el("option", { value: "" }, "any"),
    selected ? el("option", { value: selected, selected: true }, selected) : null);
  api("GET", "/v1/tenants?limit=200").then((page) => {
    for (const t of page.items) {
      if (t.id !== selected) sel.append(el("option", { value: t.id }, t.id));
    }
  }).catch(() => {}); // the filter still works with a typed-in hash
  return sel;
}

// --- deliveries across notifications ---

// Time ranges of the deliveries view, relative to now when the view loads
// (a link to "the last hour" stays the last hour).
const RANGES = [["15m", "last 15 minutes", 15 * 60e3], ["1h", "last hour", 3600e3], ["24h", "last 24 hours", 86400e3],
  ["7d", "last 7 days", 7 * 86400e3], ["", "any time", 0], ["custom", "between…", 0]];
const DELIVERY_STATUS_CHOICES = [["", "any"], ["failed,refused,expired", "failures (failed, refused, expired)"],
  ["failed", "failed"], ["refused", "refused"], ["expired", "expired"], ["sent", "sent"], ["delivered", "delivered"],
  ["bounced", "bounced"], ["complained", "complained"], ["pending", "pending"],
  ["sending", "sending"], ["scheduled", "scheduled"], ["rate_limited", "rate_limited"], ["skipped", "skipped"],
  ["suppressed", "suppressed"], ["unavailable", "unavailable"], ["cancelled", "cancelled"], ["throttled", "throttled"],
  ["batched", "batched"], ["digest_pending", "digest_pending"], ["digest_sent", "digest_sent"], ["digest_failed", "digest_failed"]];

/** deliveryQuery is the API query of the view's filters, with the time range resolved now. */
function deliveryQuery(f) {
  const q = new URLSearchParams();
  for (const k of ["status", "channel", "notifier", "recipient", "tenant"]) if (f[k]) q.set(k, f[k]);
  const r = RANGES.find(([v]) => v === f.range);
  if (r && r[2] > 0) q.set("since", new Date(Date.now() - r[2]).toISOString());
  if (f.range === "custom") {
    if (f.since) q.set("since", new Date(f.since).toISOString());
    if (f.until) q.set("until", new Date(f.until).toISOString());
  }
  return q;
}

async function viewDeliveries(params) {
  const here = location.hash;
  const f = {};
  for (const k of ["status", "channel", "notifier", "recipient", "tenant", "range", "since", "until"]) f[k] = params.get(k) || "";
  if (!params.has("range")) f.range = "1h";
  const cat = await notifierCatalog();
  const rangeSel = el("select", { name: "range" }, RANGES.map(([v, label]) => el("option", { value: v, selected: v === f.range }, label)));
  const custom = el("span", { class: "custom-range", hidden: f.range !== "custom" },
    el("label", {}, "From", el("input", { name: "since", type: "datetime-local", value: localInput(f.since) })),
    el("label", {}, "To", el("input", { name: "until", type: "datetime-local", value: localInput(f.until) })));
  rangeSel.addEventListener("change", () => { custom.hidden = rangeSel.value !== "custom"; });
  const choices = DELIVERY_STATUS_CHOICES.some(([v]) => v === f.status) ? DELIVERY_STATUS_CHOICES
    : [...DELIVERY_STATUS_CHOICES, [f.status, f.status]];
  const form = el("form", { class: "filters", id: "delivery-filters" },
    el("label", {}, "Status", el("select", { name: "status" }, choices.map(([v, label]) => el("option", { value: v, selected: v === f.status }, label)))),
    el("label", {}, "Channel", el("select", { name: "channel" }, el("option", { value: "" }, "any"),
      cat.channels.filter((c) => !c.inbox).map((c) => el("option", { value: c.name, selected: c.name === f.channel }, c.name)))),
    el("label", {}, "Notifier", el("select", { name: "notifier" }, el("option", { value: "" }, "any"),
      cat.notifiers.map((n) => el("option", { value: n.name, selected: n.name === f.notifier }, n.name)))),
    el("label", {}, "Recipient", el("input", { name: "recipient", value: f.recipient })),
    el("label", {}, "Tenant", tenantSelect("delivery-tenant", f.tenant)),
    el("label", {}, "Changed", rangeSel), custom,
    el("button", { type: "submit" }, "Filter"),
    el("a", { href: "#/deliveries" }, "clear"));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const q = new URLSearchParams();
    for (const [k, v] of new FormData(form)) {
      if (k === "range") q.set(k, v);
      else if (v && ((k !== "since" && k !== "until") || form.elements.range.value === "custom")) {
        q.set(k, k === "since" || k === "until" ? new Date(v).toISOString() : v);
      }
    }
    location.hash = "#/deliveries?" + q.toString();
  });

  const rows = el("tbody", { id: "deliveries" });
  const more = el("button", { type: "button", id: "deliveries-more", hidden: true }, "Older");
  const bulk = el("div", { id: "bulk" });
  view(here,
    el("section", {}, el("h2", {}, "Deliveries"),
      el("p", { class: "muted" }, "Every delivery across notifications, newest change first."), form),
    el("section", {}, bulk, deliveryTable([], true, rows), el("p", {}, more)));

  const base = deliveryQuery(f);
  let cursor = "";
  const load = async () => {
    const q = new URLSearchParams(base);
    if (cursor) q.set("cursor", cursor);
    q.set("limit", "50");
    say("Loading…");
    const page = await api("GET", "/v1/deliveries?" + q.toString());
    rows.append(...page.items.map((d) => deliveryRow(d, () => viewDeliveries(params), true)));
    cursor = page.next_cursor || "";
    more.hidden = !cursor;
    const n = rows.children.length;
    say(n === 0 && !cursor ? "No deliveries match." : `${n} shown${cursor ? "; more are older" : ""}.`);
  };
  more.addEventListener("click", () => load().catch(fail));
  bulkRetry(bulk, f, base, () => viewDeliveries(params));
  await load();
}

/**
 * bulkRetry offers to retry every failed or expired delivery the filters
 * match (or the retryable statuses they name): it first asks the API how many
 * match (dry_run), shows the count, and retries only on a second click.
 */
function bulkRetry(box, f, q, refresh) {
  const statuses = (f.status || "failed,expired").split(",");
  const retryable = statuses.filter((s) => RETRYABLE.includes(s));
  if (retryable.length === 0) {
    box.replaceChildren();
    return;
  }
  if (!q.get("since")) {
    box.replaceChildren(el("p", { class: "muted" }, "Choose a time range to retry these deliveries in bulk."));
    return;
  }
  const rq = new URLSearchParams(q);
  rq.set("status", retryable.join(","));
  const start = el("button", { type: "button", id: "bulk-retry", class: "retry" }, `Retry every ${retryable.join(" or ")} delivery matching these filters…`);
  const out = el("span", { id: "bulk-confirm" });
  box.replaceChildren(el("p", {}, start, " ", out));
  start.addEventListener("click", async () => {
    start.disabled = true;
    try {
      const dry = await api("POST", "/v1/deliveries/retry?" + new URLSearchParams([...rq, ["dry_run", "true"]]));
      if (dry.matched === 0) {
        out.replaceChildren(el("span", { class: "muted" }, "No delivery matches: nothing to retry."));
        start.disabled = false;
        return;
      }
      const more = dry.matched > 10000 ? " (the first 10,000 are retried; run it again for the rest)" : "";
      const confirm = el("button", { type: "button", id: "bulk-retry-confirm", class: "danger" }, `Retry ${dry.matched} deliveries`);
      const cancel = el("button", { type: "button", id: "bulk-retry-cancel" }, "Cancel");
      out.replaceChildren(el("span", { dataset: { matched: String(dry.matched) } }, `${dry.matched} deliveries match${more}. `), confirm, " ", cancel);
      cancel.addEventListener("click", () => { out.replaceChildren(); start.disabled = false; });
      confirm.addEventListener("click", async () => {
        confirm.disabled = true;
        const here = location.hash;
        try {
          const r = await api("POST", "/v1/deliveries/retry?" + rq);
          if (location.hash !== here) return;
          await refresh();
          say(`Retried ${r.retried} of ${r.matched} matching deliveries: each is due now.`);
        } catch (e) {
          fail(e);
          confirm.disabled = false;
        }
      });
    } catch (e) {
      fail(e);
      start.disabled = false;
    }
  });
}

// --- one notification ---

async function viewNotification(id) {
  const here = location.hash;
  const n = await api("GET", `/v1/notifications/${seg(id)}?progress=true`);
  const p = n.progress;
  let lanes = [n.status === "fanned_out" ? "complete" : n.status];
  if (p.lanes_total > 0) {
    const fill = el("span");
    // CSSOM, not a style attribute: the console's CSP allows no inline styles.
    fill.style.width = Math.round((100 * p.lanes_done) / p.lanes_total) + "%";
    lanes = [el("span", { class: "bar" }, fill), ` ${p.lanes_done} of ${p.lanes_total} lanes done`];
  }
  const cancel = el("button", { type: "button", class: "danger", id: "cancel",
    hidden: ["cancelled", "rejected"].includes(n.status) }, "Cancel notification");
  cancel.addEventListener("click", async () => {
    if (cancel.dataset.armed !== "1") {
      cancel.dataset.armed = "1";
      // The confirmation names the object, and the request names it twice:
      // by id in the path, by notifier and key in the query, which the
      // server checks against the id (409 when they differ).
      cancel.textContent = `Really cancel ${n.notifier} / ${n.key}? Unsent deliveries are withdrawn`;
      return;
    }
    cancel.disabled = true;
    try {
      const q = new URLSearchParams({ notifier: n.notifier, key: n.key });
      const r = await api("DELETE", `/v1/notifications/${seg(n.id)}?${q}`);
      await viewNotification(id);
      say(`Cancelled ${n.notifier} / ${n.key}: ${r.cancelled} deliveries and inbox items withdrawn.`);
    } catch (e) {
      fail(e);
      cancel.disabled = false;
    }
  });
  const counts = Object.entries(p.by_status).flatMap(([ch, m]) =>
    Object.entries(m).map(([s, c]) => el("li", {}, `${ch}: `, status(s), ` ${c}`)));
  const rows = n.deliveries.map((d) => deliveryRow(d, () => viewNotification(id)));
  view(here,
    el("section", {},
      el("h2", {}, `${n.notifier} / ${n.key}`),
      el("dl", {},
        el("dt", {}, "id"), el("dd", { class: "mono" }, n.id),
        el("dt", {}, "status"), el("dd", {}, status(n.status), n.error ? ` ${n.error}` : ""),
        el("dt", {}, "actor"), el("dd", {}, n.actor || "none"),
        el("dt", {}, "created"), el("dd", { class: "mono" }, fmtTime(n.created_at)),
        el("dt", {}, "send at"), el("dd", { class: "mono" }, n.send_at ? fmtTime(n.send_at) : "at once"),
        el("dt", {}, "topics"), el("dd", {}, (n.topics || []).join(", ") || "none"),
        el("dt", {}, "audience"), el("dd", { id: "audience" },
          `${p.audience} recipients reached (${p.inline_recipients} listed, ${p.topics} topics)`),
        el("dt", {}, "fan-out"), el("dd", { id: "fanout" }, lanes),
        el("dt", {}, "params"), el("dd", {}, el("pre", {}, JSON.stringify(n.params, null, 2)))),
      el("ul", { id: "by-status" }, counts),
      el("p", {}, cancel)),
    el("section", {},
      el("h2", {}, "Deliveries" + (n.deliveries_truncated ? " (first 1000)" : "")),
      deliveryTable(rows)));
}

function deliveryTable(rows, withNotification = false, tbody = null) {
  const heads = ["Recipient", "Channel", "Reason", "Mode", "Status", "Attempts", "Last error", "Provider", "Updated", ""];
  if (withNotification) heads.unshift("Notification");
  return el("table", { class: "deliveries" }, el("thead", {}, el("tr", {}, heads.map((h) => el("th", {}, h)))),
    tbody || el("tbody", {}, rows));
}

function deliveryRow(d, refresh, withNotification = false) {
  const retry = RETRYABLE.includes(d.status) && d.channel !== undefined
    ? el("button", { type: "button", class: "retry", onclick: () => retryDelivery(d.id, refresh) }, "Retry")
    : "";
  const id = d.id;
  return el("tr", { dataset: { id, status: d.status } },
    withNotification ? el("td", {}, link("#/n/" + enc(d.notification_id), `${d.notifier} / ${d.key}`)) : null,
    el("td", {}, d.recipient ? link("#/r/" + enc(d.recipient), d.recipient) : "(bulk)"),
    el("td", {}, d.channel),
    el("td", {}, d.reason),
    el("td", {}, d.mode),
    el("td", {}, status(d.status)),
    el("td", {}, String(d.attempts)),
    el("td", { class: "err", title: d.last_error || null }, clip(d.last_error || "", 140)),
    el("td", { class: "mono" }, d.provider || ""),
    el("td", { class: "mono" }, fmtTime(d.updated_at)),
    // An inbox delivery is its inbox item: no ledger row, no attempts.
    el("td", {}, isInbox(d.channel) ? "" : [link("#/d/" + enc(id), "details"), " ", retry]));
}

/** clip shortens a long text for a table cell (the cell's title has it whole). */
function clip(s, n) {
  return s.length > n ? s.slice(0, n - 1) + "…" : s;
}

async function retryDelivery(id, refresh, closeCircuit = false) {
  const here = location.hash;
  try {
    const d = await api("POST", `/v1/deliveries/${seg(id)}/retry`, closeCircuit ? { close_circuit: true } : undefined);
    if (location.hash !== here) return d;
    await refresh();
    say(`Delivery ${id} is due again${closeCircuit ? " (its target's circuit closed)" : ""}.`);
    watch(id, refresh, here);
    return d;
  } catch (e) {
    if (e.code === "circuit_open") {
      // The target is paused: sent now, the delivery would only be parked
      // again. Say so, and offer to close the circuit first.
      say(e.message.replace(/; retry with .*$/, "."), true);
      offerCloseCircuit(id, refresh);
      return null;
    }
    fail(e);
    return null;
  }
}

/** offerCloseCircuit puts a "Close the circuit and retry" button under the status line. */
function offerCloseCircuit(id, refresh) {
  const b = el("button", { type: "button", class: "danger", id: "close-circuit" }, "Close the circuit and retry");
  b.addEventListener("click", () => { b.disabled = true; retryDelivery(id, refresh, true); });
  $("#status-details").replaceChildren(el("li", {}, b));
}

// watch re-reads a retried delivery until it settles (a few seconds at
// most) and refreshes the view when it does, unless the reader has gone to
// another view (here is the one the retry was made from).
async function watch(id, refresh, here) {
  for (let i = 0; i < 30; i++) {
    await new Promise((r) => setTimeout(r, 500));
    if (location.hash !== here) return;
    let d;
    try {
      d = await api("GET", "/v1/deliveries/" + seg(id));
    } catch {
      return;
    }
    if (!["failed", "pending", "sending", "rate_limited"].includes(d.status) || d.next_attempt_at === null) {
      if (location.hash !== here) return;
      await refresh();
      say(`Delivery ${id} is now ${d.status}.`);
      return;
    }
  }
}

// --- one delivery ---

async function viewDelivery(id) {
  const here = location.hash;
  const d = await api("GET", "/v1/deliveries/" + seg(id));
  const refresh = () => viewDelivery(id);
  const c = d.circuit;
  const retry = !RETRYABLE.includes(d.status)
    ? el("span", { class: "muted" }, `A ${d.status} delivery cannot be retried.`)
    : c ? el("button", { type: "button", class: "danger", id: "retry", onclick: () => retryDelivery(d.id, refresh, true) }, "Close the circuit and retry")
      : el("button", { type: "button", class: "retry", id: "retry", onclick: () => retryDelivery(d.id, refresh) }, "Retry now");
  const message = el("div", { id: "message" }, el("p", { class: "muted" }, "Rendering…"));
  view(here,
    el("section", { id: "delivery", dataset: { status: d.status } },
      el("h2", {}, `Delivery to ${d.recipient || "(bulk)"} on ${d.channel}`),
      el("dl", {},
        el("dt", {}, "id"), el("dd", { class: "mono" }, d.id),
        el("dt", {}, "notification"), el("dd", {}, link("#/n/" + enc(d.notification_id), `${d.notifier} / ${d.key}`)),
        el("dt", {}, "recipient"), el("dd", {}, d.recipient ? link("#/r/" + enc(d.recipient), d.recipient) : "(bulk)"),
        el("dt", {}, "tenant"), el("dd", { id: "delivery-tenant" }, d.tenant ? link("#/deliveries?tenant=" + enc(d.tenant), d.tenant) : "none"),
        el("dt", {}, "status"), el("dd", { id: "delivery-status" }, status(d.status)),
        el("dt", {}, "reason / mode"), el("dd", {}, `${d.reason} / ${d.mode}`),
        el("dt", {}, "attempts"), el("dd", {}, String(d.attempts)),
        el("dt", {}, "last error"), el("dd", { class: "err" }, d.last_error || "none"),
        el("dt", {}, "provider"), el("dd", { class: "mono" }, d.provider || "not reported"),
        el("dt", {}, "next attempt"), el("dd", { class: "mono" }, d.next_attempt_at ? fmtTime(d.next_attempt_at) : "none"),
        el("dt", {}, "created"), el("dd", { class: "mono" }, fmtTime(d.created_at)),
        el("dt", {}, "settled"), el("dd", { class: "mono" }, d.settled_at ? fmtTime(d.settled_at) : "not yet")),
      c ? el("p", { class: "circuit", id: "circuit" },
        `The target ${c.target} is paused until ${fmtTime(c.until)} after ${c.failures} failures in a row (last error: ${c.last_error}). `,
        "Retrying now would only park the delivery again; closing the circuit sends it at once.") : null,
      el("p", {}, retry)),
    el("section", {}, el("h2", {}, "Message"), message),
    el("section", {},
      el("h2", {}, "Failed attempts"),
      d.failed_attempts.length === 0
        ? el("p", { class: "muted", id: "attempts-none" }, "No attempt failed.")
        : el("table", { id: "attempts" },
          el("thead", {}, el("tr", {}, ["#", "At", "Error", "Provider"].map((h) => el("th", {}, h)))),
          el("tbody", {}, d.failed_attempts.map((a) => el("tr", {},
            el("td", {}, String(a.attempt)), el("td", { class: "mono" }, fmtTime(a.at)),
            el("td", { class: "err" }, a.error), el("td", { class: "mono" }, a.provider || "")))))));
  // A batched delivery sends nothing itself: the delivery its batch went
  // out with (its carrier, named in its notification's ledger) has the
  // message.
  let carrier = d.batched_into || "";
  if (!carrier && d.status === "batched") {
    try {
      const n = await api("GET", "/v1/notifications/" + seg(d.notification_id));
      carrier = ((n.deliveries || []).find((x) => x.id === d.id) || {}).batched_into || "";
    } catch {
      // said below
    }
    if (!carrier) {
      message.replaceChildren(el("p", { class: "muted", id: "message-none" },
        "Batched: its notification goes out in the message of the delivery that carries its batch, which ",
        link("#/n/" + enc(d.notification_id), "its notification"), " does not name among its first deliveries."));
      return;
    }
  }
  try {
    const pv = await api("GET", `/v1/deliveries/${seg(carrier || id)}/preview`);
    const c = carrier ? await api("GET", "/v1/deliveries/" + seg(carrier)) : d;
    const done = ["sent", "digest_sent"].includes(c.status);
    message.replaceChildren(
      ...(carrier ? [el("p", { id: "carried-by" }, "Batched: its notification goes out in the message of delivery ",
        link("#/d/" + enc(carrier), carrier), ` (${c.status}), shown below.`)] : []),
      el("p", { class: "muted" }, `Rendered now for ${pv.recipient || "the audience"}${pv.locale ? ` (locale ${pv.locale})` : ""}` +
        `${pv.batch_count ? `, a batch of ${pv.batch_count}` : ""}: ` +
        (done ? "what it sent, unless the profile or the templates changed since." : "what the next attempt sends.") +
        " HTML parts are shown as source."),
      // A part the templates left empty (no html template) is not shown.
      ...pv.parts.filter((p) => p.value !== "").map((p) => el("div", { class: "part", dataset: { name: p.name } },
        el("h3", {}, p.name), el("pre", {}, p.value))));
  } catch (e) {
    message.replaceChildren(el("p", { class: "muted", id: "message-none" }, e.message));
  }
}

// --- a recipient ---

async function viewRecipient(id) {
  const here = location.hash;
  const base = "/v1/recipients/" + seg(id);
  const opt = (p) => p.catch((e) => (e.status === 404 ? null : Promise.reject(e)));
  const [profile, prefs, mutes, subs, inbox, deliveries, cat] = await Promise.all([
    opt(api("GET", base)), opt(api("GET", base + "/preferences")), opt(api("GET", base + "/mutes")),
    opt(api("GET", base + "/subscriptions")), opt(api("GET", base + "/inbox?limit=10&filter=all")),
    api("GET", base + "/deliveries?limit=20"), notifierCatalog()]);
  const suppressions = el("ul", { id: "suppressions" });
  const sections = [
    el("section", {}, el("h2", {}, "Recipient " + id),
      profile ? el("dl", { id: "profile" }, Object.entries(profile).flatMap(([k, v]) =>
        [el("dt", {}, k), el("dd", { class: "mono" }, v === null ? "" : typeof v === "object" ? JSON.stringify(v) : String(v))]))
        : el("p", { class: "muted" }, "No profile.")),
    el("section", {}, el("h2", {}, "Effective preferences"), prefs ? effectiveTable(prefs) : el("p", {}, "none")),
    el("section", {}, el("h2", {}, "Mutes"), listOrNone(mutes && mutes.mutes, (m) =>
      `${m.target}${m.until ? " until " + fmtTime(m.until) : ""}`)),
    el("section", {}, el("h2", {}, "Subscriptions"), listOrNone(subs && subs.subscriptions, (s) =>
      `${s.topic} (${s.reason})`)),
    el("section", {}, el("h2", {}, "Suppressions"), suppressions),
    el("section", {}, el("h2", {}, "Recent inbox"), listOrNone(inbox && inbox.items, (i) =>
      `${fmtTime(i.created_at)} ${i.notifier}: ${i.title}${i.read_at ? " (read)" : ""}${i.archived_at ? " (archived)" : ""}`)),
    el("section", {}, el("h2", {}, "Recent deliveries"),
      deliveries.deliveries.length === 0 ? el("p", { class: "muted" }, "none among the latest ledger rows")
        : deliveryTable(deliveries.deliveries.map((d) => deliveryRow(d, () => viewRecipient(id), true)), true)),
  ];
  view(here, ...sections);
  await loadSuppressions(suppressions, profile, cat, () => viewRecipient(id));
}

function effectiveTable(prefs) {
  const eff = prefs.effective || {};
  const names = Object.keys(eff).sort();
  const chans = [...new Set(names.flatMap((n) => Object.keys((eff[n] && eff[n].channels) || {})))].sort();
  return el("table", { id: "effective" },
    el("thead", {}, el("tr", {}, el("th", {}, "Notifier"), chans.map((c) => el("th", {}, c)))),
    el("tbody", {}, names.map((n) => el("tr", {}, el("td", {}, n),
      chans.map((c) => el("td", {}, ((eff[n].channels || {})[c]) || "")))))) ;
}

function listOrNone(items, text) {
  if (!items || items.length === 0) return el("p", { class: "muted" }, "none");
  return el("ul", {}, items.map((x) => el("li", {}, text(x))));
}

// loadSuppressions asks, for each of the recipient's addresses, whether its
// channel suppresses it. A server without the suppression API answers 404:
// shown as "none".
async function loadSuppressions(ul, profile, cat, refresh) {
  const found = [];
  for (const ch of cat.channels || []) {
    const address = ch.address && profile && profile[ch.address];
    if (!address) continue;
    try {
      const r = await api("GET", `/v1/suppressions?channel=${enc(ch.name)}&address=${enc(address)}`);
      for (const s of (r && (r.items || r.suppressions)) || []) found.push({ channel: ch.name, address, s });
    } catch (e) {
      if (e.status !== 404 && e.status !== 405) throw e;
    }
  }
  ul.replaceChildren(...(found.length === 0 ? [el("li", { class: "muted" }, "none")] : found.map(({ channel, address, s }) =>
    el("li", {}, `${channel}: ${address} ${s.reason || s.kind || ""} `,
      el("button", { type: "button", class: "lift", onclick: async () => {
        try {
          await api("DELETE", `/v1/suppressions/${seg(channel)}/${seg(address)}`);
          say(`Lifted the suppression of ${address} on ${channel}.`);
          await refresh();
        } catch (e) {
          fail(e);
        }
      } }, "Lift")))));
}


// --- overview ---

// Status groups of the charts, painted by console.css (.s-sent, ...).
function statusGroup(s) {
  if (s === "sent" || s === "digest_sent") return "sent";
  if (FAILED.includes(s)) return "failed";
  if (["pending", "sending", "rate_limited", "scheduled", "digest_pending", "digest_sending"].includes(s)) return "waiting";
  return "other";
}
const GROUPS = [["sent", "sent"], ["failed", "failed, refused, expired"], ["waiting", "pending, scheduled, in flight"], ["other", "skipped, suppressed, cancelled…"]];

async function viewOverview() {
  const here = location.hash;
  const o = await api("GET", "/v1/overview");
  const hours = o.hours.map((h) => new Date(h).getTime());
  const channels = [...new Set(o.deliveries.map((d) => d.channel))].sort();
  const charts = channels.map((ch) => {
    // counts[hour index][group]
    const counts = hours.map(() => ({}));
    for (const d of o.deliveries) {
      if (d.channel !== ch) continue;
      const i = hours.indexOf(new Date(d.hour).getTime());
      if (i < 0) continue;
      const g = statusGroup(d.status);
      counts[i][g] = (counts[i][g] || 0) + d.count;
    }
    const total = counts.reduce((n, c) => n + Object.values(c).reduce((a, b) => a + b, 0), 0);
    const failed = counts.reduce((n, c) => n + (c.failed || 0), 0);
    return el("figure", { class: "chart-box" },
      el("figcaption", {}, `${ch}: ${total} deliveries, ${failed} failed`,
        " ", link("#/deliveries?" + new URLSearchParams({ channel: ch, status: "failed,refused,expired", range: "24h" }), "see failures")),
      barChart(ch, o.hours, counts));
  });
  view(here,
    el("section", {}, el("h2", {}, "Overview: the last 24 hours"),
      el("p", { class: "muted" }, `Deliveries per hour by the status they are in now, counted in the hour of their last change (UTC, ${fmtTime(o.since)} to ${fmtTime(o.until)}).`),
      legend(),
      charts.length ? el("div", { class: "charts", id: "delivery-charts" }, charts) : el("p", { class: "muted", id: "no-deliveries" }, "No delivery changed in the last 24 hours.")),
    el("section", {}, el("h2", {}, "Failure rate per hour"),
      el("p", { class: "muted" }, "Deliveries that ended failed (for now), refused or expired, among those that ended so or sent."),
      rateChart(o.failure_rate)),
    el("section", {}, el("h2", {}, "Queues"),
      el("p", { class: "muted" }, "River jobs waiting (available), running, waiting for a retry (retryable) and due later (scheduled), per queue."),
      queueChart(o.queues)));
  if (location.hash === here) say(`${o.deliveries.reduce((n, d) => n + d.count, 0)} deliveries changed in the last 24 hours.`);
}

function legend() {
  return el("ul", { class: "legend" }, GROUPS.map(([g, label]) =>
    el("li", {}, svg("svg", { width: 10, height: 10, "aria-hidden": "true" }, svg("rect", { width: 10, height: 10, class: "s-" + g })), ` ${label}`)));
}

const W = 720, H = 150, PAD = { l: 40, r: 8, t: 8, b: 22 };

/** axes draws the y axis (0 and max) and hour ticks every 6 hours. */
function axes(hours, max, fmt = String) {
  const plotH = H - PAD.t - PAD.b;
  const step = (W - PAD.l - PAD.r) / hours.length;
  return [
    svg("line", { x1: PAD.l, y1: PAD.t + plotH, x2: W - PAD.r, y2: PAD.t + plotH, class: "axis" }),
    svg("text", { x: PAD.l - 4, y: PAD.t + 8, "text-anchor": "end", class: "tick" }, fmt(max)),
    svg("text", { x: PAD.l - 4, y: PAD.t + plotH, "text-anchor": "end", class: "tick" }, fmt(0)),
    hours.map((h, i) => i % 6 === 0
      ? svg("text", { x: PAD.l + i * step, y: H - 6, class: "tick" }, new Date(h).toISOString().slice(11, 16)) : null),
  ];
}

/** barChart is one channel's stacked bars: one bar per hour, one segment per status group. */
function barChart(channel, hours, counts) {
  const max = Math.max(1, ...counts.map((c) => Object.values(c).reduce((a, b) => a + b, 0)));
  const plotH = H - PAD.t - PAD.b;
  const step = (W - PAD.l - PAD.r) / hours.length;
  const bars = counts.flatMap((c, i) => {
    let y = PAD.t + plotH;
    return GROUPS.map(([g]) => {
      const n = c[g] || 0;
      if (n === 0) return null;
      const h = Math.max(1, (n / max) * plotH);
      y -= h;
      return svg("rect", { x: (PAD.l + i * step + 1).toFixed(1), y: y.toFixed(1), width: Math.max(1, step - 2).toFixed(1), height: h.toFixed(1),
        class: "s-" + g, dataset: { hour: hours[i], group: g, count: n } },
      svg("title", {}, `${new Date(hours[i]).toISOString().slice(11, 16)} UTC: ${n} ${g}`));
    });
  });
  return svg("svg", { class: "chart", viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": `${channel} deliveries per hour`,
    dataset: { chart: "deliveries", channel } }, axes(hours, max), bars);
}

/** rateChart is the failure rate per hour as a line, with a dot per hour that ended something. */
function rateChart(rates) {
  const hours = rates.map((r) => r.hour);
  const max = Math.max(0.01, ...rates.map((r) => r.rate || 0));
  const plotH = H - PAD.t - PAD.b;
  const step = (W - PAD.l - PAD.r) / hours.length;
  const pts = rates.map((r, i) => r.rate === null ? null
    : [PAD.l + i * step + step / 2, PAD.t + plotH - (r.rate / max) * plotH, r]).filter(Boolean);
  const pct = (v) => `${Math.round(v * 1000) / 10}%`;
  return svg("svg", { class: "chart", viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": "failure rate per hour", dataset: { chart: "failure-rate" } },
    axes(hours, max, pct),
    pts.length > 1 ? svg("polyline", { class: "rate", points: pts.map(([x, y]) => `${x.toFixed(1)},${y.toFixed(1)}`).join(" ") }) : null,
    pts.map(([x, y, r]) => svg("circle", { cx: x.toFixed(1), cy: y.toFixed(1), r: 3, class: "rate", dataset: { hour: r.hour, rate: r.rate, failed: r.failed, ended: r.ended } },
      svg("title", {}, `${new Date(r.hour).toISOString().slice(11, 16)} UTC: ${pct(r.rate)} (${r.failed} of ${r.ended})`))),
    pts.length === 0 ? svg("text", { x: W / 2, y: H / 2, "text-anchor": "middle", class: "tick" }, "nothing ended in the last 24 hours") : null);
}

/** queueChart is one horizontal stacked bar per queue. */
function queueChart(queues) {
  const states = ["available", "running", "retryable", "scheduled"];
  const max = Math.max(1, ...queues.map((q) => states.reduce((n, s) => n + q[s], 0)));
  const rowH = 22, labelW = 90, width = W - labelW - 80;
  const h = queues.length * rowH + 24;
  return svg("svg", { class: "chart", viewBox: `0 0 ${W} ${h}`, role: "img", "aria-label": "queue depth", dataset: { chart: "queues" } },
    queues.map((q, i) => {
      let x = labelW;
      const y = 4 + i * rowH;
      const total = states.reduce((n, s) => n + q[s], 0);
      return [svg("text", { x: labelW - 6, y: y + 13, "text-anchor": "end", class: "label" }, q.queue),
        states.map((s) => {
          if (q[s] === 0) return null;
          const w = Math.max(2, (q[s] / max) * width);
          const r = svg("rect", { x: x.toFixed(1), y, width: w.toFixed(1), height: rowH - 6, class: "q-" + s, dataset: { queue: q.queue, state: s, count: q[s] } },
            svg("title", {}, `${q.queue}: ${q[s]} ${s}`));
          x += w;
          return r;
        }),
        svg("text", { x: x + 6, y: y + 13, class: "label", dataset: { queue: q.queue, total } }, String(total))];
    }),
    svg("g", { class: "legend" }, states.map((s, i) => [
      svg("rect", { x: labelW + i * 110, y: h - 14, width: 10, height: 10, class: "q-" + s }),
      svg("text", { x: labelW + i * 110 + 14, y: h - 5, class: "tick" }, s)])));
}

// --- template preview ---

async function viewPreview(params) {
  const here = location.hash;
  const cat = await notifierCatalog();
  const out = el("div", { id: "preview-out" });
  const nfSel = el("select", { name: "notifier", id: "preview-notifier" },
    cat.notifiers.map((n) => el("option", { value: n.name }, n.name)));
  const chSel = el("select", { name: "channel", id: "preview-channel" });
  const paramsBox = el("textarea", { name: "params", rows: 6, cols: 60, id: "preview-params" });
  const errors = el("ul", { class: "field-errors", id: "preview-errors" });
  const fill = () => {
    const n = cat.notifiers.find((x) => x.name === nfSel.value);
    chSel.replaceChildren(...(n ? n.channels : []).map((c) => el("option", { value: c }, c)));
    paramsBox.value = JSON.stringify((n && n.example) || {}, null, 2);
  };
  nfSel.addEventListener("change", fill);
  if (params.get("notifier")) nfSel.value = params.get("notifier");
  fill();
  if (params.get("channel")) chSel.value = params.get("channel");
  const form = el("form", { class: "filters", id: "preview-form" },
    el("label", {}, "Notifier", nfSel), el("label", {}, "Channel", chSel),
    el("label", {}, "Params (example by default)", paramsBox, errors),
    el("label", {}, "Locale", el("input", { name: "locale", id: "preview-locale" })),
    el("label", {}, "Tenant (its brand)", tenantSelect("preview-tenant", params.get("tenant") || "")),
    el("button", { type: "submit" }, "Render"));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    errors.replaceChildren();
    const q = new URLSearchParams({ params: paramsBox.value.trim() || "{}" });
    const locale = form.elements.locale.value;
    if (locale) q.set("locale", locale);
    const tenant = form.elements.tenant.value;
    if (tenant) q.set("tenant", tenant);
    try {
      const r = await api("GET", `/v1/notifiers/${seg(nfSel.value)}/preview/${seg(chSel.value)}?${q}`);
      out.replaceChildren(...r.parts.map((p) => el("div", { class: "part", dataset: { name: p.name } },
        el("h3", {}, p.name), el("pre", {}, p.value))));
      say(`Rendered ${r.notifier} on ${r.channel}.`);
    } catch (e) {
      out.replaceChildren();
      // Each JSON-pointer detail next to the params it is about.
      errors.replaceChildren(...e.details.map((d) => el("li", { dataset: { pointer: d.pointer ?? d.field ?? "" } }, detailText(d))));
      say(e.message, true);
    }
  });
  view(here, el("section", {}, el("h2", {}, "Template preview"),
    el("p", { class: "muted" }, "Rendered for a sample recipient; nothing is sent. HTML parts are shown as source."), form),
  el("section", {}, out));
  form.requestSubmit();
}

// --- send a test notification ---

/**
 * schemaFields splits a params schema into what a form can ask for (string,
 * number, integer and boolean properties, with enums) and the rest, which a
 * JSON textarea takes.
 */
function schemaFields(schema) {
  const props = (schema && schema.properties) || {};
  const required = new Set((schema && schema.required) || []);
  const fields = [];
  const rest = [];
  for (const [name, p] of Object.entries(props)) {
    const type = Array.isArray(p.type) ? p.type.filter((t) => t !== "null") : [p.type];
    const t = type.length === 1 ? type[0] : undefined;
    if (["string", "number", "integer", "boolean"].includes(t) || (Array.isArray(p.enum) && p.enum.every((v) => typeof v === "string"))) {
      fields.push({ name, type: t || "string", enum: p.enum, format: p.format, required: required.has(name), description: p.description });
    } else {
      rest.push(name);
    }
  }
  // Required first, in the schema's order otherwise.
  fields.sort((a, b) => Number(b.required) - Number(a.required));
  return { fields, rest };
}

function fieldInput(f, value) {
  const attrs = { name: "p." + f.name, id: "param-" + f.name, required: f.required || null, "aria-describedby": "error-" + f.name };
  if (f.enum) {
    return el("select", attrs, f.required ? null : el("option", { value: "" }, "(not set)"),
      f.enum.map((v) => el("option", { value: String(v), selected: v === value }, String(v))));
  }
  if (f.type === "boolean") {
    return el("select", attrs, f.required ? null : el("option", { value: "" }, "(not set)"),
      el("option", { value: "true", selected: value === true }, "true"), el("option", { value: "false", selected: value === false }, "false"));
  }
  if (f.type === "number" || f.type === "integer") {
    return el("input", { ...attrs, type: "number", step: f.type === "integer" ? "1" : "any", value: value ?? "" });
  }
  return el("input", { ...attrs, type: f.format === "date" ? "date" : "text", value: value ?? "" });
}

async function viewSend(params) {
  const here = location.hash;
  const cat = await notifierCatalog();
  const nfSel = el("select", { name: "notifier", id: "send-notifier" }, cat.notifiers.map((n) => el("option", { value: n.name }, n.name)));
  if (params.get("notifier")) nfSel.value = params.get("notifier");
  const recipient = el("input", { name: "recipient", id: "send-recipient", value: params.get("recipient") || "", required: true, autocomplete: "off" });
  const key = el("input", { name: "key", id: "send-key", autocomplete: "off" });
  const fieldsBox = el("div", { id: "send-fields", class: "fields" });
  const restBox = el("textarea", { name: "rest", id: "send-rest", rows: 4, cols: 60 });
  const restLabel = el("label", { class: "field" }, "More params (a JSON object, merged over the fields)", restBox,
    el("span", { class: "field-error", id: "error-rest" }));
  const out = el("div", { id: "send-out" });
  let shape = { fields: [], rest: [] };
  const fill = () => {
    const n = cat.notifiers.find((x) => x.name === nfSel.value);
    shape = schemaFields(n && n.params_schema);
    const ex = (n && n.example) || {};
    fieldsBox.replaceChildren(...shape.fields.map((f) => el("label", { class: "field", dataset: { field: f.name } },
      el("span", {}, f.name, f.required ? el("abbr", { title: "required", class: "required" }, " *") : null,
        f.description ? el("span", { class: "muted" }, ` ${f.description}`) : null),
      fieldInput(f, ex[f.name]),
      el("span", { class: "field-error", id: "error-" + f.name }))));
    const rest = {};
    for (const name of shape.rest) if (name in ex) rest[name] = ex[name];
    if (!n || !n.params_schema) Object.assign(rest, ex);
    restBox.value = Object.keys(rest).length ? JSON.stringify(rest, null, 2) : "";
    restLabel.hidden = shape.fields.length > 0 && shape.rest.length === 0 && !(n && n.params_schema && n.params_schema.additionalProperties !== false);
    key.value = "console-test-" + new Date().toISOString().replace(/[-:.]/g, "");
    clearErrors();
  };
  const clearErrors = () => {
    for (const e of document.querySelectorAll("#send-form .field-error")) e.textContent = "";
    for (const e of document.querySelectorAll("#send-form .invalid")) e.classList.remove("invalid");
  };
  const showError = (name, msg) => {
    const box = document.getElementById("error-" + name) || document.getElementById("error-rest");
    box.textContent = box.textContent ? box.textContent + "; " + msg : msg;
    const input = document.getElementById("param-" + name) || (name === "recipient" ? recipient : name === "key" ? key : restBox);
    input.classList.add("invalid");
  };
  nfSel.addEventListener("change", fill);
  const form = el("form", { id: "send-form", class: "send" },
    el("label", { class: "field" }, "Notifier", nfSel),
    el("label", { class: "field" }, el("span", {}, "Recipient", el("abbr", { title: "required", class: "required" }, " *")), recipient,
      el("span", { class: "field-error", id: "error-recipient" })),
    el("label", { class: "field" }, "Key (the notification's identity: sending a key again is a duplicate)", key,
      el("span", { class: "field-error", id: "error-key" })),
    el("h3", {}, "Params"), fieldsBox, restLabel,
    el("p", {}, el("button", { type: "submit", id: "send-submit" }, "Send")));
  // The browser's own required-field check would stop the request: the
  // API's answer says the same, field by field, and is what is shown.
  form.noValidate = true;
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    clearErrors();
    out.replaceChildren();
    const p = {};
    let bad = false;
    if (restBox.value.trim()) {
      try {
        const v = JSON.parse(restBox.value);
        if (v === null || typeof v !== "object" || Array.isArray(v)) throw new Error("want a JSON object");
        Object.assign(p, v);
      } catch (e) {
        showError("rest", e.message);
        bad = true;
      }
    }
    for (const f of shape.fields) {
      const raw = form.elements["p." + f.name].value;
      if (raw === "") continue;
      if (f.type === "boolean") p[f.name] = raw === "true";
      else if (f.type === "number" || f.type === "integer") p[f.name] = Number(raw);
      else p[f.name] = raw;
    }
    if (bad) return say("Fix the params first.", true);
    try {
      const r = await api("POST", "/v1/notifications", { notifier: nfSel.value, key: key.value, recipients: [recipient.value], params: p });
      out.replaceChildren(el("p", { id: "sent" }, r.duplicate ? "Already sent with this key: " : "Sent: ",
        link("#/n/" + enc(r.id), `${nfSel.value} / ${key.value}`)));
      say(r.duplicate ? "A notification with this key exists: nothing new was sent." : "Sent. Follow it on its page.");
      key.value = "console-test-" + new Date().toISOString().replace(/[-:.]/g, "");
    } catch (e) {
      // Every detail next to its field: params by JSON pointer, the rest by
      // field name ("recipients[0]" is the recipient).
      for (const d of e.details) {
        if (d.pointer !== undefined) {
          const name = d.pointer.split("/")[1];
          showError(name !== undefined && shape.fields.some((f) => f.name === name) ? name.replace(/~1/g, "/").replace(/~0/g, "~") : "rest", d.message);
        } else if (d.field) {
          showError(d.field.startsWith("recipients") ? "recipient" : d.field === "key" ? "key" : "rest", d.message);
        }
      }
      say(e.message, true);
    }
  });
  fill();
  view(here, el("section", {}, el("h2", {}, "Send a test notification"),
    el("p", { class: "muted" }, "Sent for real, through the same API an application uses, to the recipient you name (their preferences apply)."),
    form, out));
}

// --- shell ---

// view shows sections as the page for here, the location.hash its view
// function started at. A view that finishes after the reader went elsewhere
// (the refresh that follows a retry, a slow read) is dropped instead of
// drawn over the page they went to.
function view(here, ...sections) {
  if (location.hash !== here) return;
  $("#view").replaceChildren(...sections);
}

function fail(e) {
  say((e && e.message) || String(e), true, (e && e.details) || []);
}

function showSignin(message) {
  me = null;
  $("#break-glass").hidden = true;
  $("#whoami").hidden = true;
  $("#signin").hidden = false;
  $("#signout").hidden = true;
  $("#view").replaceChildren();
  say(message || "", !!message);
}

async function route() {
  if (!token() && !csrf()) {
    showSignin();
    return;
  }
  $("#signin").hidden = true;
  $("#signout").hidden = false;
  $("#signout").textContent = token() ? "Forget token" : "Sign out";
  say("");
  const hash = location.hash.replace(/^#/, "") || "/";
  const [path, query] = hash.split("?");
  const params = new URLSearchParams(query || "");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  for (const a of document.querySelectorAll("nav a")) a.classList.toggle("current", a.getAttribute("href") === "#/" + (parts[0] || ""));
  try {
    await whoami();
    await notifierCatalog();
    switch (parts[0]) {
      case undefined:
        return await viewNotifications(params);
      case "overview":
        return await viewOverview();
      case "deliveries":
        return await viewDeliveries(params);
      case "n":
        return await viewNotification(parts[1]);
      case "d":
        return await viewDelivery(parts[1]);
      case "r":
        return await viewRecipient(parts.slice(1).join("/"));
      case "preview":
        return await viewPreview(params);
      case "send":
        return await viewSend(params);
      case "audit":
        return await viewAudit(params);
      default:
        say("No such view: " + hash, true);
    }
  } catch (e) {
    if (e.status !== 401) fail(e);
  }
}

/** viewAudit is the audit log (#/audit?action=&actor=&object=&since=): who changed what, oldest first, with an export. */
async function viewAudit(params) {
  const here = location.hash;
  const f = {};
  for (const k of ["action", "actor", "object", "since"]) f[k] = params.get(k) || "";
  const form = el("form", { class: "filters", id: "audit-filters" },
    el("label", {}, "Action", el("input", { name: "action", value: f.action, placeholder: "delivery.retry" })),
    el("label", {}, "Actor", el("input", { name: "actor", value: f.actor })),
    el("label", {}, "Object", el("input", { name: "object", value: f.object })),
    el("label", {}, "Since", el("input", { name: "since", value: f.since, placeholder: "2026-12-01T00:00:00Z" })),
    el("button", { type: "submit" }, "Filter"),
    el("a", { href: "#/audit" }, "clear"));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const q = new URLSearchParams();
    for (const [k, v] of new FormData(form)) if (v) q.set(k, v);
    location.hash = "#/audit?" + q.toString();
  });
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(f)) if (v) q.set(k, v);
  const rows = el("tbody", { id: "audit" });
  const more = el("button", { type: "button", id: "audit-more", hidden: true }, "Newer");
  const exportButton = el("button", { type: "button", id: "audit-export" }, "Export JSON lines");
  exportButton.addEventListener("click", async () => {
    const eq = new URLSearchParams(q);
    eq.set("format", "jsonl");
    const res = await fetch("/v1/audit?" + eq.toString(), authInit("GET"));
    if (!res.ok) return say("Export refused: HTTP " + res.status, true);
    const a = el("a", { href: URL.createObjectURL(await res.blob()), download: "notifyd-audit.jsonl" });
    a.click();
    URL.revokeObjectURL(a.href);
  });
  let cursor = null;
  async function load() {
    const pq = new URLSearchParams(q);
    if (cursor) pq.set("cursor", cursor);
    const page = await api("GET", "/v1/audit?" + pq.toString());
    for (const r of page.items) {
      rows.append(el("tr", { dataset: { action: r.action } },
        el("td", {}, fmtTime(r.at)), el("td", {}, r.actor, el("small", {}, " " + r.actor_kind)), el("td", {}, r.action),
        el("td", {}, r.object), el("td", {}, el("code", {}, JSON.stringify(r.summary))), el("td", {}, r.ip)));
    }
    cursor = page.next_cursor;
    more.hidden = !cursor;
  }
  more.addEventListener("click", () => load().catch(fail));
  await load();
  view(here, el("section", {}, el("h2", {}, "Audit log"), form, exportButton,
    el("table", {}, el("thead", {}, el("tr", {}, ["At", "Actor", "Action", "Object", "Summary", "From"].map((h) => el("th", {}, h)))), rows),
    more));
}

// me is GET /v1/me for the signed-in credential: its role, its tenants, and
// whether it is the break-glass admin token (then a banner says so on every view).
let me = null;
async function whoami() {
  if (!me) me = await api("GET", "/v1/me");
  $("#break-glass").hidden = !me.break_glass;
  const who = $("#whoami");
  who.hidden = false;
  who.textContent = `Signed in as ${me.actor_kind === "admin_token" ? "the admin token" : me.actor} (${me.role}` +
    (me.tenants.length ? `, tenants ${me.tenants.join(", ")}` : "") + ")";
}

$("#token-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  sessionStorage.setItem(TOKEN_KEY, $("#token").value.trim());
  $("#token").value = "";
  catalog = null;
  me = null;
  route();
});
$("#signout").addEventListener("click", async () => {
  catalog = null;
  if (token()) {
    sessionStorage.removeItem(TOKEN_KEY);
    showSignin("Token forgotten.");
    return;
  }
  const res = await fetch("/admin/sso/logout", authInit("POST"));
  forgetSession();
  showSignin(res.ok ? "Signed out." : "Sign-out failed: HTTP " + res.status);
});
$("#goto-recipient").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const id = ev.target.elements.recipient.value.trim();
  if (id) location.hash = "#/r/" + enc(id);
});
window.addEventListener("hashchange", route);
route();
