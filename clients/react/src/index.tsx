// @notifyd/react: hooks and accessible components for the notifyd inbox, on
// the headless client @notifyd/browser. Nothing runs at import and nothing
// touches window or document during render, so it renders on a server; the
// network starts in effects, in the browser.
import {
  createContext,
  useCallback,
  useContext,
  useEffect,
  useId,
  useLayoutEffect,
  useMemo,
  useRef,
  useState,
  useSyncExternalStore,
  type ReactNode,
  type KeyboardEvent as ReactKeyboardEvent,
} from "react";
import {
  createClient,
  type ClientOptions,
  type ConnectionState,
  type Counts,
  type InboxItem,
  type NotifierParams,
  type NotifydClient,
  type NotifydError,
  type PreferenceRule,
  type Preferences as PreferencesData,
  type QuietHours,
  type StreamListener,
} from "@notifyd/browser";
import { InboxStore, type InboxState } from "./store";

export { InboxStore, type InboxState };
export type { InboxItem, Counts, ConnectionState, NotifydClient, NotifydError, StreamListener, PreferenceRule, QuietHours };

// useLayoutEffect warns when rendered on a server; it is only needed in a browser.
const useIsoLayoutEffect = typeof document !== "undefined" ? useLayoutEffect : useEffect;

interface Ctx {
  client: NotifydClient<any>;
  store: InboxStore<any>;
}

const NotifydContext = createContext<Ctx | null>(null);

export interface NotifydProviderProps extends Omit<ClientOptions, "token" | "getToken"> {
  /** The recipient token your backend minted; changing it keeps the stream's place. */
  token?: string;
  /** Asked for the token (and, without refreshToken, for a fresh one when it expires). */
  getToken?: () => string | Promise<string>;
  /** A client of your own instead of one made from the options. */
  client?: NotifydClient<any>;
  /** Items per page of the inbox (default 20, at most 200). */
  pageSize?: number;
  children?: ReactNode;
}

/**
 * NotifydProvider holds one client and one inbox store for everything below
 * it. Changing baseUrl or tenant makes a new client; changing token hands it
 * to the same one (a stream waiting for a fresh token resumes where it was).
 */
export function NotifydProvider(props: NotifydProviderProps) {
  const { baseUrl, tenant, client: given, children, token, pageSize } = props;
  const opts = useRef(props);
  opts.current = props;
  const value = useMemo<Ctx>(() => {
    const client =
      given ||
      createClient({
        baseUrl,
        tenant,
        token,
        fetch: opts.current.fetch,
        EventSource: opts.current.EventSource,
        retry: opts.current.retry,
        lastEventId: opts.current.lastEventId,
        getToken: opts.current.getToken && (() => opts.current.getToken!()),
        refreshToken: opts.current.refreshToken && (() => opts.current.refreshToken!()),
      });
    return { client, store: new InboxStore(client) };
    // token is handed over below, not a reason for a new client.
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [given, baseUrl, tenant]);
  value.store.pageSize = Math.min(Math.max(pageSize || 20, 1), 200);
  const first = useRef(true);
  useEffect(() => {
    if (first.current) {
      first.current = false;
      return;
    }
    if (token) value.client.setToken(token);
  }, [token, value]);
  useEffect(() => () => value.client.close(), [value]);
  return <NotifydContext.Provider value={value}>{children}</NotifydContext.Provider>;
}

/** useNotifyd returns the provider's client and store; outside a provider it throws. */
export function useNotifyd<M = NotifierParams>(): { client: NotifydClient<M>; store: InboxStore<M> } {
  const ctx = useContext(NotifydContext);
  if (!ctx) throw new Error("@notifyd/react: wrap your components in <NotifydProvider>");
  return ctx;
}

function useStore<M>(): [InboxStore<M>, InboxState<M>] {
  const { store } = useNotifyd<M>();
  useEffect(() => store.retain(), [store]);
  const state = useSyncExternalStore(store.subscribe, store.getSnapshot, store.getServerSnapshot);
  return [store, state];
}

export interface UseInbox<M> {
  items: InboxItem<M>[];
  loading: boolean;
  error: NotifydError | null;
  /** True until the last page is loaded. */
  hasMore: boolean;
  counts: Counts | null;
  connection: ConnectionState;
  loadMore(): Promise<void>;
  reload(): Promise<void>;
  /** Each mark shows at once and is undone if the API refuses it (the promise then rejects). */
  markRead(ids: string[]): Promise<unknown>;
  markAllRead(): Promise<unknown>;
  markUnread(ids: string[]): Promise<unknown>;
  markSeen(): Promise<unknown>;
  archive(ids: string[]): Promise<unknown>;
}

/**
 * useInbox loads the first page when it mounts (in the browser) and keeps
 * the list live from the stream: new items in order, changes from other
 * devices, removals; never an item twice.
 */
export function useInbox<M = NotifierParams>(): UseInbox<M> {
  const [store, s] = useStore<M>();
  useEffect(() => {
    if (store.state.nextCursor === undefined) void store.loadMore();
  }, [store]);
  return {
    items: s.items,
    loading: s.loading,
    error: s.error,
    hasMore: s.nextCursor !== null,
    counts: s.counts,
    connection: s.connection,
    loadMore: () => store.loadMore(),
    reload: () => store.reload(),
    markRead: (ids) => store.markRead(ids),
    markAllRead: () => store.markAllRead(),
    markUnread: (ids) => store.markUnread(ids),
    markSeen: () => store.markSeen(),
    archive: (ids) => store.archive(ids),
  };
}

/** The badge's numbers: count is unread (or unseen), label "99+" when capped, "" when zero. */
export function useUnreadCount(kind: "unread" | "unseen" = "unread"): { count: number; capped: boolean; label: string; counts: Counts | null } {
  const [, s] = useStore();
  const c = s.counts;
  const count = c ? c[kind] : 0;
  const capped = c ? c[kind === "unread" ? "unread_capped" : "unseen_capped"] : false;
  return { count, capped, label: count ? String(count) + (capped ? "+" : "") : "", counts: c };
}

/**
 * useNotifydStream calls listener's handlers for the stream's events while
 * the component is mounted and returns the connection state. The listener
 * may change on every render.
 */
export function useNotifydStream<M = NotifierParams>(listener: StreamListener<M> = {}): ConnectionState {
  const [store, s] = useStore<M>();
  const ref = useRef(listener);
  useIsoLayoutEffect(() => {
    ref.current = listener;
  });
  useEffect(() => {
    const forward: StreamListener<M> = {};
    for (const k of ["created", "updated", "deleted", "counts", "reset", "reauth", "state", "error"] as const) {
      (forward as any)[k] = (d: unknown) => (ref.current as any)[k]?.(d);
    }
    return store.listen(forward);
  }, [store]);
  return s.connection;
}

export interface UsePreferences {
  preferences: PreferencesData | null;
  quietHours: QuietHours | null;
  timezone: string;
  loading: boolean;
  saving: boolean;
  error: NotifydError | null;
  reload(): Promise<void>;
  /** Replaces the rules; resolves with the answer, or rejects (and error is set). */
  save(rules: PreferenceRule[]): Promise<PreferencesData>;
  saveQuietHours(q: QuietHours | null): Promise<void>;
}

/** usePreferences reads the recipient's rules, effective modes and quiet hours, and saves them. */
export function usePreferences(): UsePreferences {
  const { client } = useNotifyd();
  const [st, setSt] = useState({
    preferences: null as PreferencesData | null,
    quietHours: null as QuietHours | null,
    timezone: "",
    loading: true,
    saving: false,
    error: null as NotifydError | null,
  });
  const alive = useRef(true);
  const patch = useCallback((p: Partial<typeof st>) => {
    if (alive.current) setSt((s) => ({ ...s, ...p }));
  }, []);
  const reload = useCallback(async () => {
    patch({ loading: true, error: null });
    try {
      const [preferences, q] = await Promise.all([client.preferences(), client.quietHours().catch(() => null)]);
      patch({ preferences, quietHours: q ? q.quiet_hours : null, timezone: q ? q.timezone : "", loading: false });
    } catch (error) {
      patch({ loading: false, error: error as NotifydError });
    }
  }, [client, patch]);
  useEffect(() => {
    alive.current = true;
    void reload();
    return () => {
      alive.current = false;
    };
  }, [reload]);
  const save = useCallback(
    async (rules: PreferenceRule[]) => {
      patch({ saving: true, error: null });
      try {
        const preferences = await client.savePreferences(rules);
        patch({ preferences, saving: false });
        return preferences;
      } catch (error) {
        patch({ saving: false, error: error as NotifydError });
        throw error;
      }
    },
    [client, patch],
  );
  const saveQuietHours = useCallback(
    async (q: QuietHours | null) => {
      patch({ saving: true, error: null });
      try {
        const r = await client.saveQuietHours(q);
        patch({ quietHours: r.quiet_hours, saving: false });
      } catch (error) {
        patch({ saving: false, error: error as NotifydError });
        throw error;
      }
    },
    [client, patch],
  );
  return { ...st, reload, save, saveQuietHours };
}

// --- components ---

function cx(...names: (string | false | null | undefined)[]) {
  return names.filter(Boolean).join(" ");
}

/** safeHref returns url when it is http(s), else undefined: item urls come from params. */
export function safeHref(url: string | undefined | null): string | undefined {
  return url && /^https?:\/\//i.test(url) ? url : undefined;
}

function ago(iso: string, now: number): string {
  const s = Math.max(0, Math.round((now - Date.parse(iso)) / 1000));
  if (s < 60) return "just now";
  if (s < 3600) return Math.floor(s / 60) + " min ago";
  if (s < 86400) return Math.floor(s / 3600) + " h ago";
  return Math.floor(s / 86400) + " d ago";
}

/** Whether the component has hydrated: times render only then, so server and client markup agree. */
function useHydrated() {
  const [h, setH] = useState(false);
  useEffect(() => setH(true), []);
  return h;
}

export interface BellButtonProps {
  count: number;
  label: string;
  capped: boolean;
  open: boolean;
  buttonProps: Record<string, unknown>;
}

export interface BellProps {
  /** The accessible name and the panel heading (default "Notifications"). */
  label?: string;
  /** What the badge counts (default unread). */
  badge?: "unread" | "unseen";
  /** What opens under the bell (default <Inbox />); null: no panel (use onClick). */
  panel?: ReactNode | null;
  onClick?: () => void;
  /** Replaces the button: spread buttonProps onto your own <button>. */
  renderButton?: (p: BellButtonProps) => ReactNode;
  className?: string;
}

/**
 * Bell is a button with the unread badge that opens the inbox panel: Escape
 * or a click outside closes it and focus returns to the bell. Its accessible
 * name says the count ("Notifications, 3 unread").
 */
export function Bell({ label = "Notifications", badge = "unread", panel, onClick, renderButton, className }: BellProps) {
  const { count, capped, label: badgeText } = useUnreadCount(badge);
  const [open, setOpen] = useState(false);
  const id = useId();
  const btn = useRef<HTMLButtonElement>(null);
  const wrap = useRef<HTMLDivElement>(null);
  const hasPanel = panel !== null;
  useEffect(() => {
    if (!open) return;
    const outside = (e: Event) => {
      if (wrap.current && !wrap.current.contains(e.target as Node)) setOpen(false);
    };
    document.addEventListener("pointerdown", outside, true);
    return () => document.removeEventListener("pointerdown", outside, true);
  }, [open]);
  const name = count ? `${label}, ${badgeText} ${badge}` : label;
  const buttonProps: Record<string, unknown> = {
    type: "button",
    ref: btn,
    className: "notifyd-bell-button",
    "aria-label": name,
    onClick: () => {
      onClick?.();
      if (hasPanel) setOpen((o) => !o);
    },
    ...(hasPanel ? { "aria-expanded": open, "aria-controls": id } : {}),
  };
  const onKeyDown = (e: ReactKeyboardEvent) => {
    if (e.key === "Escape" && open) {
      e.stopPropagation();
      setOpen(false);
      btn.current?.focus();
    }
  };
  return (
    <div className={cx("notifyd-bell", className)} ref={wrap} onKeyDown={onKeyDown}>
      {renderButton ? (
        renderButton({ count, label: badgeText, capped, open, buttonProps })
      ) : (
        <button {...(buttonProps as any)}>
          <svg className="notifyd-bell-icon" viewBox="0 0 24 24" width="1em" height="1em" aria-hidden="true" focusable="false">
            <path fill="currentColor" d="M12 22a2.5 2.5 0 0 0 2.45-2h-4.9A2.5 2.5 0 0 0 12 22Zm7-6V11a7 7 0 0 0-5.5-6.84V3a1.5 1.5 0 0 0-3 0v1.16A7 7 0 0 0 5 11v5l-2 2v1h18v-1Z" />
          </svg>
          {count > 0 && (
            <span className="notifyd-badge" aria-hidden="true">
              {badgeText}
            </span>
          )}
        </button>
      )}
      {hasPanel && open && (
        <div className="notifyd-panel" id={id} role="dialog" aria-label={label}>
          {panel === undefined ? <Inbox label={label} autoFocus /> : panel}
        </div>
      )}
    </div>
  );
}

export interface InboxItemRenderProps<M> {
  item: InboxItem<M>;
  unread: boolean;
  markRead(): Promise<unknown>;
  archive(): Promise<unknown>;
}

export interface InboxProps<M = NotifierParams> {
  /** The heading (default "Notifications"). */
  label?: string;
  /** Replaces one item's content (inside its <li>). */
  renderItem?: (p: InboxItemRenderProps<M>) => ReactNode;
  /** Shown when the inbox is empty. */
  empty?: ReactNode;
  /** Called on an item's activation, after it is marked read; return false to keep the browser from following item.url. */
  onItemClick?: (item: InboxItem<M>) => boolean | void;
  /** Mark every item seen when the inbox shows (default true). */
  markSeenOnOpen?: boolean;
  /** Move focus to the heading when it mounts (the Bell's panel does). */
  autoFocus?: boolean;
  className?: string;
}

/**
 * Inbox is the list: a heading, "Mark all read", the items newest first
 * (title, body, time, unread state, an archive button each), "Load more"
 * while there are pages, and a polite live region for status and errors.
 */
export function Inbox<M = NotifierParams>({ label = "Notifications", renderItem, empty, onItemClick, markSeenOnOpen = true, autoFocus, className }: InboxProps<M>) {
  const inbox = useInbox<M>();
  const hydrated = useHydrated();
  const headingId = useId();
  const heading = useRef<HTMLHeadingElement>(null);
  const [now, setNow] = useState(0);
  useEffect(() => {
    setNow(Date.now());
    const t = setInterval(() => setNow(Date.now()), 30000);
    return () => clearInterval(t);
  }, []);
  useEffect(() => {
    if (autoFocus) heading.current?.focus();
  }, [autoFocus]);
  const unseen = inbox.counts ? inbox.counts.unseen : 0;
  useEffect(() => {
    if (markSeenOnOpen && unseen > 0) inbox.markSeen().catch(() => {});
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [markSeenOnOpen, unseen]);
  const activate = (item: InboxItem<M>) => {
    if (!item.read_at) inbox.markRead([item.id]).catch(() => {});
    return onItemClick?.(item);
  };
  const status = inbox.error ? inbox.error.message : inbox.loading ? "Loading…" : "";
  return (
    <section className={cx("notifyd-inbox", className)} aria-labelledby={headingId}>
      <div className="notifyd-inbox-header">
        <h2 id={headingId} ref={heading} tabIndex={-1}>
          {label}
        </h2>
        <button type="button" className="notifyd-mark-all" onClick={() => inbox.markAllRead().catch(() => {})} disabled={!inbox.items.some((i) => !i.read_at)}>
          Mark all read
        </button>
      </div>
      <ul className="notifyd-list" aria-labelledby={headingId}>
        {inbox.items.map((item) => {
          const isUnread = !item.read_at;
          const href = safeHref(item.url);
          const p: InboxItemRenderProps<M> = {
            item,
            unread: isUnread,
            markRead: () => inbox.markRead([item.id]),
            archive: () => inbox.archive([item.id]),
          };
          return (
            <li key={item.id} className={cx("notifyd-item", isUnread && "notifyd-unread")} data-id={item.id}>
              {renderItem ? (
                renderItem(p)
              ) : (
                <>
                  <a
                    className="notifyd-item-main"
                    href={href}
                    role={href ? undefined : "button"}
                    tabIndex={0}
                    onClick={(e) => {
                      if (activate(item) === false || !href) e.preventDefault();
                    }}
                    onKeyDown={(e) => {
                      if (!href && (e.key === "Enter" || e.key === " ")) {
                        e.preventDefault();
                        activate(item);
                      }
                    }}
                  >
                    {isUnread && <span className="notifyd-visually-hidden">Unread: </span>}
                    <span className="notifyd-title">{item.title}</span>
                    {item.body && <span className="notifyd-body">{item.body}</span>}
                    <time className="notifyd-time" dateTime={item.created_at}>
                      {hydrated && now ? ago(item.created_at, now) : ""}
                    </time>
                  </a>
                  <button type="button" className="notifyd-archive" aria-label={`Archive: ${item.title}`} onClick={() => p.archive().catch(() => {})}>
                    <span aria-hidden="true">×</span>
                  </button>
                </>
              )}
            </li>
          );
        })}
      </ul>
      {!inbox.loading && !inbox.error && inbox.items.length === 0 && !inbox.hasMore && <p className="notifyd-empty">{empty ?? "No notifications yet."}</p>}
      {inbox.hasMore && inbox.items.length > 0 && (
        <button type="button" className="notifyd-more" onClick={() => void inbox.loadMore()} disabled={inbox.loading}>
          Load more
        </button>
      )}
      <p className={cx("notifyd-status", inbox.error && "notifyd-error")} role="status" aria-live="polite">
        {status}
      </p>
    </section>
  );
}

const MODE_TEXT: Record<string, string> = { immediate: "Immediately", digest: "Digest", off: "Off" };
const CHANNEL_TEXT: Record<string, string> = { in_app: "In-app", email: "Email", sms: "Text message", web_push: "Desktop notification" };

export interface PreferencesProps {
  /** Texts for notifier, channel, category and mode names. */
  labels?: Record<string, string>;
  /** The table's caption (default "Notification preferences"). */
  label?: string;
  className?: string;
}

/**
 * Preferences is the preference center: a notifier × channel table of
 * selects (off is disabled for required notifiers), Save and Revert, and the
 * recipient's quiet hours. Save sends the changed cells as notifier rules
 * merged with the stored rules.
 */
export function Preferences({ labels = {}, label = "Notification preferences", className }: PreferencesProps) {
  const p = usePreferences();
  const [changes, setChanges] = useState<Record<string, string>>({});
  const [quiet, setQuiet] = useState<{ start: string; end: string } | null>(null);
  const t = (k: string, d?: Record<string, string>) => labels[k] ?? d?.[k] ?? k;
  const data = p.preferences;
  const captionId = useId();
  if (!data) {
    return (
      <div className={cx("notifyd-preferences", className)}>
        <p className="notifyd-status" role="status" aria-live="polite">
          {p.error ? p.error.message : p.loading ? "Loading…" : ""}
        </p>
      </div>
    );
  }
  const channels = data.channels || [];
  const notifiers = Object.keys(data.effective).sort((a, b) => (data.effective[a].category + a).localeCompare(data.effective[b].category + b));
  const dirty = Object.keys(changes).length > 0;
  const save = async () => {
    const keep = data.rules.filter((r) => !(r.scope.startsWith("notifier:") && `${r.scope.slice(9)}|${r.channel}` in changes));
    const added = Object.entries(changes).map(([k, mode]) => {
      const [n, channel] = k.split("|");
      return { scope: "notifier:" + n, channel, mode };
    });
    try {
      await p.save([...keep, ...added]);
      setChanges({});
    } catch {
      // p.error shows it
    }
  };
  const q = quiet ?? p.quietHours ?? { start: "", end: "" };
  return (
    <div className={cx("notifyd-preferences", className)}>
      <table className="notifyd-pref-table" aria-labelledby={captionId}>
        <caption id={captionId}>{label}</caption>
        <thead>
          <tr>
            <th scope="col">{t("Notification")}</th>
            {channels.map((c) => (
              <th scope="col" key={c.name}>
                {t(c.name, CHANNEL_TEXT)}
              </th>
            ))}
          </tr>
        </thead>
        <tbody>
          {notifiers.map((n) => {
            const e = data.effective[n];
            return (
              <tr key={n}>
                <th scope="row">
                  {t(n)}
                  <span className="notifyd-category"> {t(e.category)}</span>
                </th>
                {channels.map((c) => {
                  const cur = e.channels[c.name];
                  if (cur === undefined) return <td key={c.name} />;
                  const k = `${n}|${c.name}`;
                  return (
                    <td key={c.name}>
                      <select
                        aria-label={`${t(n)}: ${t(c.name, CHANNEL_TEXT)}`}
                        value={changes[k] ?? cur}
                        className={k in changes ? "notifyd-changed" : undefined}
                        onChange={(ev) => {
                          const v = ev.target.value;
                          setChanges((ch) => {
                            const next = { ...ch };
                            if (v === cur) delete next[k];
                            else next[k] = v;
                            return next;
                          });
                        }}
                      >
                        {c.modes.map((m) => (
                          <option key={m} value={m} disabled={m === "off" && e.required}>
                            {t(m, MODE_TEXT)}
                          </option>
                        ))}
                      </select>
                    </td>
                  );
                })}
              </tr>
            );
          })}
        </tbody>
      </table>
      <div className="notifyd-pref-actions">
        <button type="button" className="notifyd-save" disabled={!dirty || p.saving} onClick={save}>
          Save
        </button>
        <button type="button" className="notifyd-revert" disabled={!dirty || p.saving} onClick={() => setChanges({})}>
          Revert
        </button>
      </div>
      <fieldset className="notifyd-quiet">
        <legend>{t("Quiet hours")}</legend>
        <label>
          {t("From")} <input type="time" value={q.start} onChange={(e) => setQuiet({ ...q, start: e.target.value })} />
        </label>
        <label>
          {t("To")} <input type="time" value={q.end} onChange={(e) => setQuiet({ ...q, end: e.target.value })} />
        </label>
        <button
          type="button"
          className="notifyd-quiet-save"
          disabled={p.saving}
          onClick={() => p.saveQuietHours(q.start && q.end ? q : null).then(() => setQuiet(null), () => {})}
        >
          {t("Save quiet hours")}
        </button>
        {p.timezone && <span className="notifyd-timezone"> ({p.timezone})</span>}
      </fieldset>
      <p className={cx("notifyd-status", p.error && "notifyd-error")} role="status" aria-live="polite">
        {p.error ? p.error.message : ""}
      </p>
    </div>
  );
}

export interface ToasterProps<M = NotifierParams> {
  /** How long a toast stays, in ms (default 6000; 0: until dismissed). */
  duration?: number;
  /** At most this many toasts at once (default 3). */
  max?: number;
  /** Replaces a toast's content. */
  renderToast?: (item: InboxItem<M>, dismiss: () => void) => ReactNode;
  className?: string;
}

/** Toaster shows a toast for each new item while the page is open, announced politely. */
export function Toaster<M = NotifierParams>({ duration = 6000, max = 3, renderToast, className }: ToasterProps<M>) {
  const [toasts, setToasts] = useState<InboxItem<M>[]>([]);
  const timers = useRef(new Map<string, ReturnType<typeof setTimeout>>());
  const dismiss = useCallback((id: string) => {
    clearTimeout(timers.current.get(id));
    timers.current.delete(id);
    setToasts((ts) => ts.filter((t) => t.id !== id));
  }, []);
  useNotifydStream<M>({
    created: (item) => {
      setToasts((ts) => (ts.some((t) => t.id === item.id) ? ts : [item, ...ts].slice(0, max)));
      if (duration > 0) timers.current.set(item.id, setTimeout(() => dismiss(item.id), duration));
    },
  });
  useEffect(() => {
    const m = timers.current;
    return () => m.forEach((t) => clearTimeout(t));
  }, []);
  return (
    <div className={cx("notifyd-toaster", className)} role="region" aria-label="New notifications" aria-live="polite">
      {toasts.map((item) => (
        <div key={item.id} className="notifyd-toast" data-id={item.id}>
          {renderToast ? (
            renderToast(item, () => dismiss(item.id))
          ) : (
            <>
              <span className="notifyd-title">{item.title}</span>
              {item.body && <span className="notifyd-body">{item.body}</span>}
              <button type="button" className="notifyd-dismiss" aria-label={`Dismiss: ${item.title}`} onClick={() => dismiss(item.id)}>
                <span aria-hidden="true">×</span>
              </button>
            </>
          )}
        </div>
      ))}
    </div>
  );
}
