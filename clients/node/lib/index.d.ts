// Types of @notifyd/client, for CommonJS and (through index.d.mts, which
// re-exports them) ESM importers alike: the one source of the declarations.

/**
 * Register your notifiers' params types, written by
 * `notifyd gen types -lang ts -o notifiers.ts`, to type every send:
 *
 *   import type { Notifiers } from "./notifiers";
 *   declare module "@notifyd/client" {
 *     interface Register { notifiers: Notifiers }
 *   }
 *
 * Then `send(client, { notifier: "comment.craeted", ... })` and params of
 * the wrong shape are compile errors. Without it any notifier name and any
 * params object are accepted (notifyd still checks them at run time).
 */
export interface Register {}

/** A notifier's params: a JSON object. */
export type Params = Record<string, unknown>;

/** The registered notifiers' params by name, or any name and params when none are registered. */
export type RegisteredNotifiers = Register extends { notifiers: infer M } ? M : Record<string, Params>;

/** The name of a notifier: any string, or one of the registered notifiers. */
export type NotifierName = keyof RegisteredNotifiers & string;

/** Anything that runs a query and returns rows, as node-postgres does. */
export interface Queryable {
  query(text: string, values?: unknown[]): Promise<{ rows: any[] }>;
}

/**
 * A connection your transaction runs on: a pg.Client, or the client
 * pool.connect() gave you. A pg.Pool is refused (at compile time by these
 * types, at run time by send): each of its queries may run on another
 * connection, so a send through it would not be part of your transaction.
 */
export type TxClient = Queryable & {
  totalCount?: never;
  idleCount?: never;
  waitingCount?: never;
};

/** A recipient addressed directly, with why they get the notification. */
export interface Recipient {
  /** The application's id for the recipient: 1 to 255 bytes. */
  id: string;
  /** Why they get it ("author", "mentioned"); empty or absent means "direct". At most 64 bytes. */
  reason?: string;
}

interface NotificationFields {
  /** Identifies the occurrence: (notifier, key) is one notification forever. At most 255 bytes. */
  key: string;
  /** Recipient ids, or objects with a reason. At least one recipient or topic. */
  recipients?: ReadonlyArray<string | Recipient>;
  /** Topics whose subscribers receive the notification. */
  topics?: readonly string[];
  /** The recipient id of whoever caused it; dropped from the audience unless the notifier sets notify_actor. */
  actor?: string | null;
  /** Fan out at this time instead of at once. */
  sendAt?: Date | null;
  /** The tenant (an existing one) the notification belongs to: its branding and preference defaults apply, and its items are seen through its tokens. */
  tenant?: string | null;
}

type ParamsField<P> = {} extends P ? { params?: P } : { params: P };

/**
 * One occurrence of notifier N. With registered notifiers, `params` has
 * N's params type (and is required when N has required params).
 */
export type Notification<N extends NotifierName = NotifierName> = {
  [K in N]: NotificationFields & {
    /** The notifier's name ("comment.created"), as declared in notifyd's config. */
    notifier: K;
  } & ParamsField<RegisteredNotifiers[K]>;
}[N];

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

/** Options of send. */
export interface SendOptions extends Options {
  /**
   * Send from a client that is not inside a transaction: the notification
   * then commits on its own. By default send refuses such a client.
   */
  allowAutocommit?: boolean;
}

/** A recipient's profile fields; absent keys are kept, null clears. */
export interface Profile {
  /** A bare address such as ada@example.com. */
  email?: string | null;
  name?: string | null;
  /** A BCP 47 language tag such as "en" or "pt-BR". */
  locale?: string | null;
  /** An IANA time zone name such as "Europe/Paris". */
  timezone?: string | null;
  /** An absolute http or https URL. */
  webhook_url?: string | null;
  /** E.164: "+14155550123". */
  phone?: string | null;
  /** The application's own data; templates see it as .Data. */
  data?: Record<string, unknown> | null;
  /** Two different 24-hour times "HH:MM". */
  quiet_hours?: { start: string; end: string } | null;
  /** The recipient's tokens issued before this time are refused. */
  tokens_valid_after?: Date | string | null;
}

/**
 * InputError is notifyd refusing malformed input (SQLSTATE 22023). Nothing
 * was written, but PostgreSQL has aborted the transaction: roll it back (or
 * use a savepoint around the call to go on).
 */
export declare class InputError extends Error {
  /** The offending field: "key", "recipients[2].id", "params", "email"... */
  readonly field: string;
  /** The SQLSTATE, "22023"; empty when the client refused the input before any query. */
  readonly sqlstate: string;
  /** PostgreSQL's DETAIL: for params, the JSON pointer of the value ("/author_name"). */
  readonly detail: string;
  /** The error node-postgres raised (code, column, hint), when there was a query. */
  readonly cause?: unknown;
  constructor(message: string, field: string, options?: { cause?: unknown; sqlstate?: string; detail?: string });
}

/** UnknownNotifierError: the notifier is not in the catalog notifyd publishes from its config. */
export declare class UnknownNotifierError extends InputError {
  readonly field: "notifier";
  constructor(message: string, options?: { cause?: unknown; sqlstate?: string; detail?: string });
}

/**
 * NotInTransactionError: send was given a pg.Pool, or a client outside a
 * transaction block, where the notification would commit on its own
 * whatever happens to the rest of your work.
 */
export declare class NotInTransactionError extends Error {
  constructor(message: string);
}

/**
 * send enqueues n inside the transaction client is in. Sending the same
 * (notifier, key) again returns the first id with duplicate: true and
 * changes nothing. Throws InputError (UnknownNotifierError for a notifier
 * notifyd does not declare) for what notifyd refuses, and
 * NotInTransactionError for a pg.Pool or a client outside a transaction
 * block (unless opts.allowAutocommit).
 */
export declare function send<N extends NotifierName>(client: TxClient, n: Notification<N>, opts?: SendOptions): Promise<SendResult>;

/**
 * cancel cancels (notifier, key): deliveries not yet sent become cancelled
 * and inbox items are removed. It returns how many deliveries and items were
 * withdrawn (0 when already cancelled), or null when the notification was
 * never sent. Call it last in the transaction.
 */
export declare function cancel(db: Queryable, notifier: NotifierName, key: string, opts?: Options): Promise<number | null>;

/**
 * subscribe subscribes recipient to topic for reason (default "subscribed";
 * subscribing again changes the reason). It returns true when the
 * subscription is new.
 */
export declare function subscribe(db: Queryable, topic: string, recipient: string, reason?: string, opts?: Options): Promise<boolean>;

/** unsubscribe removes recipient's subscription to topic and returns whether there was one. */
export declare function unsubscribe(db: Queryable, topic: string, recipient: string, opts?: Options): Promise<boolean>;

/**
 * putRecipient creates or changes recipient id's profile in your
 * transaction: absent keys are kept, null clears. An invalid field throws
 * InputError naming it ("email", "timezone", "nickname").
 */
export declare function putRecipient(db: Queryable, id: string, profile: Profile, opts?: Options): Promise<void>;

/** The options of recipientToken. */
export interface TokenOptions {
  /**
   * The tenant claim: the token reads, marks and streams only that tenant's
   * inbox items and preferences (1 to 255 bytes without control characters;
   * an empty string is refused). Absent: no claim.
   */
  tenant?: string;
  /** When the token is issued (iat); now when absent. */
  now?: Date;
}

/**
 * recipientToken mints the token a recipient's browser presents to
 * GET /v1/inbox (and the stream and preferences): an HS256 JWT signed with
 * the daemon's http.token_secret, subject the recipient id, iat now and exp
 * now + ttlSeconds, which must not exceed the daemon's http.max_token_ttl
 * (24 hours by default). With opts.tenant it carries the tenant claim. A Date
 * in place of opts is the issue time.
 */
export declare function recipientToken(secret: string, recipient: string, ttlSeconds: number, opts?: TokenOptions | Date): string;
