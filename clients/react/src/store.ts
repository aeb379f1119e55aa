// The inbox state one NotifydProvider shares between its hooks and
// components: one stream, one list, one set of counts. React reads it with
// useSyncExternalStore; nothing here touches the DOM or window.
import type { ConnectionState, Counts, InboxChange, InboxItem, NotifierParams, NotifydClient, NotifydError, StreamListener } from "@notifyd/browser";

export interface InboxState<M = NotifierParams> {
  /** The loaded items, newest first, without duplicates. */
  items: InboxItem<M>[];
  /** undefined: nothing loaded yet; null: the end; a string: more to load. */
  nextCursor: string | null | undefined;
  loading: boolean;
  error: NotifydError | null;
  counts: Counts | null;
  connection: ConnectionState;
}

const EMPTY: InboxState<any> = { items: [], nextCursor: undefined, loading: false, error: null, counts: null, connection: "idle" };

type Item = InboxItem<any>;

/** newest first: created_at descending, then id descending (the API's order). */
function before(a: Item, b: Item): boolean {
  return a.created_at > b.created_at || (a.created_at === b.created_at && a.id > b.id);
}

function unread(it: Item): boolean {
  return !it.read_at && !it.archived_at;
}

export class InboxStore<M = NotifierParams> {
  state: InboxState<M> = EMPTY;
  pageSize = 20;
  #subs = new Set<() => void>();
  #users = 0;
  #unsubscribe: (() => void) | null = null;
  #page: Promise<void> | null = null;
  // Stream changes that arrive while a page loads wait for it: the page may
  // have been read before the change and would undo it.
  #buffer: (() => void)[] | null = null;
  #gen = 0; // bumped when the stream stops: its late events are dropped
  #pageGen = 0; // bumped when the list is dropped: a late page is dropped
  #streamListeners = new Set<StreamListener<M>>();

  constructor(readonly client: NotifydClient<M>) {}

  subscribe = (fn: () => void) => {
    this.#subs.add(fn);
    return () => {
      this.#subs.delete(fn);
    };
  };
  getSnapshot = () => this.state;
  getServerSnapshot = () => EMPTY as InboxState<M>;

  #set(patch: Partial<InboxState<M>>) {
    this.state = { ...this.state, ...patch };
    for (const fn of [...this.#subs]) fn();
  }

  /** retain starts the stream and the counts with the first user; the function returned releases. */
  retain(): () => void {
    if (this.#users++ === 0) this.#start();
    let released = false;
    return () => {
      if (released) return;
      released = true;
      if (--this.#users === 0) this.#stop();
    };
  }

  /** listen adds a stream listener (useNotifydStream, Toaster) for as long as the store runs. */
  listen(l: StreamListener<M>): () => void {
    this.#streamListeners.add(l);
    return () => {
      this.#streamListeners.delete(l);
    };
  }

  #fan<K extends keyof StreamListener<M>>(kind: K, data?: unknown) {
    for (const l of [...this.#streamListeners]) (l[kind] as ((d: unknown) => void) | undefined)?.(data);
  }

  #start() {
    const gen = ++this.#gen;
    const live = <T,>(fn: (d: T) => void) => (d: T) => {
      if (gen === this.#gen) fn(d);
    };
    this.#unsubscribe = this.client.subscribe({
      state: live((connection: ConnectionState) => {
        this.#set({ connection });
        this.#fan("state", connection);
      }),
      error: live((error: NotifydError) => {
        this.#set({ error });
        this.#fan("error", error);
      }),
      counts: live((counts: Counts) => {
        this.#set({ counts });
        this.#fan("counts", counts);
      }),
      created: live((item: InboxItem<M>) => {
        this.#later(() => this.#upsert([item]));
        this.#fan("created", item);
      }),
      updated: live((u: InboxChange) => {
        this.#later(() => this.#applyChange(u));
        this.#fan("updated", u);
      }),
      deleted: live((d: { ids: string[] }) => {
        this.#later(() => this.#remove(d.ids || []));
        this.#fan("deleted", d);
      }),
      reset: () => {
        if (gen !== this.#gen) return;
        this.#fan("reset");
        if (this.state.nextCursor !== undefined) void this.reload();
      },
      reauth: () => {
        if (gen === this.#gen) this.#fan("reauth");
      },
    });
    void this.refreshCounts();
  }

  #later(fn: () => void) {
    if (this.#buffer) this.#buffer.push(fn);
    else fn();
  }

  #stop() {
    this.#gen++;
    this.#unsubscribe?.();
    this.#unsubscribe = null;
  }

  async refreshCounts(): Promise<void> {
    const gen = this.#gen;
    try {
      const counts = await this.client.counts();
      if (gen === this.#gen) this.#set({ counts });
    } catch (error) {
      if (gen === this.#gen) this.#set({ error: error as NotifydError });
    }
  }

  /** Loads the next page (the first when nothing is loaded); one at a time. */
  loadMore(): Promise<void> {
    if (this.#page) return this.#page;
    if (this.state.nextCursor === null) return Promise.resolve();
    const pg = this.#pageGen;
    this.#set({ loading: true, error: null });
    this.#buffer = this.#buffer || [];
    this.#page = this.client
      .inbox({ limit: this.pageSize, cursor: this.state.nextCursor })
      .then(
        (page) => {
          if (pg !== this.#pageGen) return;
          this.#set({ nextCursor: page.next_cursor ?? null, loading: false });
          this.#upsert(page.items);
        },
        (error) => {
          if (pg === this.#pageGen) this.#set({ loading: false, error });
        },
      )
      .finally(() => {
        if (pg !== this.#pageGen) return;
        this.#page = null;
        const held = this.#buffer || [];
        this.#buffer = null;
        for (const fn of held) fn();
      });
    return this.#page;
  }

  /** Drops the list and loads the first page again. */
  reload(): Promise<void> {
    this.#pageGen++;
    this.#page = null;
    this.#set({ items: [], nextCursor: undefined });
    return this.loadMore();
  }

  // Stream items and pages meet here: an item is never listed twice (a
  // replay after a reconnect, or a page that overlaps a live item).
  #upsert(items: InboxItem<M>[]) {
    if (!items.length) return;
    const byId = new Map(this.state.items.map((it) => [it.id, it]));
    for (const it of items) byId.set(it.id, { ...byId.get(it.id), ...it } as InboxItem<M>);
    const list = [...byId.values()].filter((it) => !it.archived_at);
    list.sort((a, b) => (before(a as Item, b as Item) ? -1 : before(b as Item, a as Item) ? 1 : 0));
    this.#set({ items: list });
  }

  #remove(ids: string[]) {
    const drop = new Set(ids);
    this.#set({ items: this.state.items.filter((it) => !drop.has(it.id)) });
  }

  #applyChange(u: InboxChange) {
    if (typeof u.id === "string" && typeof u.created_at === "string") {
      if (this.state.items.some((it) => it.id === u.id)) this.#upsert([u as unknown as InboxItem<M>]);
      return;
    }
    const ids = new Set(u.ids || []);
    if (!ids.size) return;
    if (u.archived_at) {
      this.#remove([...ids]);
      return;
    }
    const patch: Record<string, unknown> = {};
    for (const k of ["read_at", "seen_at"] as const) if (k in u) patch[k] = u[k];
    this.#set({ items: this.state.items.map((it) => (ids.has(it.id) ? ({ ...it, ...patch } as InboxItem<M>) : it)) });
  }

  // An optimistic write: apply shows the change at once; the request runs;
  // a refusal puts back the items and counts as they were and rethrows.
  async #optimistic<T>(apply: (items: InboxItem<M>[]) => { items: InboxItem<M>[]; counts: Counts | null }, call: () => Promise<T>): Promise<T> {
    const before = { items: this.state.items, counts: this.state.counts };
    this.#set(apply(this.state.items));
    try {
      return await call();
    } catch (error) {
      this.#set({ ...before, error: error as NotifydError });
      void this.refreshCounts();
      throw error;
    }
  }

  #less(unreadN: number, unseenN: number): Counts | null {
    const c = this.state.counts;
    if (!c) return c;
    // A capped count stays capped: "99+" minus one is still more than 98.
    return {
      ...c,
      unread: c.unread_capped ? c.unread : Math.max(0, c.unread - unreadN),
      unseen: c.unseen_capped ? c.unseen : Math.max(0, c.unseen - unseenN),
    };
  }

  markRead(ids: string[]) {
    const now = new Date().toISOString();
    const set = new Set(ids);
    return this.#optimistic(
      (items) => {
        let r = 0;
        let s = 0;
        const next = items.map((it) => {
          if (!set.has(it.id) || !unread(it as Item)) return it;
          r++;
          if (!it.seen_at) s++;
          return { ...it, read_at: now, seen_at: it.seen_at || now };
        });
        return { items: next, counts: this.#less(r, s) };
      },
      () => this.client.markRead(ids),
    );
  }

  markAllRead() {
    const now = new Date().toISOString();
    return this.#optimistic(
      (items) => ({
        items: items.map((it) => (unread(it as Item) ? { ...it, read_at: now, seen_at: it.seen_at || now } : it)),
        counts: this.state.counts && { ...this.state.counts, unread: 0, unseen: 0, unread_capped: false, unseen_capped: false },
      }),
      () => this.client.markAllRead(),
    );
  }

  markUnread(ids: string[]) {
    const set = new Set(ids);
    return this.#optimistic(
      (items) => ({ items: items.map((it) => (set.has(it.id) ? { ...it, read_at: null } : it)), counts: this.state.counts }),
      () => this.client.markUnread(ids),
    );
  }

  /** Marks every unseen item seen (what opening the inbox does). */
  markSeen() {
    const now = new Date().toISOString();
    if (this.state.counts && this.state.counts.unseen === 0 && !this.state.items.some((it) => !it.seen_at)) {
      return Promise.resolve({ marked: 0 });
    }
    return this.#optimistic(
      (items) => ({
        items: items.map((it) => (it.seen_at ? it : { ...it, seen_at: now })),
        counts: this.state.counts && { ...this.state.counts, unseen: 0, unseen_capped: false },
      }),
      () => this.client.markSeen(),
    );
  }

  archive(ids: string[]) {
    const set = new Set(ids);
    return this.#optimistic(
      (items) => {
        let r = 0;
        let s = 0;
        for (const it of items) {
          if (set.has(it.id) && unread(it as Item)) {
            r++;
            if (!it.seen_at) s++;
          }
        }
        return { items: items.filter((it) => !set.has(it.id)), counts: this.#less(r, s) };
      },
      () => this.client.archive(ids),
    );
  }
}
