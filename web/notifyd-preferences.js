// <notifyd-preferences>: a notifyd preference center as a custom element.
// Plain JavaScript, an ES module, no dependencies and no build step.
//
//   <script type="module" src="https://notify.example.test/ui/notifyd-preferences.js"></script>
//   <notifyd-preferences endpoint="https://notify.example.test" token="<recipient JWT>"></notifyd-preferences>
//
// Attributes (each is also a property):
//   endpoint   notifyd's base URL; empty or absent: the page's own origin.
//   token      the recipient token, sent as "Authorization: Bearer".
//   label      the table's caption (default "Notification preferences").
// Changing endpoint or token reloads.
//
// What it does: GET /v1/preferences and render its "effective" map as a table,
// one row per notifier (grouped by category) and one column per channel,
// with a select in every cell the notifier uses: Immediately, Digest (email
// only) or Off. Off is disabled for required notifiers (the API reads it as
// the default anyway), unless their default for that channel is off. Save sends the changed cells as rules
// {"scope":"notifier:<n>","channel":"<c>","mode":"<m>"}, merged with the
// rules already stored (a changed cell replaces the rule with the same scope
// and channel, every other rule is kept), in one PUT /v1/preferences, and
// renders the answer. Errors show the API's message and each detail.
//
// Quiet hours: below the table, a form for the recipient's quiet hours
// (GET and PUT /v1/quiet-hours): a checkbox and two time inputs, saved by
// their own button; email, SMS and push that would be sent inside the window
// wait until it ends. Hidden when the daemon has no quiet hours to offer.
//
// Property labels: an object mapping a notifier name, channel name, category
// or mode to the text shown for it ({"comment.created": "Comments on my
// posts", "in_app": "In the app"}); set it before or after connecting.
// Methods: reload(), save(), saveQuietHours(). Read-only properties: rules,
// effective, dirty, quietHours.
//
// Events (bubbling, composed):
//   notifyd:preferences-loaded  {rules, effective}
//   notifyd:preferences-saved   {rules, effective}
//   notifyd:quiet-hours-saved   {quietHours}
//   notifyd:error               {status, code, message, details, action}
//
// Theming: --notifyd-font, --notifyd-color, --notifyd-muted-color,
// --notifyd-bg, --notifyd-border, --notifyd-accent, --notifyd-radius,
// --notifyd-changed-bg, --notifyd-error-color; parts table, select, save,
// revert, status, error, quiet, quiet-save.
//
// Every name and message from the API is set with textContent.

import { NotifydError, request, withTenant } from "./notifyd-api.js";

export { NotifydError };

// The columns are the daemon's registered per-recipient channels, in the
// order GET /v1/preferences lists them ("channels"), each offering the modes
// listed there: a channel a program registers itself shows up with no change
// here. Default texts for the built-in channels and for modes, and the
// table's own words; labels overrides any of them, and any other channel
// shows its name.
const CHANNEL_TEXT = { in_app: "In-app", email: "Email", webhook: "Webhook", sms: "Text message", web_push: "Desktop notification",
  fcm: "Android app", apns: "iOS app" };
const MODE_TEXT = { immediate: "Immediately", digest: "Digest", off: "Off" };
const UI_TEXT = { notification: "Notification", other: "Other", required: "required", muted: "muted" };

const STYLE = `
:host { display: block; font: var(--notifyd-font, 14px/1.4 system-ui, -apple-system, "Segoe UI", sans-serif); color: var(--notifyd-color, #1f2328); }
:host([hidden]), [hidden] { display: none !important; }
table { border-collapse: collapse; width: 100%; background: var(--notifyd-bg, #fff); }
caption { text-align: left; font-weight: 600; padding: 0 0 8px; }
th, td { padding: 6px 10px; border-bottom: 1px solid var(--notifyd-border, #d0d7de); text-align: left; vertical-align: middle; }
thead th { font-weight: 600; color: var(--notifyd-muted-color, #656d76); }
.category th { padding-top: 14px; font-weight: 600; text-transform: capitalize; }
tbody th { font-weight: 400; }
.tag { display: inline-block; margin-left: 6px; padding: 0 6px; border: 1px solid var(--notifyd-border, #d0d7de); border-radius: 10px; font-size: .8em; color: var(--notifyd-muted-color, #656d76); }
select { font: inherit; padding: 2px 4px; border: 1px solid var(--notifyd-border, #d0d7de); border-radius: var(--notifyd-radius, 6px); background: var(--notifyd-bg, #fff); color: inherit; }
td.changed select { background: var(--notifyd-changed-bg, #fff8c5); }
.none { color: var(--notifyd-muted-color, #656d76); }
.actions { display: flex; align-items: center; gap: 8px; margin-top: 12px; }
button { font: inherit; padding: 4px 12px; border: 1px solid var(--notifyd-border, #d0d7de); border-radius: var(--notifyd-radius, 6px); background: var(--notifyd-bg, #fff); color: inherit; cursor: pointer; }
button.save { background: var(--notifyd-accent, #0969da); border-color: var(--notifyd-accent, #0969da); color: #fff; }
button:disabled { opacity: .5; cursor: default; }
button:focus-visible, select:focus-visible { outline: 2px solid var(--notifyd-accent, #0969da); outline-offset: 1px; }
.status { color: var(--notifyd-muted-color, #656d76); }
.error { margin-top: 12px; padding: 8px 12px; border: 1px solid var(--notifyd-error-color, #cf222e); border-radius: var(--notifyd-radius, 6px); color: var(--notifyd-error-color, #cf222e); }
.quiet { margin-top: 16px; }
.quiet fieldset { border: 1px solid var(--notifyd-border, #d0d7de); border-radius: var(--notifyd-radius, 6px); padding: 8px 12px; display: flex; flex-wrap: wrap; align-items: center; gap: 8px; }
.quiet legend { font-weight: 600; padding: 0 4px; }
.quiet input[type=time] { font: inherit; }
.error p { margin: 0; }
.error ul { margin: 4px 0 0; padding-left: 20px; }
`;

export class NotifydPreferences extends HTMLElement {
  static observedAttributes = ["endpoint", "token", "label", "tenant"];

  #els = null;
  #rules = [];
  #effective = {};
  #channels = []; // [{name, modes}] from the API, in display order
  #labels = {};
  #gen = 0;
  #abort = null;
  #connected = false;
  #reloadQueued = false;
  #saving = false;
  #quiet = null; // {quiet_hours, timezone} as last loaded or saved; null: not offered

  constructor() {
    super();
    const root = this.attachShadow({ mode: "open" });
    root.innerHTML = `<style>${STYLE}</style>
<form part="form" novalidate>
  <table part="table"><caption></caption><thead></thead></table>
  <div class="actions">
    <button class="save" part="save" type="submit" disabled>Save</button>
    <button class="revert" part="revert" type="button" disabled>Cancel</button>
    <span class="status" part="status" role="status" aria-live="polite"></span>
  </div>
  <div class="error" part="error" role="alert" hidden><p class="message"></p><ul class="details"></ul></div>
</form>
<form class="quiet" part="quiet" novalidate hidden>
  <fieldset><legend>Quiet hours</legend>
    <label><input type="checkbox" class="quiet-on"> Hold email and other messages from</label>
    <input type="time" class="quiet-start" aria-label="Quiet hours start" value="22:00" required>
    <span>to</span>
    <input type="time" class="quiet-end" aria-label="Quiet hours end" value="07:00" required>
    <span class="quiet-zone"></span>
    <button class="quiet-save" part="quiet-save" type="submit" disabled>Save quiet hours</button>
    <span class="quiet-status" role="status" aria-live="polite"></span>
  </fieldset>
</form>`;
    const $ = (s) => root.querySelector(s);
    this.#els = {
      form: $("form"),
      table: $("table"),
      caption: $("caption"),
      thead: $("thead"),
      save: $(".save"),
      revert: $(".revert"),
      status: $(".status"),
      error: $(".error"),
      message: $(".error .message"),
      details: $(".error .details"),
      quiet: $(".quiet"),
      quietOn: $(".quiet-on"),
      quietStart: $(".quiet-start"),
      quietEnd: $(".quiet-end"),
      quietZone: $(".quiet-zone"),
      quietSave: $(".quiet-save"),
      quietStatus: $(".quiet-status"),
    };
    this.#els.quiet.addEventListener("submit", (e) => {
      e.preventDefault();
      this.saveQuietHours().catch(() => {});
    });
    this.#els.quiet.addEventListener("input", () => this.#renderQuietButton());
    this.#els.quiet.addEventListener("change", () => this.#renderQuietButton());
    this.#els.form.addEventListener("submit", (e) => {
      e.preventDefault();
      this.save().catch(() => {});
    });
    this.#els.revert.addEventListener("click", () => this.#render());
    this.#els.form.addEventListener("change", (e) => {
      const sel = e.target;
      if (sel instanceof HTMLSelectElement) sel.parentElement.classList.toggle("changed", sel.value !== sel.dataset.initial);
      this.#renderButtons();
    });
    this.#els.caption.textContent = this.label;
  }

  get endpoint() { return this.getAttribute("endpoint") || ""; }
  set endpoint(v) { this.setAttribute("endpoint", v); }
  get token() { return this.getAttribute("token") || ""; }

  /** The tenant whose preferences to show and save (?tenant=): its rules, resolved with its defaults. */
  get tenant() { return this.getAttribute("tenant") || ""; }
  set token(v) { if (v) this.setAttribute("token", v); else this.removeAttribute("token"); }
  get label() { return this.getAttribute("label") || "Notification preferences"; }
  set label(v) { this.setAttribute("label", v); }
  get labels() { return { ...this.#labels }; }
  set labels(v) {
    this.#labels = v && typeof v === "object" ? { ...v } : {};
    this.#render();
  }
  /** The stored rules, as last loaded or saved. */
  get rules() { return this.#rules.map((r) => ({ ...r })); }
  /** The effective map, as last loaded or saved. */
  get effective() { return JSON.parse(JSON.stringify(this.#effective)); }
  /** Whether a cell differs from what is stored. */
  get dirty() { return this.#changes().length > 0; }
  /** The stored quiet hours ({start, end}), null for none or not loaded. */
  get quietHours() { return this.#quiet && this.#quiet.quiet_hours ? { ...this.#quiet.quiet_hours } : null; }

  connectedCallback() {
    this.#connected = true;
    this.reload();
  }

  disconnectedCallback() {
    this.#connected = false;
    this.#gen++;
    this.#abort?.abort();
  }

  attributeChangedCallback(name, oldValue, newValue) {
    if (oldValue === newValue) return;
    if (name === "label") this.#els.caption.textContent = this.label;
    if ((name === "token" || name === "endpoint" || name === "tenant") && this.#connected && !this.#reloadQueued) {
      this.#reloadQueued = true;
      queueMicrotask(() => {
        this.#reloadQueued = false;
        if (this.#connected) this.reload();
      });
    }
  }

  /** Loads the preferences again, dropping unsaved changes. */
  async reload() {
    const gen = ++this.#gen;
    this.#abort?.abort();
    this.#abort = new AbortController();
    this.#showError(null);
    if (!this.token) {
      this.#rules = [];
      this.#effective = {};
      this.#channels = [];
      this.#acceptQuiet(null);
      this.#render();
      this.#setStatus("");
      return;
    }
    this.#setStatus("Loading…");
    // Quiet hours load alongside; a daemon without them hides the form.
    const quiet = this.#request("GET", "/v1/quiet-hours", undefined, this.#abort.signal).catch(() => null);
    try {
      const data = await this.#request("GET", "/v1/preferences", undefined, this.#abort.signal);
      if (gen !== this.#gen) return;
      this.#accept(data);
      const q = await quiet;
      if (gen !== this.#gen) return;
      this.#acceptQuiet(q);
      this.#setStatus("");
      this.#emit("notifyd:preferences-loaded", { rules: this.rules, effective: this.effective });
    } catch (err) {
      if (gen !== this.#gen) return;
      this.#setStatus("");
      this.#failed(err, "load");
    }
  }

  /** Saves the changed cells as rules merged with the stored ones. */
  async save() {
    const changes = this.#changes();
    if (!changes.length || this.#saving) return null;
    const key = (r) => r.scope + "\u0000" + r.channel;
    const changed = new Set(changes.map(key));
    const rules = this.#rules.filter((r) => !changed.has(key(r))).concat(changes);
    const gen = this.#gen;
    this.#saving = true;
    this.#renderButtons();
    this.#showError(null);
    this.#setStatus("Saving…");
    try {
      const data = await this.#request("PUT", "/v1/preferences", { rules }, this.#abort?.signal);
      if (gen !== this.#gen) return null;
      this.#accept(data);
      this.#setStatus("Saved.");
      this.#emit("notifyd:preferences-saved", { rules: this.rules, effective: this.effective });
      return data;
    } catch (err) {
      if (gen === this.#gen) {
        this.#setStatus("");
        this.#failed(err, "save");
      }
      throw err;
    } finally {
      this.#saving = false;
      this.#renderButtons();
    }
  }

  /** Saves the quiet hours form (unchecked: none) with PUT /v1/quiet-hours. */
  async saveQuietHours() {
    if (!this.#quiet || this.#saving) return null;
    const e = this.#els;
    const quiet_hours = e.quietOn.checked ? { start: e.quietStart.value, end: e.quietEnd.value } : null;
    const gen = this.#gen;
    this.#saving = true;
    this.#renderQuietButton();
    this.#showError(null);
    e.quietStatus.textContent = "Saving…";
    try {
      const data = await this.#request("PUT", "/v1/quiet-hours", { quiet_hours }, this.#abort?.signal);
      if (gen !== this.#gen) return null;
      this.#acceptQuiet(data);
      e.quietStatus.textContent = "Saved.";
      this.#emit("notifyd:quiet-hours-saved", { quietHours: this.quietHours });
      return data;
    } catch (err) {
      if (gen === this.#gen) {
        e.quietStatus.textContent = "";
        this.#failed(err, "save-quiet-hours");
      }
      throw err;
    } finally {
      this.#saving = false;
      this.#renderQuietButton();
    }
  }

  #acceptQuiet(data) {
    const e = this.#els;
    this.#quiet = data && typeof data === "object" && "quiet_hours" in data ? data : null;
    e.quiet.hidden = !this.#quiet;
    const q = this.#quiet && this.#quiet.quiet_hours;
    e.quietOn.checked = !!q;
    if (q) {
      e.quietStart.value = q.start;
      e.quietEnd.value = q.end;
    }
    e.quietZone.textContent = this.#quiet && this.#quiet.timezone ? "(" + this.#quiet.timezone + ")" : "";
    this.#renderQuietButton();
  }

  /** Whether the quiet hours form differs from what is stored. */
  #quietDirty() {
    if (!this.#quiet) return false;
    const e = this.#els;
    const q = this.#quiet.quiet_hours;
    if (!e.quietOn.checked) return !!q;
    return !q || q.start !== e.quietStart.value || q.end !== e.quietEnd.value;
  }

  #renderQuietButton() {
    const e = this.#els;
    e.quietStart.disabled = e.quietEnd.disabled = !e.quietOn.checked;
    e.quietSave.disabled = !this.#quietDirty() || this.#saving || (e.quietOn.checked && (!e.quietStart.value || !e.quietEnd.value));
  }

  #accept(data) {
    this.#rules = Array.isArray(data && data.rules) ? data.rules.map((r) => ({ scope: r.scope, channel: r.channel, mode: r.mode })) : [];
    this.#effective = (data && data.effective) || {};
    this.#channels = Array.isArray(data && data.channels) ? data.channels : [];
    this.#render();
  }

  /** The cells whose select differs from the stored mode, as rules. */
  #changes() {
    const out = [];
    for (const sel of this.#els.table.querySelectorAll("select")) {
      if (sel.value !== sel.dataset.initial) {
        out.push({ scope: "notifier:" + sel.dataset.notifier, channel: sel.dataset.channel, mode: sel.value });
      }
    }
    return out;
  }

  #text(key, defaults = {}) {
    if (Object.prototype.hasOwnProperty.call(this.#labels, key)) return String(this.#labels[key]);
    return Object.prototype.hasOwnProperty.call(defaults, key) ? defaults[key] : key;
  }

  #render() {
    const table = this.#els.table;
    for (const tb of table.querySelectorAll("tbody")) tb.remove();
    const names = Object.keys(this.#effective);
    const used = new Set(names.flatMap((n) => Object.keys(this.#effective[n].channels || {})));
    const channels = this.#channels.map((c) => c.name).filter((c) => used.has(c));
    const head = document.createElement("tr");
    const corner = document.createElement("th");
    corner.scope = "col";
    corner.textContent = this.#text("notification", UI_TEXT);
    head.append(corner);
    for (const c of channels) {
      const th = document.createElement("th");
      th.scope = "col";
      th.textContent = this.#text(c, CHANNEL_TEXT);
      head.append(th);
    }
    this.#els.thead.replaceChildren(head);

    // Group by category; categories in byte order, "" (none) last.
    const groups = new Map();
    for (const n of names.sort()) {
      const cat = this.#effective[n].category || "";
      if (!groups.has(cat)) groups.set(cat, []);
      groups.get(cat).push(n);
    }
    const cats = [...groups.keys()].sort((a, b) => (a === "" ? 1 : b === "" ? -1 : a < b ? -1 : a > b ? 1 : 0));
    for (const cat of cats) {
      const tbody = document.createElement("tbody");
      if (cats.length > 1 || cat !== "") {
        const tr = document.createElement("tr");
        tr.className = "category";
        const th = document.createElement("th");
        th.scope = "rowgroup";
        th.colSpan = channels.length + 1;
        th.textContent = cat === "" ? this.#text("other", UI_TEXT) : this.#text(cat);
        tr.append(th);
        tbody.append(tr);
      }
      for (const n of groups.get(cat)) tbody.append(this.#row(n, channels));
      table.append(tbody);
    }
    if (!names.length && this.token) {
      const tbody = document.createElement("tbody");
      const tr = document.createElement("tr");
      const td = document.createElement("td");
      td.className = "none";
      td.colSpan = channels.length + 1;
      td.textContent = "No notifications to configure.";
      tr.append(td);
      tbody.append(tr);
      table.append(tbody);
    }
    this.#renderButtons();
  }

  #row(name, channels) {
    const eff = this.#effective[name];
    const tr = document.createElement("tr");
    tr.dataset.notifier = name;
    const th = document.createElement("th");
    th.scope = "row";
    th.textContent = this.#text(name);
    for (const [flag, text] of [[eff.required, "required"], [eff.muted && !eff.required, "muted"]]) {
      if (!flag) continue;
      const tag = document.createElement("span");
      tag.className = "tag";
      tag.textContent = this.#text(text, UI_TEXT);
      th.append(tag);
    }
    tr.append(th);
    for (const c of channels) {
      const td = document.createElement("td");
      const mode = (eff.channels || {})[c];
      if (mode === undefined) {
        td.className = "none";
        td.textContent = "—";
        td.setAttribute("aria-label", "not sent by " + this.#text(c, CHANNEL_TEXT));
        tr.append(td);
        continue;
      }
      const sel = document.createElement("select");
      sel.setAttribute("part", "select");
      sel.dataset.notifier = name;
      sel.dataset.channel = c;
      sel.dataset.initial = mode;
      sel.setAttribute("aria-label", `${this.#text(name)}: ${this.#text(c, CHANNEL_TEXT)}`);
      const info = this.#channels.find((x) => x.name === c);
      const modes = info && Array.isArray(info.modes) ? [...info.modes] : ["immediate", "off"];
      if (!modes.includes(mode)) modes.push(mode);
      for (const m of modes) {
        const opt = document.createElement("option");
        opt.value = m;
        opt.textContent = this.#text(m, MODE_TEXT);
        // A required notifier cannot be turned off; when its default already
        // is off, "off" stays selectable (it reads as that default).
        if (m === "off" && eff.required && mode !== "off") {
          opt.disabled = true;
          opt.textContent += " (required)";
        }
        sel.append(opt);
      }
      sel.value = mode;
      td.append(sel);
      tr.append(td);
    }
    return tr;
  }

  #renderButtons() {
    const dirty = this.dirty;
    this.#els.save.disabled = !dirty || this.#saving;
    this.#els.revert.disabled = !dirty || this.#saving;
  }

  #showError(err) {
    if (!err) {
      this.#els.error.hidden = true;
      this.#els.message.textContent = "";
      this.#els.details.replaceChildren();
      return;
    }
    this.#els.message.textContent = err.message;
    const items = (err.details || []).map((d) => {
      const li = document.createElement("li");
      if (d && typeof d === "object") {
        const where = d.field || d.pointer || "";
        li.textContent = (where ? where + ": " : "") + (d.message || JSON.stringify(d));
      } else {
        li.textContent = String(d);
      }
      return li;
    });
    this.#els.details.replaceChildren(...items);
    this.#els.error.hidden = false;
  }

  #setStatus(text) {
    this.#els.status.textContent = text;
  }

  #request(method, path, body, signal) {
    path = withTenant(path, this.tenant);
    return request({ endpoint: this.endpoint, token: this.token, method, path, body, signal });
  }

  #failed(err, action) {
    if (err && err.message === "aborted") return;
    this.#showError(err);
    this.#emit("notifyd:error", {
      status: err.status || 0,
      code: err.code || "error",
      message: err.message || String(err),
      details: err.details || [],
      action,
    });
  }

  #emit(name, detail) {
    this.dispatchEvent(new CustomEvent(name, { detail, bubbles: true, composed: true }));
  }
}

if (!customElements.get("notifyd-preferences")) customElements.define("notifyd-preferences", NotifydPreferences);
