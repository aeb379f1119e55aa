// <notifyd-inbox>: the notifyd in-app inbox as a custom element. Plain
// JavaScript, an ES module, no build step; its one dependency is the headless
// client notifyd serves beside it (notifyd-client.js, @notifyd/browser).
//
//   <script type="module" src="https://notify.example.test/ui/notifyd-inbox.js"></script>
//   <notifyd-inbox endpoint="https://notify.example.test" token="<recipient JWT>"></notifyd-inbox>
//
// Attributes (each is also a property of the same name, camelCased):
//   endpoint    notifyd's base URL ("https://notify.example.test", or with a
//               path prefix). Empty or absent: the page's own origin.
//   token       the recipient token, minted by your backend. Sent as
//               "Authorization: Bearer" on every request and as ?access_token=
//               on the stream (EventSource cannot set headers). Without it the
//               element shows the bell and does nothing else.
//   page-size   items per page of the list, 1 to 200 (default 20).
//   label       the accessible name of the bell and the panel heading
//               (default "Notifications").
//   badge       what the badge counts: "unread" (default) or "unseen".
//   service-worker  the URL of the desktop notifications' service worker
//               (default endpoint + "/ui/notifyd-sw.js"). Service workers are
//               same-origin: a page on another origin than notifyd serves a
//               copy of notifyd-sw.js itself and names it here.
// Changing endpoint or token closes the stream and every request in flight,
// forgets the list and starts again (for instance with a refreshed token).
//
// What it does: the bell shows the unread count (GET /v1/inbox/counts, then
// every "counts" event of the stream). Clicking it opens the panel, which
// loads the inbox newest first (GET /v1/inbox) and the next page whenever the
// end of the list scrolls into view (next_cursor, IntersectionObserver), and
// marks everything seen (POST /v1/inbox/seen). Clicking an item marks it read
// (POST /v1/inbox/read {"ids":[id]}) and follows its url when it has an http(s)
// one; "Mark all read" posts {"all":true}; the × button archives the item
// (POST /v1/inbox/archive). Changes are shown at once and undone if the API
// refuses them.
//
// Live updates: one EventSource on GET /v1/inbox/stream, held by the headless
// client (notifyd-client.js, the npm package @notifyd/browser). inbox.created items
// are inserted in order, inbox.updated and inbox.deleted are applied, counts
// update the badge, reset reloads the list. The browser's EventSource
// reconnects by itself after a dropped connection and sends the Last-Event-ID
// header, so the server replays exactly what was missed. When the browser
// gives up instead (an HTTP error such as a 503 while notifyd restarts), the
// element reconnects itself with backoff (1 s doubling to 60 s, with jitter),
// passing the last event id it saw as ?last_event_id=, so nothing is missed
// then either. A 401 stops the retries and fires notifyd:error with status
// 401: set a fresh token attribute to continue. When the stream's token
// expires the server sends "reauth" and closes the stream: the element fires
// notifyd:reauth and waits (connection state "reauth"); set a fresh token
// (attribute or property) and it reconnects where it left off, passing the
// last event id it saw, without reloading the list.
//
// Events, dispatched on the element (they bubble and cross shadow roots):
//   notifyd:counts      {unread, unseen, unread_capped, unseen_capped}  the badge changed source data
//   notifyd:item        {item}                     a new item arrived live
//   notifyd:updated     {ids, read_at|seen_at|archived_at}  a live update
//   notifyd:deleted     {ids}                      items were removed
//   notifyd:reset       {}                         the stream asked for a reload
//   notifyd:reauth      {}                         the token expired: set a
//                                                  fresh token to continue
//   notifyd:click       {item}                     an item was activated;
//                                                  cancelable: preventDefault()
//                                                  keeps the browser from
//                                                  following item.url
//   notifyd:read        {ids} | {all: true}        the API marked items read
//   notifyd:archive     {ids}                      the API archived items
//   notifyd:open, notifyd:close  {}                the panel opened or closed
//   notifyd:connection  {state}                    "connecting", "open",
//                                                  "reconnecting", "closed",
//                                                  "unauthorized", "reauth",
//                                                  "idle"
//   notifyd:error       {status, code, message, details, action}
//                                                  a request failed; code,
//                                                  message and details are the
//                                                  API's error shape
// Desktop notifications (web push): when the browser supports them, the
// recipient has not refused them and the daemon has a web push channel (GET
// /v1/push-subscriptions/vapid-key answers), the panel's header offers
// "Enable desktop notifications". It asks for permission, registers the service worker,
// subscribes with the VAPID key from GET /v1/push-subscriptions/vapid-key and
// registers the subscription (POST /v1/push-subscriptions), then fires
//   notifyd:push        {state: "enabled", id, endpoint}  (or "disabled")
// A failure fires notifyd:error with action "push" (code permission_denied,
// unsupported, push_unavailable, or the API's: not_found when the daemon has
// no channels.web_push). The service worker shows each push as a notification
// and opens its url on click.
//
// Methods: open(), close(), toggle(), reload(), markRead(ids), markAllRead(),
// archive(ids), enablePush(), disablePush(). Read-only properties: counts, items, connectionState.
//
// Theming: CSS custom properties, set on the element or any ancestor:
//   --notifyd-font, --notifyd-color, --notifyd-muted-color, --notifyd-bg,
//   --notifyd-border, --notifyd-accent, --notifyd-unread-bg,
//   --notifyd-hover-bg, --notifyd-badge-bg, --notifyd-badge-color,
//   --notifyd-radius, --notifyd-shadow, --notifyd-bell-size,
//   --notifyd-bell-color, --notifyd-panel-width, --notifyd-panel-max-height,
//   --notifyd-z-index
// and the parts bell, badge, panel, header, list, item, item-unread, title,
// body, time, archive, mark-all, push, status (::part()).
//
// Item text (title, body) is only ever set with textContent: notification
// params cannot inject markup. Item urls are followed only when they are
// http: or https:.

import { NotifydError, createClient, request, withTenant } from "./notifyd-api.js";
import { disablePush, enablePush, pushSupported } from "./notifyd-push.js";

export { NotifydError };

const DEFAULT_PAGE_SIZE = 20;
const MAX_PAGE_SIZE = 200;

/** A URL an item may link to: http(s) only, resolved against the page. */
function safeURL(raw) {
  if (!raw) return "";
  try {
    const u = new URL(raw, document.baseURI);
    return u.protocol === "http:" || u.protocol === "https:" ? u.href : "";
  } catch {
    return "";
  }
}

/** [milliseconds, sub-millisecond digits]: orders RFC 3339 times exactly. */
function timeKey(s) {
  const m = /\.(\d+)/.exec(s || "");
  return [Date.parse(s) || 0, m ? (m[1] + "000000000").slice(3, 9) : "000000"];
}

/** The API's total order: created_at descending, then id ascending. */
function compareItems(a, b) {
  const ka = timeKey(a.created_at);
  const kb = timeKey(b.created_at);
  if (ka[0] !== kb[0]) return kb[0] - ka[0];
  if (ka[1] !== kb[1]) return ka[1] < kb[1] ? 1 : -1;
  return a.id < b.id ? -1 : a.id > b.id ? 1 : 0;
}

const UNITS = [
  ["year", 31536000],
  ["month", 2592000],
  ["week", 604800],
  ["day", 86400],
  ["hour", 3600],
  ["minute", 60],
];

function relativeTime(iso, locale) {
  const t = Date.parse(iso);
  if (!t) return "";
  const diff = (t - Date.now()) / 1000;
  let rtf;
  try {
    rtf = new Intl.RelativeTimeFormat(locale || undefined, { numeric: "auto" });
  } catch {
    rtf = new Intl.RelativeTimeFormat(undefined, { numeric: "auto" });
  }
  const abs = Math.abs(diff);
  if (abs < 45) return rtf.format(0, "second");
  for (const [unit, secs] of UNITS) {
    if (abs >= secs) return rtf.format(Math.round(diff / secs), unit);
  }
  return rtf.format(Math.round(diff / 60), "minute");
}

function absoluteTime(iso, locale) {
  const t = Date.parse(iso);
  if (!t) return "";
  try {
    return new Date(t).toLocaleString(locale || undefined);
  } catch {
    return new Date(t).toLocaleString();
  }
}

function isUnread(item) {
  return !item.read_at && !item.archived_at;
}

const BELL_SVG =
  '<svg viewBox="0 0 24 24" aria-hidden="true" focusable="false" fill="none" stroke="currentColor" ' +
  'stroke-width="2" stroke-linecap="round" stroke-linejoin="round"><path d="M6 8a6 6 0 0 1 12 0c0 7 3 9 3 9H3s3-2 3-9"/>' +
  '<path d="M10.3 21a1.94 1.94 0 0 0 3.4 0"/></svg>';

const STYLE = `
:host { display: inline-block; position: relative; font: var(--notifyd-font, 14px/1.4 system-ui, -apple-system, "Segoe UI", sans-serif); color: var(--notifyd-color, #1f2328); }
:host([hidden]) { display: none; }
button { font: inherit; }
.bell { position: relative; display: inline-flex; align-items: center; justify-content: center; width: var(--notifyd-bell-size, 40px); height: var(--notifyd-bell-size, 40px); padding: 0; border: 0; border-radius: 50%; background: transparent; color: var(--notifyd-bell-color, currentColor); cursor: pointer; }
.bell:hover, .main:hover, .archive:hover { background: var(--notifyd-hover-bg, rgba(127, 127, 127, .12)); }
.bell svg { width: 60%; height: 60%; }
button:focus-visible, a:focus-visible { outline: 2px solid var(--notifyd-accent, #0969da); outline-offset: 1px; }
.badge { position: absolute; top: 1px; right: 1px; min-width: 18px; height: 18px; padding: 0 5px; box-sizing: border-box; border-radius: 9px; background: var(--notifyd-badge-bg, #cf222e); color: var(--notifyd-badge-color, #fff); font-size: 11px; font-weight: 600; line-height: 18px; text-align: center; }
[hidden] { display: none !important; }
.panel { position: absolute; top: calc(100% + 6px); right: 0; z-index: var(--notifyd-z-index, 1000); width: var(--notifyd-panel-width, 360px); max-width: calc(100vw - 16px); background: var(--notifyd-bg, #fff); border: 1px solid var(--notifyd-border, #d0d7de); border-radius: var(--notifyd-radius, 8px); box-shadow: var(--notifyd-shadow, 0 8px 24px rgba(0, 0, 0, .16)); overflow: hidden; text-align: left; }
.head { display: flex; align-items: center; justify-content: space-between; gap: 8px; padding: 8px 12px; border-bottom: 1px solid var(--notifyd-border, #d0d7de); }
h2 { margin: 0; font-size: 1em; font-weight: 600; }
.mark-all { padding: 2px 4px; border: 0; background: none; color: var(--notifyd-accent, #0969da); cursor: pointer; }
.mark-all:disabled { color: var(--notifyd-muted-color, #656d76); cursor: default; }
.push { padding: 2px 4px; border: 0; background: none; color: var(--notifyd-accent, #0969da); cursor: pointer; }
.push:disabled { color: var(--notifyd-muted-color, #656d76); cursor: default; }
.scroller { max-height: var(--notifyd-panel-max-height, 420px); overflow-y: auto; overscroll-behavior: contain; }
ul { margin: 0; padding: 0; list-style: none; }
.item { display: flex; align-items: flex-start; border-bottom: 1px solid var(--notifyd-border, #d0d7de); }
.item.unread { background: var(--notifyd-unread-bg, #ddf4ff); }
.main { flex: 1; display: flex; gap: 8px; min-width: 0; padding: 10px 4px 10px 12px; border: 0; background: none; color: inherit; text-align: left; text-decoration: none; cursor: pointer; }
.dot { flex: none; width: 8px; height: 8px; margin-top: 6px; border-radius: 50%; }
.unread .dot { background: var(--notifyd-accent, #0969da); }
.text { display: flex; flex-direction: column; gap: 2px; min-width: 0; }
.title { overflow-wrap: anywhere; }
.unread .title { font-weight: 600; }
.body { color: var(--notifyd-muted-color, #656d76); overflow-wrap: anywhere; display: -webkit-box; -webkit-line-clamp: 3; -webkit-box-orient: vertical; overflow: hidden; }
time { color: var(--notifyd-muted-color, #656d76); font-size: .85em; }
.archive { flex: none; width: 28px; height: 28px; margin: 8px 8px 0 0; padding: 0; border: 0; border-radius: 50%; background: none; color: var(--notifyd-muted-color, #656d76); font-size: 18px; line-height: 28px; cursor: pointer; }
.status, .empty { margin: 0; padding: 12px; color: var(--notifyd-muted-color, #656d76); text-align: center; }
.status.error { color: var(--notifyd-error-color, #cf222e); }
.sentinel { height: 1px; }
.sr { position: absolute; width: 1px; height: 1px; overflow: hidden; clip: rect(0 0 0 0); clip-path: inset(50%); white-space: nowrap; }
`;

export class NotifydInbox extends HTMLElement {
  static observedAttributes = ["endpoint", "token", "page-size", "label", "badge", "tenant"];

  #els = null;
  #items = []; // loaded items, in the API's order
  #nodes = new Map(); // id -> <li>
  #counts = { unread: 0, unseen: 0, unread_capped: false, unseen_capped: false };
  #countsSeq = 0; // bumped by every counts event, to drop stale GET answers
  #cursor = undefined; // undefined: not loaded; null: the end; string: more
  #loaded = false;
  #loading = null; // the page load in flight
  #buffer = null; // stream events held back while a page loads
  #listGen = 0; // bumped when the list is dropped
  #gen = 0; // bumped on every (re)start: async results of older ones are dropped
  #abort = null;
  #client = null; // the headless client (notifyd-client.js) of this endpoint and token
  #unsubscribe = null; // ends this element's stream listener
  #state = "idle";
  #isOpen = false;
  #observer = null;
  #clock = 0;
  #restartQueued = false;
  #connected = false;
  #reauth = false; // the stream ended for a fresh token: resume when it comes

  constructor() {
    super();
    const root = this.attachShadow({ mode: "open" });
    root.innerHTML = `<style>${STYLE}</style>
<button class="bell" part="bell" type="button" aria-haspopup="true" aria-expanded="false" aria-controls="panel">${BELL_SVG}<span class="badge" part="badge" aria-hidden="true" hidden></span></button>
<section id="panel" class="panel" part="panel" role="region" aria-labelledby="heading" hidden>
  <div class="head" part="header"><h2 id="heading"></h2><button class="push" part="push" type="button" hidden>Enable desktop notifications</button><button class="mark-all" part="mark-all" type="button">Mark all read</button></div>
  <div class="scroller">
    <ul class="list" part="list" role="list" aria-labelledby="heading"></ul>
    <p class="empty" hidden>No notifications yet.</p>
    <p class="status" part="status" role="status" aria-live="polite"></p>
    <div class="sentinel" aria-hidden="true"></div>
  </div>
</section>`;
    const $ = (s) => root.querySelector(s);
    this.#els = {
      bell: $(".bell"),
      badge: $(".badge"),
      panel: $(".panel"),
      heading: $("#heading"),
      markAll: $(".mark-all"),
      push: $(".push"),
      scroller: $(".scroller"),
      list: $(".list"),
      empty: $(".empty"),
      status: $(".status"),
      sentinel: $(".sentinel"),
    };
    this.#els.bell.addEventListener("click", () => this.toggle());
    this.#els.markAll.addEventListener("click", () => this.markAllRead());
    this.#els.push.addEventListener("click", () => this.enablePush());
    this.#els.panel.addEventListener("keydown", (e) => {
      if (e.key === "Escape") {
        this.close();
        this.#els.bell.focus();
      }
    });
    this.#els.bell.addEventListener("keydown", (e) => {
      if (e.key === "Escape" && this.#isOpen) this.close();
    });
    this.#renderLabel();
    this.#setStatus("");
  }

  // Attributes as properties.
  get endpoint() { return this.getAttribute("endpoint") || ""; }
  set endpoint(v) { this.setAttribute("endpoint", v); }
  get token() { return this.getAttribute("token") || ""; }

  /** The tenant whose items to show (?tenant=); "" for every item, or the token's tenant claim. */
  get tenant() { return this.getAttribute("tenant") || ""; }
  set token(v) { if (v) this.setAttribute("token", v); else this.removeAttribute("token"); }
  get pageSize() {
    const n = parseInt(this.getAttribute("page-size") || "", 10);
    return n >= 1 ? Math.min(n, MAX_PAGE_SIZE) : DEFAULT_PAGE_SIZE;
  }
  set pageSize(v) { this.setAttribute("page-size", String(v)); }
  get label() { return this.getAttribute("label") || "Notifications"; }
  set label(v) { this.setAttribute("label", v); }
  get badge() { return this.getAttribute("badge") === "unseen" ? "unseen" : "unread"; }
  set badge(v) { this.setAttribute("badge", v); }

  /** The latest {unread, unseen, unread_capped, unseen_capped}: a capped count (99 by default) means more. */
  get counts() { return { ...this.#counts }; }
  /** The loaded items, newest first (copies). */
  get items() { return this.#items.map((it) => ({ ...it })); }
  /** The stream's state: idle, connecting, open, reconnecting, closed, unauthorized. */
  get connectionState() { return this.#state; }

  connectedCallback() {
    this.#connected = true;
    // Offered once the daemon says it has web push (#checkPush).
    this.#els.push.hidden = true;
    document.addEventListener("pointerdown", this.#onOutside, true);
    this.#observer = new IntersectionObserver((entries) => {
      if (entries.some((e) => e.isIntersecting)) this.#maybeLoadMore();
    }, { root: this.#els.scroller, rootMargin: "0px 0px 48px 0px" });
    this.#observer.observe(this.#els.sentinel);
    this.#start();
  }

  disconnectedCallback() {
    this.#connected = false;
    document.removeEventListener("pointerdown", this.#onOutside, true);
    this.#observer?.disconnect();
    this.#observer = null;
    this.#stop();
    this.#stopClock();
  }

  attributeChangedCallback(name, oldValue, newValue) {
    if (oldValue === newValue) return;
    if (name === "label") this.#renderLabel();
    if (name === "badge") this.#renderBadge();
    // A new endpoint is a new inbox: never resume across it.
    if (name === "endpoint") this.#reauth = false;
    if (name === "tenant") this.#reauth = false; // another tenant is another inbox
    if ((name === "token" || name === "endpoint" || name === "tenant") && this.#connected && !this.#restartQueued) {
      // endpoint and token often change together: restart once.
      this.#restartQueued = true;
      queueMicrotask(() => {
        this.#restartQueued = false;
        if (!this.#connected) return;
        if (this.#reauth && this.token) {
          // The fresh token after a reauth: the same inbox, resumed from
          // the last event id, the list kept.
          this.#reauth = false;
          this.#client.setToken(this.token);
          return;
        }
        this.#start();
      });
    }
  }

  open() {
    if (this.#isOpen) return;
    this.#isOpen = true;
    this.#els.panel.hidden = false;
    this.#els.bell.setAttribute("aria-expanded", "true");
    this.#startClock();
    this.#emit("notifyd:open", {});
    if (!this.#loaded && !this.#loading) this.#loadMore();
    else this.#refreshTimes();
    this.#markSeen();
  }

  close() {
    if (!this.#isOpen) return;
    this.#isOpen = false;
    this.#els.panel.hidden = true;
    this.#els.bell.setAttribute("aria-expanded", "false");
    this.#stopClock();
    this.#emit("notifyd:close", {});
  }

  toggle() {
    if (this.#isOpen) this.close();
    else this.open();
  }

  /** Drops the list and loads it again (the panel shows the first page). */
  reload() {
    this.#dropList();
    if (this.#isOpen) return this.#loadMore();
    return Promise.resolve();
  }

  /** Marks the items read. Resolves to the API's {marked} or rejects with a NotifydError. */
  async markRead(ids) {
    ids = [...new Set(ids || [])];
    if (!ids.length) return { marked: 0 };
    const now = new Date().toISOString();
    const undo = [];
    for (const id of ids) {
      const item = this.#find(id);
      if (!item || !isUnread(item)) continue;
      undo.push([item, item.read_at, item.seen_at]);
      item.read_at = now;
      item.seen_at = item.seen_at || now;
      this.#renderItem(item);
      this.#setCounts(this.#less(1, undo[undo.length - 1][2] ? 0 : 1), false);
    }
    try {
      // keepalive: the request survives the navigation a click on a link starts.
      const res = await this.#request("POST", "/v1/inbox/read", { ids }, true);
      this.#emit("notifyd:read", { ids });
      this.#afterWrite();
      return res;
    } catch (err) {
      for (const [item, readAt, seenAt] of undo) {
        item.read_at = readAt;
        item.seen_at = seenAt;
        this.#renderItem(item);
      }
      this.#failed(err, "read");
      this.#refreshCounts();
      throw err;
    }
  }

  /** Marks every unread item read. */
  async markAllRead() {
    const now = new Date().toISOString();
    const undo = [];
    for (const item of this.#items) {
      if (!isUnread(item)) continue;
      undo.push([item, item.read_at, item.seen_at]);
      item.read_at = now;
      item.seen_at = item.seen_at || now;
      this.#renderItem(item);
    }
    this.#setCounts({ unread: 0, unseen: 0 }, false);
    try {
      const res = await this.#request("POST", "/v1/inbox/read", { all: true });
      this.#emit("notifyd:read", { all: true });
      this.#afterWrite();
      return res;
    } catch (err) {
      for (const [item, readAt, seenAt] of undo) {
        item.read_at = readAt;
        item.seen_at = seenAt;
        this.#renderItem(item);
      }
      this.#failed(err, "read");
      this.#refreshCounts();
      throw err;
    }
  }

  /** Archives the items: they leave the list. */
  async archive(ids) {
    ids = [...new Set(ids || [])];
    if (!ids.length) return { marked: 0 };
    const removed = [];
    let unread = 0;
    let unseen = 0;
    for (const id of ids) {
      const item = this.#find(id);
      if (!item) continue;
      removed.push(item);
      if (isUnread(item)) unread++;
      if (isUnread(item) && !item.seen_at) unseen++;
      this.#remove(id);
    }
    this.#setCounts(this.#less(unread, unseen), false);
    this.#renderEmpty();
    try {
      const res = await this.#request("POST", "/v1/inbox/archive", { ids });
      this.#emit("notifyd:archive", { ids });
      this.#afterWrite();
      return res;
    } catch (err) {
      for (const item of removed) this.#upsert(item);
      this.#renderEmpty();
      this.#failed(err, "archive");
      this.#refreshCounts();
      throw err;
    }
  }

  // --- lifecycle ---

  #start() {
    this.#stop(false);
    this.#reauth = false;
    const gen = ++this.#gen;
    this.#abort = new AbortController();
    this.#dropList();
    this.#setCounts({ unread: 0, unseen: 0 }, false);
    this.#setStatus("");
    if (!this.token) {
      this.#setState("idle");
      return;
    }
    this.#client = createClient({ baseUrl: this.endpoint, token: this.token, tenant: this.tenant });
    this.#refreshCounts();
    this.#checkPush(gen);
    this.#connect(gen);
    if (this.#isOpen) this.#loadMore();
  }

  /**
   * Shows "Enable desktop notifications" when the browser can show them, the
   * recipient has not refused, and the daemon has a web push channel (its
   * VAPID key answers; 404 without channels.web_push).
   */
  async #checkPush(gen) {
    this.#els.push.hidden = true;
    if (!(pushSupported() && Notification.permission !== "denied")) return;
    try {
      await this.#request("GET", "/v1/push-subscriptions/vapid-key");
    } catch {
      return;
    }
    if (gen === this.#gen) this.#els.push.hidden = false;
  }

  #stop(report = true) {
    this.#gen++;
    if (this.#unsubscribe) {
      this.#unsubscribe();
      this.#unsubscribe = null;
    }
    if (this.#abort) {
      this.#abort.abort();
      this.#abort = null;
    }
    if (report) this.#setState("closed");
  }

  // --- the stream ---

  // The client opens the stream, resumes it from the last event id after a
  // dropped connection (the browser's own retry, then backoff: 1 s doubling
  // to 60 s, jittered), stops at unauthorized after a 401, and at reauth when
  // the token expires (a fresh token attribute resumes it: setToken).
  #connect(gen) {
    const live = (fn) => (data) => {
      if (gen === this.#gen) fn(data);
    };
    this.#unsubscribe = this.#client.subscribe({
      state: live((state) => this.#setState(state)),
      error: live((err) => this.#failed(err, "stream")),
      counts: live((c) => {
        this.#countsSeq++;
        this.#setCounts(c, true);
      }),
      created: live((item) => {
        this.#event({ kind: "created", item });
        this.#emit("notifyd:item", { item });
      }),
      updated: live((u) => {
        this.#event({ kind: "updated", u });
        this.#emit("notifyd:updated", u);
      }),
      deleted: live((d) => {
        this.#event({ kind: "deleted", ids: d.ids || [] });
        this.#emit("notifyd:deleted", { ids: d.ids || [] });
      }),
      reset: live(() => {
        this.#emit("notifyd:reset", {});
        if (this.#loaded || this.#loading) this.reload();
      }),
      reauth: live(() => {
        this.#reauth = true;
        this.#emit("notifyd:reauth", {});
      }),
    });
  }

  #setState(state) {
    if (state === this.#state) return;
    this.#state = state;
    this.#emit("notifyd:connection", { state });
  }

  /** Applies a stream change to the list, or holds it while a page loads. */
  #event(ev) {
    if (this.#buffer) {
      this.#buffer.push(ev);
      return;
    }
    if (this.#loaded) this.#apply(ev);
  }

  #apply(ev) {
    switch (ev.kind) {
      case "created":
        if (!ev.item.archived_at) this.#upsert(ev.item);
        break;
      case "updated": {
        const u = ev.u;
        for (const id of u.ids || []) {
          const item = this.#find(id);
          if (!item) continue;
          if ("archived_at" in u && u.archived_at) {
            this.#remove(id);
            continue;
          }
          for (const f of ["read_at", "seen_at", "archived_at"]) if (f in u) item[f] = u[f];
          for (const f of ["title", "body", "url"]) if (typeof u[f] === "string") item[f] = u[f]; // a batch re-rendered
          if (u.read_at && !item.seen_at) item.seen_at = u.read_at; // reading marks seen
          this.#renderItem(item);
        }
        break;
      }
      case "deleted":
        for (const id of ev.ids) this.#remove(id);
        break;
    }
    this.#renderEmpty();
  }

  // --- the list ---

  #dropList() {
    this.#listGen++;
    this.#items = [];
    this.#nodes.clear();
    this.#els.list.replaceChildren();
    this.#cursor = undefined;
    this.#loaded = false;
    this.#loading = null;
    this.#buffer = null;
    this.#renderEmpty();
  }

  #maybeLoadMore() {
    if (this.#isOpen && this.#loaded && this.#cursor && !this.#loading) this.#loadMore();
  }

  #loadMore() {
    if (this.#loading) return this.#loading;
    if (this.#cursor === null || !this.token) return Promise.resolve();
    const listGen = this.#listGen;
    const gen = this.#gen;
    const cursor = this.#cursor;
    this.#buffer = [];
    this.#setStatus("Loading…");
    const p = (async () => {
      try {
        const q = new URLSearchParams({ limit: String(this.pageSize) });
        if (cursor) q.set("cursor", cursor);
        const page = await this.#request("GET", "/v1/inbox?" + q);
        if (listGen !== this.#listGen || gen !== this.#gen) return;
        for (const item of page.items || []) this.#upsert(item);
        this.#cursor = page.next_cursor || null;
        this.#loaded = true;
        this.#setStatus("");
      } catch (err) {
        if (listGen !== this.#listGen || gen !== this.#gen) return;
        this.#failed(err, "list");
        this.#loaded = this.#items.length > 0 || this.#loaded;
      } finally {
        if (listGen === this.#listGen && gen === this.#gen) {
          const held = this.#buffer || [];
          this.#buffer = null;
          this.#loading = null;
          if (this.#loaded) for (const ev of held) this.#apply(ev);
          this.#renderEmpty();
          // Observe again: a sentinel still in view after this page fires once more.
          if (this.#observer) {
            this.#observer.unobserve(this.#els.sentinel);
            this.#observer.observe(this.#els.sentinel);
          }
        }
      }
    })();
    this.#loading = p;
    return p;
  }

  #find(id) {
    const li = this.#nodes.get(id);
    return li ? li._item : undefined;
  }

  /** Inserts item at its place in the order, or refreshes the copy shown. */
  #upsert(item) {
    item = { ...item };
    const existing = this.#nodes.get(item.id);
    if (existing) {
      const i = this.#items.indexOf(existing._item);
      if (i >= 0) this.#items[i] = item;
      existing._item = item;
      this.#renderItem(item);
      return;
    }
    // Newest first: live items land at the front, pages at the end.
    let i = 0;
    if (this.#items.length && compareItems(item, this.#items[this.#items.length - 1]) > 0) {
      i = this.#items.length;
    } else {
      while (i < this.#items.length && compareItems(this.#items[i], item) < 0) i++;
    }
    this.#items.splice(i, 0, item);
    const li = this.#createNode(item);
    const next = this.#items[i + 1];
    this.#els.list.insertBefore(li, next ? this.#nodes.get(next.id) : null);
  }

  #remove(id) {
    const li = this.#nodes.get(id);
    if (!li) return;
    const i = this.#items.indexOf(li._item);
    if (i >= 0) this.#items.splice(i, 1);
    this.#nodes.delete(id);
    li.remove();
  }

  #createNode(item) {
    const li = document.createElement("li");
    li.className = "item";
    li.dataset.id = item.id;
    li._item = item;
    this.#nodes.set(item.id, li);
    this.#renderItem(item, li);
    return li;
  }

  /** (Re)builds one item's row. Every piece of item text goes in with textContent. */
  #renderItem(item, li = this.#nodes.get(item.id)) {
    if (!li) return;
    li._item = item;
    const unread = isUnread(item);
    li.classList.toggle("unread", unread);
    li.setAttribute("part", unread ? "item item-unread" : "item");
    const href = safeURL(item.url);
    const main = document.createElement(href ? "a" : "button");
    main.className = "main";
    if (href) main.href = href;
    else main.type = "button";
    const dot = document.createElement("span");
    dot.className = "dot";
    dot.setAttribute("aria-hidden", "true");
    const text = document.createElement("span");
    text.className = "text";
    if (unread) {
      const sr = document.createElement("span");
      sr.className = "sr";
      sr.textContent = "Unread: ";
      text.append(sr);
    }
    const title = document.createElement("span");
    title.className = "title";
    title.setAttribute("part", "title");
    title.textContent = item.title || item.notifier || "";
    text.append(title);
    if (item.body) {
      const body = document.createElement("span");
      body.className = "body";
      body.setAttribute("part", "body");
      body.textContent = item.body;
      text.append(body);
    }
    const time = document.createElement("time");
    time.setAttribute("part", "time");
    time.dateTime = item.created_at || "";
    time.title = absoluteTime(item.created_at, this.#locale());
    time.textContent = relativeTime(item.created_at, this.#locale());
    text.append(time);
    main.append(dot, text);
    main.addEventListener("click", (e) => this.#activate(item.id, e));
    const archive = document.createElement("button");
    archive.type = "button";
    archive.className = "archive";
    archive.setAttribute("part", "archive");
    archive.setAttribute("aria-label", "Archive: " + (item.title || item.notifier || ""));
    archive.title = "Archive";
    archive.textContent = "×";
    archive.addEventListener("click", () => this.archive([item.id]).catch(() => {}));
    li.replaceChildren(main, archive);
  }

  #activate(id, e) {
    const item = this.#find(id);
    if (!item) return;
    const go = this.#emit("notifyd:click", { item: { ...item } }, true);
    if (!go) e.preventDefault();
    if (isUnread(item)) this.markRead([id]).catch(() => {});
  }

  #renderEmpty() {
    this.#els.empty.hidden = !(this.#loaded && this.#cursor === null && this.#items.length === 0);
    this.#els.markAll.disabled = this.#counts.unread === 0 && !this.#items.some(isUnread);
  }

  #refreshTimes() {
    const locale = this.#locale();
    for (const li of this.#nodes.values()) {
      const t = li.querySelector("time");
      if (t) t.textContent = relativeTime(li._item.created_at, locale);
    }
  }

  #startClock() {
    this.#stopClock();
    this.#clock = setInterval(() => this.#refreshTimes(), 30000);
  }

  #stopClock() {
    clearInterval(this.#clock);
    this.#clock = 0;
  }

  #locale() {
    return this.closest("[lang]")?.getAttribute("lang") || document.documentElement.lang || navigator.language;
  }

  // --- counts, badge, label ---

  async #refreshCounts() {
    if (!this.token) return;
    const seq = this.#countsSeq;
    const gen = this.#gen;
    try {
      const c = await this.#request("GET", "/v1/inbox/counts");
      // A counts event that arrived meanwhile is at least as new.
      if (gen === this.#gen && seq === this.#countsSeq) this.#setCounts(c, true);
    } catch (err) {
      if (gen === this.#gen) this.#failed(err, "counts");
    }
  }

  #setCounts(c, emit) {
    this.#counts = {
      unread: Number(c.unread) || 0,
      unseen: Number(c.unseen) || 0,
      unread_capped: c.unread_capped === true,
      unseen_capped: c.unseen_capped === true,
    };
    this.#renderBadge();
    this.#renderEmpty();
    if (emit) this.#emit("notifyd:counts", { ...this.#counts });
  }

  // The counts after unread items (unseen of them) left the unread ones
  // here. A capped count is a floor ("99+"), not a number to count down
  // from: it stays until the stream's next counts event (or a GET) says.
  #less(unread, unseen) {
    const c = this.#counts;
    return {
      unread: c.unread_capped ? c.unread : Math.max(0, c.unread - unread),
      unseen: c.unseen_capped ? c.unseen : Math.max(0, c.unseen - unseen),
      unread_capped: c.unread_capped,
      unseen_capped: c.unseen_capped,
    };
  }

  #renderBadge() {
    const n = this.#counts[this.badge];
    // The server caps each count (99 by default, the badge's own limit):
    // a capped count means more than it says.
    const more = n > 99 || this.#counts[`${this.badge}_capped`];
    const badge = this.#els.badge;
    badge.textContent = more ? "99+" : String(n);
    badge.hidden = n === 0;
    badge.dataset.count = String(n);
    const what = this.badge === "unseen" ? "new" : "unread";
    this.#els.bell.setAttribute("aria-label", n ? `${this.label}, ${more ? "more than 99" : n} ${what}` : this.label);
  }

  #renderLabel() {
    this.#els.heading.textContent = this.label;
    this.#renderBadge();
  }

  async #markSeen() {
    if (!this.token || this.#counts.unseen === 0) return;
    const now = new Date().toISOString();
    for (const item of this.#items) if (isUnread(item) && !item.seen_at) item.seen_at = now;
    this.#setCounts({ ...this.#counts, unseen: 0, unseen_capped: false }, false);
    try {
      await this.#request("POST", "/v1/inbox/seen", {});
      this.#afterWrite();
    } catch (err) {
      this.#failed(err, "seen");
      this.#refreshCounts();
    }
  }

  /** After a write, the stream's counts event corrects the badge; without a stream, ask. */
  #afterWrite() {
    if (!this.#client || this.#client.connectionState !== "open") this.#refreshCounts();
  }

  // --- plumbing ---

  #request(method, path, body, keepalive = false) {
    const signal = this.#abort && !keepalive ? this.#abort.signal : undefined;
    path = withTenant(path, this.tenant);
    if (!this.#client) return request({ endpoint: this.endpoint, token: this.token, method, path, body, signal, keepalive });
    return this.#client.request(method, path, body, { signal, keepalive });
  }

  /** Turns on desktop notifications for this browser (see the file's doc). */
  async enablePush() {
    const btn = this.#els.push;
    btn.disabled = true;
    try {
      const r = await enablePush({ endpoint: this.endpoint, token: this.token, serviceWorker: this.getAttribute("service-worker") || "" });
      btn.textContent = "Desktop notifications on";
      this.#emit("notifyd:push", { state: "enabled", id: r.id, endpoint: r.endpoint });
      return r;
    } catch (err) {
      btn.disabled = false;
      if (err && (err.code === "permission_denied" || err.code === "unsupported" || err.status === 404)) btn.hidden = true;
      this.#failed(err, "push");
      return null;
    }
  }

  /** Turns desktop notifications off for this browser. */
  async disablePush() {
    try {
      const had = await disablePush({ endpoint: this.endpoint, token: this.token, serviceWorker: this.getAttribute("service-worker") || "" });
      this.#els.push.disabled = false;
      this.#els.push.textContent = "Enable desktop notifications";
      this.#emit("notifyd:push", { state: "disabled", had });
      return had;
    } catch (err) {
      this.#failed(err, "push");
      return false;
    }
  }

  #failed(err, action) {
    if (err && err.message === "aborted") return;
    const detail = {
      status: err.status || 0,
      code: err.code || "error",
      message: err.message || String(err),
      details: err.details || [],
      action,
    };
    if (action === "list" || action === "read" || action === "archive" || action === "stream") {
      this.#setStatus(detail.message, true);
    }
    this.#emit("notifyd:error", detail);
  }

  #setStatus(text, error = false) {
    this.#els.status.textContent = text;
    this.#els.status.classList.toggle("error", error);
    this.#els.status.hidden = !text;
  }

  #emit(name, detail, cancelable = false) {
    return this.dispatchEvent(new CustomEvent(name, { detail, bubbles: true, composed: true, cancelable }));
  }

  #onOutside = (e) => {
    if (this.#isOpen && !e.composedPath().includes(this)) this.close();
  };
}

if (!customElements.get("notifyd-inbox")) customElements.define("notifyd-inbox", NotifydInbox);
