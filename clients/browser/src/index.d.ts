// Types of @notifyd/browser. The type parameter M of the client and of its
// items is a map from notifier name to params, such as the Notifiers
// interface `notifyd gen types -lang ts` writes: with it, checking
// item.notifier narrows item.params.

/** Params by notifier name; the default types params loosely. */
export type NotifierParams = { [notifier: string]: unknown };

interface InboxItemBase {
  id: string;
  key: string;
  category: string;
  reason: string;
  actor: string | null;
  title: string;
  body: string;
  /** The rendered url: check its scheme before you link it. */
  url: string;
  created_at: string;
  seen_at: string | null;
  read_at: string | null;
  archived_at: string | null;
  tenant?: string | null;
}

/** An inbox item; with M, a union over the notifiers discriminated by notifier. */
export type InboxItem<M = NotifierParams> = {
  [N in keyof M & string]: InboxItemBase & { notifier: N; params: M[N] };
}[keyof M & string];

/** A page of the inbox: next_cursor is null at the end. */
export interface InboxPage<M = NotifierParams> {
  items: InboxItem<M>[];
  next_cursor: string | null;
}

/** The counts: each exact up to max (99 by default); a capped one means more. */
export interface Counts {
  unread: number;
  unseen: number;
  unread_capped: boolean;
  unseen_capped: boolean;
}

/** An inbox.updated change: the ids and the new state, or a re-rendered item. */
export interface InboxChange {
  ids?: string[];
  read_at?: string | null;
  seen_at?: string | null;
  archived_at?: string | null;
  [field: string]: unknown;
}

/** A preference rule as PUT /v1/preferences takes it. */
export interface PreferenceRule {
  scope: string;
  channel: string;
  mode: "immediate" | "digest" | "off" | (string & {});
}

/** GET /v1/preferences: the stored rules and the effective mode per notifier and channel. */
export interface Preferences {
  rules: PreferenceRule[];
  /** Per notifier: its category, whether it is required or muted, and the mode of each channel it uses. */
  effective: Record<string, { category: string; required: boolean; muted: boolean; channels: Record<string, string> }>;
  /** The per-recipient channels in display order, with the modes each offers. */
  channels: { name: string; modes: string[] }[];
}

/** Quiet hours: "HH:MM" wall-clock times in the recipient's timezone; an end not after the start crosses midnight. */
export interface QuietHours {
  start: string;
  end: string;
}

export type ConnectionState = "idle" | "connecting" | "open" | "reconnecting" | "closed" | "unauthorized" | "reauth";

export declare const CONNECTION_STATES: readonly ConnectionState[];

/** What a listener of the live stream may handle; every member is optional. */
export interface StreamListener<M = NotifierParams> {
  created?(item: InboxItem<M>): void;
  updated?(change: InboxChange): void;
  deleted?(change: { ids: string[] }): void;
  counts?(counts: Counts): void;
  /** Reload the list: the stream could not replay from the last cursor. */
  reset?(): void;
  /** The token expired; refreshToken is asked, or setToken resumes. */
  reauth?(): void;
  state?(state: ConnectionState): void;
  error?(err: NotifydError): void;
}

/** The part of EventSource the client uses: the global one, or a React Native package's. */
export interface EventSourceLike {
  readonly readyState: number;
  onopen: ((e: unknown) => void) | null;
  onerror: ((e: unknown) => void) | null;
  addEventListener(type: string, listener: (e: { data: string; lastEventId: string }) => void): void;
  close(): void;
}
export type EventSourceConstructor = new (url: string) => EventSourceLike;

export interface ClientOptions {
  /** notifyd's base URL, possibly with a path prefix; "" is the page's own origin. */
  baseUrl?: string;
  /** The recipient token your backend minted. */
  token?: string;
  /** Asked for the token when there is none yet (and for a fresh one when refreshToken is absent). */
  getToken?: () => string | Promise<string>;
  /** Asked for a fresh token after a 401 or when the stream's token expired. */
  refreshToken?: () => string | Promise<string>;
  /** Read and mark only this tenant's items and rules. */
  tenant?: string;
  fetch?: typeof globalThis.fetch;
  /** The EventSource to use; null reads the stream over fetch (Node). Default: the global one. */
  EventSource?: EventSourceConstructor | null;
  /** The stream's reconnect backoff (doubling, jittered): default 1 s to 60 s. */
  retry?: { minMs?: number; maxMs?: number };
  /** Resume the stream from this cursor. */
  lastEventId?: string;
}

export interface RequestOptions {
  signal?: AbortSignal;
  keepalive?: boolean;
}

export declare class NotifydError extends Error {
  constructor(status: number, body: unknown, fallback?: string);
  /** The HTTP status, 0 when there was no answer. */
  status: number;
  /** The API's error code (network_error, origin_not_allowed, invalid_token, …). */
  code: string;
  details: unknown[];
}

export declare class NotifydClient<M = NotifierParams> {
  constructor(options?: ClientOptions);
  baseUrl: string;
  tenant: string;
  readonly connectionState: ConnectionState;
  readonly lastEventId: string;
  token(): Promise<string>;
  setToken(token: string): void;
  request<T = unknown>(method: string, path: string, body?: unknown, options?: RequestOptions): Promise<T>;
  inbox(options?: { limit?: number; cursor?: string | null; filter?: "all" | "unread" | "archived"; signal?: AbortSignal }): Promise<InboxPage<M>>;
  counts(options?: { max?: number; signal?: AbortSignal }): Promise<Counts>;
  markRead(ids: string[], options?: RequestOptions): Promise<{ marked: number }>;
  markAllRead(options?: RequestOptions): Promise<{ marked: number }>;
  markUnread(ids: string[], options?: RequestOptions): Promise<{ marked: number }>;
  markSeen(ids?: string[], options?: RequestOptions): Promise<{ marked: number }>;
  archive(ids: string[], options?: RequestOptions): Promise<{ marked: number }>;
  preferences(options?: RequestOptions): Promise<Preferences>;
  savePreferences(rules: PreferenceRule[], options?: RequestOptions): Promise<Preferences>;
  quietHours(options?: RequestOptions): Promise<{ quiet_hours: QuietHours | null; timezone: string }>;
  saveQuietHours(quietHours: QuietHours | null, options?: RequestOptions): Promise<{ quiet_hours: QuietHours | null; timezone: string }>;
  pushKey(options?: RequestOptions): Promise<string>;
  registerPush(subscription: { endpoint: string; expirationTime?: number | null; keys?: Record<string, string> } | { toJSON(): unknown }, options?: RequestOptions): Promise<{ id: string }>;
  pushSubscriptions(options?: RequestOptions): Promise<{ subscriptions: { id: string; endpoint: string }[] }>;
  unregisterPush(id: string, options?: RequestOptions): Promise<unknown>;
  registerDevice(device: { platform: "apns" | "fcm" | (string & {}); token: string; app?: string }, options?: RequestOptions): Promise<{ id: string }>;
  unregisterDevice(id: string, options?: RequestOptions): Promise<unknown>;
  subscribe(listener: StreamListener<M>): () => void;
  close(): void;
  reconnect(): void;
}

export declare function createClient<M = NotifierParams>(options?: ClientOptions): NotifydClient<M>;
export declare function withTenant(path: string, tenant?: string): string;
export declare function apiURL(base: string, path: string): string;
export declare function crossOriginHint(url: string): string;

export declare class FetchEventSource implements EventSourceLike {
  constructor(url: string, token: string, fetchFn?: typeof globalThis.fetch);
  readonly url: string;
  readyState: number;
  onopen: ((e: unknown) => void) | null;
  onerror: ((e: unknown) => void) | null;
  addEventListener(type: string, listener: (e: { data: string; lastEventId: string }) => void): void;
  close(): void;
}
