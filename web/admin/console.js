// console.js: notifyd's operator console. Plain JavaScript, no build step,
// served by the daemon at /admin/. Every view reads the admin API of the same
// origin, the one a script would use, with the admin token the operator
// pasted (kept in this tab's sessionStorage, sent as a bearer token).
//
// Views are URL fragments, so a view can be linked:
//   #/                      notifications, newest first (filters in the query: #/?status=failed)
//   #/n/<id>                a notification: fan-out progress and every delivery
//   #/d/<id>                a delivery and its failed attempts
//   #/r/<recipient>         a recipient: profile, preferences, mutes, subscriptions, suppressions, inbox, deliveries
//   #/preview               template preview per notifier and channel
//
// Nothing from the API is ever parsed as HTML: text goes in as text nodes.

const TOKEN_KEY = "notifyd.admin_token";
// Statuses a delivery can be retried from (the API says the same with 409).
const RETRYABLE = ["failed", "rate_limited", "pending", "expired", "refused"];
const NOTIFICATION_STATUSES = ["scheduled", "pending", "fanned_out", "cancelled", "rejected"];

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
  for (const c of children.flat()) {
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
  }
}

function token() {
  return sessionStorage.getItem(TOKEN_KEY) || "";
}

/**
 * api calls the admin API. State-changing calls also send X-Notifyd-Console
 * (the server refuses cross-site browser requests by their Origin and
 * Sec-Fetch-Site headers; the bearer token itself is never sent by a browser
 * on its own, which is what makes the API safe from forged requests).
 */
async function api(method, path, body) {
  const headers = { Authorization: "Bearer " + token(), Accept: "application/json" };
  const init = { method, headers, cache: "no-store", credentials: "omit" };
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
    showSignin("The admin token was refused: " + ((data && data.error && data.error.message) || "401"));
  }
  if (!res.ok) throw new APIError(res.status, data);
  return data;
}

function say(text, error = false) {
  const s = $("#status");
  s.textContent = text || "";
  s.classList.toggle("error", !!error);
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

// --- notifications ---

async function viewNotifications(params) {
  const here = location.hash;
  const f = {
    notifier: params.get("notifier") || "",
    key: params.get("key") || "",
    recipient: params.get("recipient") || "",
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
    el("thead", {}, el("tr", {}, ["Created", "Notifier", "Key", "Actor", "Status", "Error"].map((h) => el("th", {}, h)))), body);
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
      body.append(el("tr", { dataset: { id: n.id } },
        el("td", { class: "mono" }, fmtTime(n.created_at)),
        el("td", {}, n.notifier),
        el("td", {}, link("#/n/" + n.id, n.key)),
        el("td", {}, n.actor || ""),
        el("td", {}, status(n.status)),
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

// --- one notification ---

async function viewNotification(id) {
  const here = location.hash;
  const n = await api("GET", `/v1/notifications/${enc(id)}?progress=true`);
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
      cancel.textContent = "Really cancel? Unsent deliveries are withdrawn";
      return;
    }
    cancel.disabled = true;
    try {
      const r = await api("DELETE", `/v1/notifications/${enc(n.notifier)}/${n.key.split("/").map(enc).join("/")}`);
      say(`Cancelled: ${r.cancelled} deliveries and inbox items withdrawn.`);
      await viewNotification(id);
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

function deliveryTable(rows, withNotification = false) {
  const heads = ["Recipient", "Channel", "Reason", "Mode", "Status", "Attempts", "Last error", "Provider", "Updated", ""];
  if (withNotification) heads.unshift("Notification");
  return el("table", { class: "deliveries" }, el("thead", {}, el("tr", {}, heads.map((h) => el("th", {}, h)))), el("tbody", {}, rows));
}

function deliveryRow(d, refresh, withNotification = false) {
  const retry = RETRYABLE.includes(d.status) && d.channel !== undefined
    ? el("button", { type: "button", class: "retry", onclick: () => retryDelivery(d.id, refresh) }, "Retry")
    : "";
  const id = d.id;
  return el("tr", { dataset: { id, status: d.status } },
    withNotification ? el("td", {}, link("#/n/" + d.notification_id, `${d.notifier} / ${d.key}`)) : null,
    el("td", {}, d.recipient ? link("#/r/" + enc(d.recipient), d.recipient) : "(bulk)"),
    el("td", {}, d.channel),
    el("td", {}, d.reason),
    el("td", {}, d.mode),
    el("td", {}, status(d.status)),
    el("td", {}, String(d.attempts)),
    el("td", { class: "err" }, d.last_error || ""),
    el("td", { class: "mono" }, d.provider || ""),
    el("td", { class: "mono" }, fmtTime(d.updated_at)),
    // An inbox delivery is its inbox item: no ledger row, no attempts.
    el("td", {}, isInbox(d.channel) ? "" : [link("#/d/" + id, "attempts"), " ", retry]));
}

async function retryDelivery(id, refresh) {
  try {
    const d = await api("POST", `/v1/deliveries/${enc(id)}/retry`);
    say(`Delivery ${id} is due again (${d.status}).`);
    await refresh();
    watch(id, refresh);
  } catch (e) {
    fail(e);
  }
}

// watch re-reads a retried delivery until it settles (a few seconds at
// most) and refreshes the view when it does.
async function watch(id, refresh) {
  for (let i = 0; i < 30; i++) {
    await new Promise((r) => setTimeout(r, 500));
    let d;
    try {
      d = await api("GET", "/v1/deliveries/" + enc(id));
    } catch {
      return;
    }
    if (!["failed", "pending", "sending", "rate_limited"].includes(d.status) || d.next_attempt_at === null) {
      say(`Delivery ${id} is now ${d.status}.`);
      await refresh();
      return;
    }
  }
}

// --- one delivery ---

async function viewDelivery(id) {
  const here = location.hash;
  const d = await api("GET", "/v1/deliveries/" + enc(id));
  const refresh = () => viewDelivery(id);
  const retry = RETRYABLE.includes(d.status)
    ? el("button", { type: "button", class: "retry", id: "retry", onclick: () => retryDelivery(d.id, refresh) }, "Retry now")
    : el("span", { class: "muted" }, `A ${d.status} delivery cannot be retried.`);
  view(here,
    el("section", { id: "delivery", dataset: { status: d.status } },
      el("h2", {}, `Delivery to ${d.recipient || "(bulk)"} on ${d.channel}`),
      el("dl", {},
        el("dt", {}, "id"), el("dd", { class: "mono" }, d.id),
        el("dt", {}, "notification"), el("dd", {}, link("#/n/" + d.notification_id, `${d.notifier} / ${d.key}`)),
        el("dt", {}, "recipient"), el("dd", {}, d.recipient ? link("#/r/" + enc(d.recipient), d.recipient) : "(bulk)"),
        el("dt", {}, "status"), el("dd", { id: "delivery-status" }, status(d.status)),
        el("dt", {}, "reason / mode"), el("dd", {}, `${d.reason} / ${d.mode}`),
        el("dt", {}, "attempts"), el("dd", {}, String(d.attempts)),
        el("dt", {}, "last error"), el("dd", { class: "err" }, d.last_error || "none"),
        el("dt", {}, "provider"), el("dd", { class: "mono" }, d.provider || "not reported"),
        el("dt", {}, "next attempt"), el("dd", { class: "mono" }, d.next_attempt_at ? fmtTime(d.next_attempt_at) : "none"),
        el("dt", {}, "created"), el("dd", { class: "mono" }, fmtTime(d.created_at)),
        el("dt", {}, "settled"), el("dd", { class: "mono" }, d.settled_at ? fmtTime(d.settled_at) : "not yet")),
      el("p", {}, retry)),
    el("section", {},
      el("h2", {}, "Failed attempts"),
      d.failed_attempts.length === 0
        ? el("p", { class: "muted", id: "attempts-none" }, "No attempt failed.")
        : el("table", { id: "attempts" },
          el("thead", {}, el("tr", {}, ["#", "At", "Error", "Provider"].map((h) => el("th", {}, h)))),
          el("tbody", {}, d.failed_attempts.map((a) => el("tr", {},
            el("td", {}, String(a.attempt)), el("td", { class: "mono" }, fmtTime(a.at)),
            el("td", { class: "err" }, a.error), el("td", { class: "mono" }, a.provider || "")))))));
}

// --- a recipient ---

async function viewRecipient(id) {
  const here = location.hash;
  const base = "/v1/recipients/" + enc(id);
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
          await api("DELETE", `/v1/suppressions/${enc(channel)}/${enc(address)}`);
          say(`Lifted the suppression of ${address} on ${channel}.`);
          await refresh();
        } catch (e) {
          fail(e);
        }
      } }, "Lift")))));
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
    el("label", {}, "Params (example by default)", paramsBox),
    el("label", {}, "Locale", el("input", { name: "locale", id: "preview-locale" })),
    el("button", { type: "submit" }, "Render"));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const q = new URLSearchParams({ params: paramsBox.value.trim() || "{}" });
    const locale = form.elements.locale.value;
    if (locale) q.set("locale", locale);
    try {
      const r = await api("GET", `/v1/notifiers/${enc(nfSel.value)}/preview/${enc(chSel.value)}?${q}`);
      out.replaceChildren(...r.parts.map((p) => el("div", { class: "part", dataset: { name: p.name } },
        el("h3", {}, p.name), el("pre", {}, p.value))));
      say(`Rendered ${r.notifier} on ${r.channel}.`);
    } catch (e) {
      out.replaceChildren();
      fail(e);
    }
  });
  view(here, el("section", {}, el("h2", {}, "Template preview"),
    el("p", { class: "muted" }, "Rendered for a sample recipient; nothing is sent. HTML parts are shown as source."), form),
  el("section", {}, out));
  form.requestSubmit();
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
  say((e && e.message) || String(e), true);
}

function showSignin(message) {
  $("#signin").hidden = false;
  $("#signout").hidden = true;
  $("#view").replaceChildren();
  say(message || "", !!message);
}

async function route() {
  if (!token()) {
    showSignin();
    return;
  }
  $("#signin").hidden = true;
  $("#signout").hidden = false;
  say("");
  const hash = location.hash.replace(/^#/, "") || "/";
  const [path, query] = hash.split("?");
  const params = new URLSearchParams(query || "");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  try {
    await notifierCatalog();
    switch (parts[0]) {
      case undefined:
        return await viewNotifications(params);
      case "n":
        return await viewNotification(parts[1]);
      case "d":
        return await viewDelivery(parts[1]);
      case "r":
        return await viewRecipient(parts.slice(1).join("/"));
      case "preview":
        return await viewPreview(params);
      default:
        say("No such view: " + hash, true);
    }
  } catch (e) {
    if (e.status !== 401) fail(e);
  }
}

$("#token-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  sessionStorage.setItem(TOKEN_KEY, $("#token").value.trim());
  $("#token").value = "";
  catalog = null;
  route();
});
$("#signout").addEventListener("click", () => {
  sessionStorage.removeItem(TOKEN_KEY);
  catalog = null;
  showSignin("Token forgotten.");
});
$("#goto-recipient").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const id = ev.target.elements.recipient.value.trim();
  if (id) location.hash = "#/r/" + enc(id);
});
window.addEventListener("hashchange", route);
route();
