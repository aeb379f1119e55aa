/**
 * notifyd's Node client: enqueue notifications inside your own PostgreSQL
 * transaction with node-postgres. Each function is one statement calling a
 * SQL function that `notifyd migrate` installs (notify_send, notify_cancel,
 * notify_subscribe, notify_unsubscribe), so what it does commits or rolls
 * back with the rest of your transaction: a notification exists if and only
 * if your transaction commits.
 *
 *   const client = await pool.connect();
 *   await client.query("BEGIN");
 *   await client.query("INSERT INTO comments ...");
 *   await send(client, { notifier: "comment.created", key: `comment-${id}`, recipients: ["u2"], params });
 *   await client.query("COMMIT");
 */

/** Anything that runs a query: a pg.Client, a pg.PoolClient (or a pg.Pool, outside a transaction). */
export interface Queryable {
  query(text: string, values?: unknown[]): Promise<{ rows: any[] }>;
}

/** A recipient addressed directly, with why they get the notification. */
export interface Recipient {
  /** The application's id for the recipient: 1 to 255 bytes. */
  id: string;
  /** Why they get it ("author", "mentioned"); empty or absent means "direct". At most 64 bytes. */
  reason?: string;
}

/** One occurrence of a notifier declared in notifyd's config. */
export interface Notification {
  /** The notifier's name ("comment.created"). It must be in notifyd's config. */
  notifier: string;
  /** Identifies the occurrence: (notifier, key) is one notification forever. At most 255 bytes. */
  key: string;
  /** Recipient ids, or objects with a reason. */
  recipients?: Array<string | Recipient>;
  /** Topics whose subscribers receive the notification. */
  topics?: string[];
  /** Template parameters, checked against the notifier's JSON Schema at fan-out. */
  params?: Record<string, unknown>;
  /** The recipient id of whoever caused it; dropped from the audience unless the notifier says notify_actor. */
  actor?: string;
  /** Fan out at this time instead of at once. */
  sendAt?: Date;
}

/** What send reports. */
export interface SendResult {
  /** The notification's id (a UUIDv7): the same for every send of the same (notifier, key). */
  id: string;
  /** True when (notifier, key) already existed: nothing new was enqueued. */
  duplicate: boolean;
}

/** Options common to every call. */
export interface Options {
  /** The schema notifyd's functions live in, when it is not on the connection's search_path. */
  schema?: string;
}

/**
 * InputError is notifyd refusing malformed input (SQLSTATE 22023). Nothing was
 * written, but PostgreSQL has aborted the transaction: roll it back (or use a
 * savepoint around the call to go on).
 */
export class InputError extends Error {
  /** The offending field: "key", "recipients[2].id", "notifier"... */
  readonly field: string;
  /** cause is the PostgreSQL error as node-postgres raised it (code, column, hint). */
  constructor(message: string, field: string, cause: unknown) {
    super(message, { cause });
    this.name = "InputError";
    this.field = field;
  }
}

/** UnknownNotifierError: the notifier is not in the catalog notifyd publishes from its config. */
export class UnknownNotifierError extends InputError {
  constructor(message: string, cause: unknown) {
    super(message, "notifier", cause);
    this.name = "UnknownNotifierError";
  }
}

function fn(name: string, opts?: Options): string {
  if (!opts?.schema) {
    return name;
  }
  return `"${opts.schema.replace(/"/g, '""')}".${name}`;
}

async function run(db: Queryable, text: string, values: unknown[]): Promise<any[]> {
  try {
    const res = await db.query(text, values);
    return res.rows;
  } catch (err) {
    throw mapError(err);
  }
}

function mapError(err: unknown): unknown {
  const e = err as { code?: string; column?: string; message?: string };
  if (e && e.code === "22023" && typeof e.message === "string") {
    if (e.column === "notifier" && e.message.startsWith("unknown notifier")) {
      return new UnknownNotifierError(e.message, err);
    }
    return new InputError(e.message, e.column ?? "", err);
  }
  return err;
}

/**
 * send enqueues n inside the transaction db is in. Sending the same
 * (notifier, key) again returns the first id with duplicate: true and changes
 * nothing. Throws InputError (UnknownNotifierError for a notifier notifyd does
 * not declare) for what notifyd refuses.
 */
export async function send(db: Queryable, n: Notification, opts?: Options): Promise<SendResult> {
  const rows = await run(
    db,
    `SELECT id::text AS id, duplicate FROM ${fn("notify_send", opts)}($1, $2, $3::jsonb, $4::jsonb, $5::text[], $6, $7::timestamptz)`,
    [
      n.notifier,
      n.key,
      JSON.stringify(n.recipients ?? []),
      JSON.stringify(n.params ?? {}),
      n.topics ?? [],
      n.actor ?? null,
      n.sendAt ?? null,
    ],
  );
  return { id: rows[0].id, duplicate: rows[0].duplicate };
}

/**
 * cancel cancels (notifier, key): deliveries not yet sent become cancelled and
 * inbox items are removed. It returns how many deliveries and items were
 * withdrawn (0 when already cancelled), or null when the notification was
 * never sent. Call it last in the transaction: it serialises with other inbox
 * writers until the transaction ends.
 */
export async function cancel(db: Queryable, notifier: string, key: string, opts?: Options): Promise<number | null> {
  const rows = await run(db, `SELECT ${fn("notify_cancel", opts)}($1, $2) AS n`, [notifier, key]);
  return rows[0].n;
}

/**
 * subscribe subscribes recipient to topic for reason (default "subscribed";
 * subscribing again changes the reason). It returns true when the
 * subscription is new.
 */
export async function subscribe(
  db: Queryable,
  topic: string,
  recipient: string,
  reason?: string,
  opts?: Options,
): Promise<boolean> {
  const rows = await run(db, `SELECT ${fn("notify_subscribe", opts)}($1, $2, $3) AS created`, [
    topic,
    recipient,
    reason ?? "subscribed",
  ]);
  return rows[0].created;
}

/** unsubscribe removes recipient's subscription to topic and returns whether there was one. */
export async function unsubscribe(db: Queryable, topic: string, recipient: string, opts?: Options): Promise<boolean> {
  const rows = await run(db, `SELECT ${fn("notify_unsubscribe", opts)}($1, $2) AS deleted`, [topic, recipient]);
  return rows[0].deleted;
}
