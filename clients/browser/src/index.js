// @notifyd/browser: the headless notifyd client for a recipient's own app.
// No framework and no DOM: it needs only fetch, and an EventSource for the
// live stream where one exists (browsers; React Native with a pluggable one).
// Without an EventSource (Node) the stream is read over fetch itself.
//
// The daemon serves this file at /ui/notifyd-client.js and its web components
// import it, so <notifyd-inbox>, @notifyd/react and an app's own code share one
// client. Types: index.d.ts beside it.

/**
 * An error answered by the notifyd API, or a failure without an answer
 * (status 0: code network_error, or "aborted"). A page on an origin the daemon
 * does not take gets code origin_not_allowed (403).
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
 * without an answer: a browser hides why (a refused CORS preflight looks like
 * a network failure), and the usual cause is an origin missing from the
 * daemon's http.allowed_origins. Outside a page (Node, React Native) it is "".
 */
export function crossOriginHint(url) {
  const loc = globalThis.location;
  if (!loc || !loc.origin || loc.origin === "null") return "";
  let target;
  try {
    target = new URL(url, loc.href);
  } catch {
    return "";
  }
  if (target.origin === loc.origin) return "";
  return ` (calling ${target.origin} from ${loc.origin}: check that notifyd is running there,` +
    ` and add this origin, ${loc.origin}, to http.allowed_origins in its config)`;
}

/** withTenant adds ?tenant= (or &tenant=) to an API path when tenant is set. */
export function withTenant(path, tenant) {
  if (!tenant) return path;
  return path + (path.includes("?") ? "&" : "?") + "tenant=" + encodeURIComponent(tenant);
}

/** apiURL joins a base URL ("" for the page's own origin) and an API path. */
export function apiURL(base, path) {
  return String(base || "").replace(/\/+$/, "") + path;
}

/** The stream's states, in the order a healthy stream goes through them. */
export const CONNECTION_STATES = ["idle", "connecting", "open", "reconnecting", "closed", "unauthorized", "reauth"];

const STREAM_EVENTS = { "inbox.created": "created", "inbox.updated": "updated", "inbox.deleted": "deleted", counts: "counts", reset: "reset" };

/** createClient returns a NotifydClient for the options (see NotifydClient). */
export function createClient(options) {
  return new NotifydClient(options);
}

/**
 * A recipient's client. Options: baseUrl (notifyd's URL, "" for the page's
 * origin), token or getToken (a function returning the token or a promise of
 * it), refreshToken (called when the API answers 401 or the stream's token
 * expires; its token is used from then on), tenant, fetch and EventSource (the
 * globals by default; EventSource null reads the stream over fetch), retry
 * ({minMs: 1000, maxMs: 60000}: the stream's reconnect backoff, doubling, with
 * jitter).
 */
export class NotifydClient {
  #token;
  #getToken;
  #refresh;
  #fetch;
  #ES;
  #retryMin;
  #retryMax;
  #listeners = new Set();
  #state = "idle";
  #lastEventId = "";
  #es = null;
  #gen = 0;
  #timer = 0;
  #delay;
  #refreshing = null;

  constructor(options = {}) {
    this.baseUrl = options.baseUrl || "";
    this.tenant = options.tenant || "";
    this.#token = options.token || "";
    this.#getToken = options.getToken || null;
    this.#refresh = options.refreshToken || null;
    this.#fetch = options.fetch || ((...a) => globalThis.fetch(...a));
    this.#ES = options.EventSource !== undefined ? options.EventSource : globalThis.EventSource || null;
    this.#retryMin = (options.retry && options.retry.minMs) || 1000;
    this.#retryMax = (options.retry && options.retry.maxMs) || 60000;
    this.#delay = this.#retryMin;
    this.#lastEventId = options.lastEventId || "";
  }

  /** The stream's state: idle, connecting, open, reconnecting, closed, unauthorized or reauth. */
  get connectionState() { return this.#state; }
  /** The id of the last stream event seen: where a reconnect resumes. */
  get lastEventId() { return this.#lastEventId; }

  /** The current token, asking getToken when there is none yet. */
  async token() {
    if (!this.#token && this.#getToken) this.#token = (await this.#getToken()) || "";
    return this.#token;
  }

  /**
   * setToken replaces the token. A stream waiting for one (state reauth or
   * unauthorized) resumes from the last event id.
   */
  setToken(token) {
    this.#token = token || "";
    if (this.#listeners.size && (this.#state === "reauth" || this.#state === "unauthorized" || this.#state === "idle")) {
      this.#connect(this.#gen);
    }
  }

  /** Asks refreshToken (or getToken) for a fresh token; false when there is no way to. */
  async #refreshToken() {
    const fn = this.#refresh || this.#getToken;
    if (!fn) return false;
    if (!this.#refreshing) {
      this.#refreshing = Promise.resolve()
        .then(() => fn())
        .then((t) => { if (t) this.#token = t; return !!t; })
        .finally(() => { this.#refreshing = null; });
    }
    return this.#refreshing;
  }

  /**
   * request calls the API: JSON in, JSON out. A refusal throws a NotifydError
   * with the API's code and details; a 401 asks refreshToken once and retries.
   * tenant (the client's) is added to inbox and preference paths by the
   * methods below, not here.
   */
  async request(method, path, body, { signal, keepalive = false, retried = false } = {}) {
    const token = await this.token();
    const headers = { Accept: "application/json" };
    if (token) headers.Authorization = "Bearer " + token;
    const init = { method, headers, cache: "no-store", credentials: "omit" };
    if (keepalive) init.keepalive = true;
    if (signal) init.signal = signal;
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const url = apiURL(this.baseUrl, path);
    let res;
    try {
      res = await this.#fetch(url, init);
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
    if (res.status === 401 && !retried && (await this.#refreshToken())) {
      return this.request(method, path, body, { signal, keepalive, retried: true });
    }
    if (!res.ok) throw new NotifydError(res.status, data, text.slice(0, 200));
    return data;
  }

  #t(path) { return withTenant(path, this.tenant); }

  /** A page of the inbox, newest first: {items, next_cursor}. filter: all (default), unread or archived. */
  inbox({ limit, cursor, filter, signal } = {}) {
    const q = new URLSearchParams();
    if (limit) q.set("limit", String(limit));
    if (cursor) q.set("cursor", cursor);
    if (filter) q.set("filter", filter);
    const s = q.toString();
    return this.request("GET", this.#t("/v1/inbox" + (s ? "?" + s : "")), undefined, { signal });
  }

  /** {unread, unseen, unread_capped, unseen_capped}, each exact up to max (default 99). */
  counts({ max, signal } = {}) {
    return this.request("GET", this.#t("/v1/inbox/counts" + (max ? "?max=" + max : "")), undefined, { signal });
  }

  /** Marks the items read (and seen): {marked}. keepalive lets it outlive a navigation. */
  markRead(ids, opts) { return this.request("POST", this.#t("/v1/inbox/read"), { ids }, opts); }
  /** Marks every unread item read. */
  markAllRead(opts) { return this.request("POST", this.#t("/v1/inbox/read"), { all: true }, opts); }
  /** Marks the items unread. */
  markUnread(ids, opts) { return this.request("POST", this.#t("/v1/inbox/unread"), { ids }, opts); }
  /** Marks the items seen; without ids, every unseen item. */
  markSeen(ids, opts) { return this.request("POST", this.#t("/v1/inbox/seen"), ids ? { ids } : {}, opts); }
  /** Archives the items: they leave the "all" and "unread" lists. */
  archive(ids, opts) { return this.request("POST", this.#t("/v1/inbox/archive"), { ids }, opts); }

  /** The recipient's preference rules and the effective modes: {rules, effective, …}. */
  preferences(opts) { return this.request("GET", this.#t("/v1/preferences"), undefined, opts); }
  /** Replaces the recipient's rules; answers like preferences(). */
  savePreferences(rules, opts) { return this.request("PUT", this.#t("/v1/preferences"), { rules }, opts); }
  /** The recipient's quiet hours: {quiet_hours, …}. */
  quietHours(opts) { return this.request("GET", "/v1/quiet-hours", undefined, opts); }
  /** Sets (or, with null, clears) the recipient's quiet hours. */
  saveQuietHours(quietHours, opts) { return this.request("PUT", "/v1/quiet-hours", { quiet_hours: quietHours }, opts); }

  /** The daemon's VAPID public key for web push (404 without a web push channel). */
  async pushKey(opts) { return (await this.request("GET", "/v1/push-subscriptions/vapid-key", undefined, opts)).public_key; }
  /** Registers a browser's PushSubscription (its toJSON()): {id}. */
  registerPush(subscription, opts) {
    const s = typeof subscription.toJSON === "function" ? subscription.toJSON() : subscription;
    return this.request("POST", "/v1/push-subscriptions", { endpoint: s.endpoint, expirationTime: s.expirationTime ?? null, keys: s.keys }, opts);
  }
  /** The recipient's web push subscriptions: {subscriptions}. */
  pushSubscriptions(opts) { return this.request("GET", "/v1/push-subscriptions", undefined, opts); }
  /** Deletes one web push subscription. */
  unregisterPush(id, opts) { return this.request("DELETE", "/v1/push-subscriptions/" + encodeURIComponent(id), undefined, opts); }
  /** Registers a mobile device's push token ({platform: "apns"|"fcm", token, app?}): {id}. */
  registerDevice(device, opts) { return this.request("POST", "/v1/devices", device, opts); }
  /** Deletes a mobile device registration. */
  unregisterDevice(id, opts) { return this.request("DELETE", "/v1/devices/" + encodeURIComponent(id), undefined, opts); }

  /**
   * subscribe listens to the live stream: listener has any of created(item),
   * updated(change), deleted({ids}), counts(counts), reset(), reauth(),
   * state(state) and error(err). The stream opens with the first listener and
   * closes after the last one left; the function returned removes this one.
   */
  subscribe(listener) {
    this.#listeners.add(listener);
    if (this.#listeners.size === 1) {
      this.#delay = this.#retryMin;
      this.#connect(this.#gen);
    } else if (listener.state) {
      listener.state(this.#state);
    }
    return () => {
      if (!this.#listeners.delete(listener)) return;
      if (!this.#listeners.size) this.#stop("idle");
    };
  }

  /** close ends the stream for every listener (they stay registered: setToken or reconnect() opens it again). */
  close() { this.#stop("closed"); }

  /** reconnect drops the stream's connection and opens a new one from the last event id. */
  reconnect() {
    if (!this.#listeners.size) return;
    this.#stop(this.#state);
    this.#delay = this.#retryMin;
    this.#connect(this.#gen);
  }

  #emit(kind, data) {
    for (const l of [...this.#listeners]) {
      const fn = l[kind];
      if (fn) {
        try {
          fn(data);
        } catch (err) {
          queueMicrotask(() => { throw err; });
        }
      }
    }
  }

  #setState(state) {
    if (state === this.#state) return;
    this.#state = state;
    this.#emit("state", state);
  }

  #stop(state) {
    this.#gen++;
    clearTimeout(this.#timer);
    this.#timer = 0;
    if (this.#es) {
      this.#es.close();
      this.#es = null;
    }
    this.#setState(state);
  }

  async #connect(gen) {
    if (gen !== this.#gen) return;
    const myGen = ++this.#gen;
    clearTimeout(this.#timer);
    if (this.#es) {
      this.#es.close();
      this.#es = null;
    }
    let token;
    try {
      token = await this.token();
    } catch (err) {
      if (myGen !== this.#gen) return;
      this.#emit("error", err);
      this.#retry(myGen);
      return;
    }
    if (myGen !== this.#gen) return;
    if (!token) {
      this.#setState("idle");
      return;
    }
    const q = new URLSearchParams();
    if (this.tenant) q.set("tenant", this.tenant);
    if (this.#lastEventId) q.set("last_event_id", this.#lastEventId);
    const path = "/v1/inbox/stream";
    let es;
    if (this.#ES) {
      // EventSource cannot set headers: the token rides in the query.
      q.set("access_token", token);
      es = new this.#ES(apiURL(this.baseUrl, path) + "?" + q);
    } else {
      es = new FetchEventSource(apiURL(this.baseUrl, path) + (q.toString() ? "?" + q : ""), token, this.#fetch);
    }
    this.#es = es;
    this.#setState(this.#lastEventId ? "reconnecting" : "connecting");
    const live = () => myGen === this.#gen;
    for (const [name, kind] of Object.entries(STREAM_EVENTS)) {
      es.addEventListener(name, (e) => {
        if (!live()) return;
        if (e.lastEventId) this.#lastEventId = e.lastEventId;
        let data = {};
        try {
          data = e.data ? JSON.parse(e.data) : {};
        } catch {
          return;
        }
        this.#emit(kind, data);
      });
    }
    // The token expired or was revoked: the server ends the stream. Close it
    // first (a browser would reconnect with the expired token), then resume
    // with a fresh token from the last event id.
    es.addEventListener("reauth", async () => {
      if (!live()) return;
      es.close();
      this.#es = null;
      this.#token = "";
      this.#setState("reauth");
      this.#emit("reauth", {});
      let ok = false;
      try {
        ok = await this.#refreshToken();
      } catch (err) {
        this.#emit("error", err);
      }
      if (ok && live()) this.#connect(myGen);
    });
    es.onopen = () => {
      if (!live()) return;
      this.#delay = this.#retryMin;
      this.#setState("open");
    };
    es.onerror = () => {
      if (!live()) return;
      if (es.readyState === 0) {
        this.#setState("reconnecting"); // a browser's EventSource retries by itself, with Last-Event-ID
        return;
      }
      es.close();
      if (this.#es === es) this.#es = null;
      this.#setState("closed");
      this.#probe(myGen);
    };
  }

  // The stream failed for good: a 401 will not get better by retrying
  // (refresh the token, or stop at unauthorized), nor will an origin the
  // daemon does not take; anything else is retried with backoff.
  async #probe(gen) {
    try {
      await this.request("GET", this.#t("/v1/inbox/counts"), undefined, { retried: true });
    } catch (err) {
      if (gen !== this.#gen) return;
      if (err.status === 401) {
        let ok = false;
        try {
          ok = await this.#refreshToken();
        } catch (e) {
          err = e;
        }
        if (gen !== this.#gen) return;
        if (ok) {
          this.#connect(gen);
          return;
        }
        this.#setState("unauthorized");
        this.#emit("error", err);
        return;
      }
      if (err.code === "origin_not_allowed") {
        this.#setState("closed");
        this.#emit("error", err);
        return;
      }
    }
    if (gen === this.#gen) this.#retry(gen);
  }

  #retry(gen) {
    const delay = this.#delay * (0.75 + Math.random() / 2);
    this.#delay = Math.min(this.#delay * 2, this.#retryMax);
    this.#setState("reconnecting");
    this.#timer = setTimeout(() => this.#connect(gen), delay);
  }
}

/**
 * FetchEventSource reads a Server-Sent Events stream over fetch, with the
 * token in the Authorization header, where there is no EventSource (Node).
 * It has the part of EventSource's interface the client uses; it does not
 * reconnect by itself (readyState 2 on any end).
 */
export class FetchEventSource {
  readyState = 0;
  onopen = null;
  onerror = null;
  #handlers = new Map();
  #abort = new AbortController();

  constructor(url, token, fetchFn) {
    this.url = url;
    this.#run(token, fetchFn || ((...a) => globalThis.fetch(...a)));
  }

  addEventListener(name, fn) {
    if (!this.#handlers.has(name)) this.#handlers.set(name, []);
    this.#handlers.get(name).push(fn);
  }

  close() {
    this.readyState = 2;
    this.#abort.abort();
  }

  async #run(token, fetchFn) {
    try {
      const res = await fetchFn(this.url, {
        headers: { Accept: "text/event-stream", Authorization: "Bearer " + token },
        cache: "no-store",
        signal: this.#abort.signal,
      });
      if (!res.ok || !res.body || !String(res.headers.get("content-type")).startsWith("text/event-stream")) {
        throw new Error("stream refused: HTTP " + res.status);
      }
      this.readyState = 1;
      if (this.onopen) this.onopen({});
      const reader = res.body.getReader();
      const dec = new TextDecoder();
      let buf = "";
      let ev = { type: "message", data: [], id: "" };
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        buf += dec.decode(value, { stream: true });
        let nl;
        while ((nl = buf.search(/\r\n|\n|\r/)) >= 0) {
          const line = buf.slice(0, nl);
          buf = buf.slice(nl + (buf.startsWith("\r\n", nl) ? 2 : 1));
          if (line === "") {
            if (ev.data.length) this.#dispatch(ev.type, ev.data.join("\n"), ev.id);
            ev = { type: "message", data: [], id: "" };
            continue;
          }
          if (line.startsWith(":")) continue;
          const i = line.indexOf(":");
          const field = i < 0 ? line : line.slice(0, i);
          const val = i < 0 ? "" : line.slice(i + 1).replace(/^ /, "");
          if (field === "event") ev.type = val;
          else if (field === "data") ev.data.push(val);
          else if (field === "id") ev.id = val;
        }
      }
    } catch {
      // fall through: ended
    }
    if (this.readyState === 2 && this.#abort.signal.aborted) return;
    this.readyState = 2;
    if (this.onerror) this.onerror({});
  }

  #dispatch(type, data, lastEventId) {
    for (const fn of this.#handlers.get(type) || []) fn({ type, data, lastEventId });
  }
}
