"use strict";
// notifyd's Node client: enqueue notifications inside your own PostgreSQL
// transaction with node-postgres. Each function is one statement calling a
// SQL function that `notifyd migrate` installs (notify_send, notify_cancel,
// notify_subscribe, notify_unsubscribe, notify_put_recipient), so what it
// does commits or rolls back with the rest of your transaction.
//
// This file is the implementation (CommonJS); index.mjs re-exports it for
// ESM, so both share one set of error classes, and index.d.ts types it.

const crypto = require("node:crypto");

/**
 * InputError: notifyd refused malformed input (SQLSTATE 22023). Nothing was
 * written, but PostgreSQL has aborted the transaction: roll it back (or use
 * a savepoint around the call to go on).
 */
class InputError extends Error {
  constructor(message, field, options = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = "InputError";
    this.field = field;
    this.sqlstate = options.sqlstate ?? "22023";
    this.detail = options.detail ?? "";
  }
}

/** UnknownNotifierError: the notifier is not in the catalog notifyd publishes from its config. */
class UnknownNotifierError extends InputError {
  constructor(message, options = {}) {
    super(message, "notifier", options);
    this.name = "UnknownNotifierError";
  }
}

/**
 * NotInTransactionError: send was given a pg.Pool, or a client that is not
 * inside a transaction, so the notification would commit on its own whatever
 * happens to the rest of the caller's work.
 */
class NotInTransactionError extends Error {
  constructor(message) {
    super(message);
    this.name = "NotInTransactionError";
  }
}

function fn(name, opts) {
  if (!opts || !opts.schema) {
    return name;
  }
  return `"${String(opts.schema).replace(/"/g, '""')}".${name}`;
}

// mapError turns the PostgreSQL error node-postgres raised for a 22023 into
// an InputError (UnknownNotifierError for the unknown-notifier case); other
// errors pass through.
function mapError(err) {
  if (err && err.code === "22023" && typeof err.message === "string") {
    const opts = { cause: err, sqlstate: err.code, detail: err.detail ?? "" };
    if (err.column === "notifier" && err.message.startsWith("unknown notifier")) {
      return new UnknownNotifierError(err.message, opts);
    }
    return new InputError(err.message, err.column ?? "", opts);
  }
  return err;
}

async function run(db, text, values) {
  if (!db || typeof db.query !== "function") {
    throw new TypeError("notifyd: the first argument must be a node-postgres client (pg.Client or a pool's client)");
  }
  try {
    const res = await db.query(text, values);
    return res.rows;
  } catch (err) {
    throw mapError(err);
  }
}

// isPool recognises a pg.Pool (and pools shaped like it) without importing
// pg: a pool has connection counts, a client does not.
function isPool(db) {
  return (
    db !== null &&
    typeof db === "object" &&
    typeof db.connect === "function" &&
    typeof db.totalCount === "number" &&
    typeof db.idleCount === "number"
  );
}

// GUARD_SQL asks the server whether the session is inside an explicit
// transaction block: SAVEPOINT is refused with SQLSTATE 25P01 outside one
// (also inside the implicit block of a multi-statement query, which commits on
// its own), and is released at once inside one, leaving nothing behind. It is
// one simple-protocol round trip (no parameters) in pg and pg-native alike.
// It is used instead of now() <> statement_timestamp(), which is false for
// the first statement after a BEGIN sent in the same round trip (and for every
// statement of a multi-statement query), and of txid_current_if_assigned(),
// which is null in a transaction that has not written yet.
const GUARD_SQL = "SAVEPOINT notifyd_in_transaction; RELEASE SAVEPOINT notifyd_in_transaction";

// inTransaction tells whether db is inside a transaction block. The driver
// answers when it can: node-postgres' getTransactionStatus() (pg 8.21 and
// later) says "T" or "E" inside one and "I" outside, and "I" is believed only
// with nothing queued (an un-awaited BEGIN may be queued ahead of the send).
// When it cannot tell (older pg, pg-native, a query in flight), the server is
// asked; queries run in order, so that answer includes a queued BEGIN.
async function inTransaction(db) {
  let status = null;
  try {
    status = typeof db.getTransactionStatus === "function" ? db.getTransactionStatus() : null;
  } catch {
    // pg's native client calls pg-native's, which older pg-native lacks.
  }
  if (status === "T" || status === "E") {
    return true;
  }
  if (status === "I" && Array.isArray(db._queryQueue) && db._queryQueue.length === 0 && !db._activeQuery) {
    return false;
  }
  try {
    await db.query(GUARD_SQL);
    return true;
  } catch (err) {
    if (err && err.code === "25P01") {
      return false;
    }
    throw err;
  }
}

async function send(db, n, opts) {
  if (isPool(db)) {
    throw new NotInTransactionError(
      "notifyd.send: got a pg.Pool, which cannot hold your transaction (each query may run on another " +
        "connection, so the notification would commit on its own). Pass the client your transaction runs on: " +
        "const client = await pool.connect(); await client.query('BEGIN'); ... await send(client, n)",
    );
  }
  if (n === null || typeof n !== "object") {
    throw new TypeError("notifyd.send: the notification must be an object");
  }
  const sendAt = n.sendAt ?? null;
  if (sendAt !== null && !(sendAt instanceof Date && !Number.isNaN(sendAt.getTime()))) {
    throw new InputError("sendAt: want a valid Date", "sendAt", { sqlstate: "" });
  }
  if (db && typeof db.query === "function" && !(opts && opts.allowAutocommit) && !(await inTransaction(db))) {
    throw new NotInTransactionError(
      "notifyd.send: the client is not in a transaction, so the notification would commit on its own: " +
        "run client.query('BEGIN') first (or pass { allowAutocommit: true } to send on its own)",
    );
  }
  const rows = await run(
    db,
    `SELECT id::text AS id, duplicate FROM ${fn("notify_send", opts)}($1, $2, $3::jsonb, $4::jsonb, $5::text[], $6, $7::timestamptz, $8)`,
    [
      n.notifier ?? null,
      n.key ?? null,
      JSON.stringify(n.recipients ?? []),
      JSON.stringify(n.params ?? {}),
      n.topics ?? [],
      n.actor ?? null,
      sendAt,
      n.tenant ?? null,
    ],
  );
  return { id: rows[0].id, duplicate: rows[0].duplicate };
}

async function cancel(db, notifier, key, opts) {
  const rows = await run(db, `SELECT ${fn("notify_cancel", opts)}($1, $2) AS n`, [notifier, key]);
  return rows[0].n;
}

async function subscribe(db, topic, recipient, reason, opts) {
  const rows = await run(db, `SELECT ${fn("notify_subscribe", opts)}($1, $2, $3) AS created`, [
    topic,
    recipient,
    reason ?? "subscribed",
  ]);
  return rows[0].created;
}

async function unsubscribe(db, topic, recipient, opts) {
  const rows = await run(db, `SELECT ${fn("notify_unsubscribe", opts)}($1, $2) AS deleted`, [topic, recipient]);
  return rows[0].deleted;
}

async function putRecipient(db, id, profile, opts) {
  if (profile === null || typeof profile !== "object" || Array.isArray(profile)) {
    throw new InputError("profile: want an object", "profile", { sqlstate: "" });
  }
  const body = {};
  for (const [k, v] of Object.entries(profile)) {
    if (v === undefined) {
      continue; // absent: kept
    }
    body[k] = v instanceof Date ? v.toISOString() : v;
  }
  await run(db, `SELECT ${fn("notify_put_recipient", opts)}($1, $2::jsonb)`, [id, JSON.stringify(body)]);
}

function base64url(buf) {
  return Buffer.from(buf).toString("base64url");
}

/**
 * recipientToken mints the token a recipient's browser presents to
 * GET /v1/inbox and the other recipient endpoints: an HS256 JWT signed with
 * the daemon's http.token_secret, subject the recipient id, iat now and exp
 * now + ttlSeconds (at most the daemon's http.max_token_ttl, 24 h by default).
 * opts is { tenant, now } (or, as before, the Date to issue it at): with a
 * tenant the token carries the tenant claim and reaches only that tenant's
 * inbox items and preferences; without one it has no claim.
 */
function recipientToken(secret, recipient, ttlSeconds, opts) {
  if (typeof secret !== "string" || secret === "") {
    throw new InputError("secret: is required (the daemon's http.token_secret)", "secret", { sqlstate: "" });
  }
  if (typeof recipient !== "string" || recipient === "" || Buffer.byteLength(recipient) > 255) {
    throw new InputError("recipient: want a recipient id of 1 to 255 bytes", "recipient", { sqlstate: "" });
  }
  if (typeof ttlSeconds !== "number" || !Number.isFinite(ttlSeconds) || ttlSeconds <= 0) {
    throw new InputError("ttl: want a positive number of seconds", "ttl", { sqlstate: "" });
  }
  const o = opts instanceof Date ? { now: opts } : (opts ?? {});
  const tenant = o.tenant ?? null;
  // The daemon's rule for a tenant id: 1 to 255 bytes of text without
  // control characters. An empty string is refused rather than read as "no
  // claim": a token meant for one tenant must never reach them all.
  if (
    tenant !== null &&
    (typeof tenant !== "string" || tenant === "" || Buffer.byteLength(tenant) > 255 || /\p{Cc}/u.test(tenant) ||
      !tenant.isWellFormed())
  ) {
    throw new InputError("tenant: want a tenant id of 1 to 255 bytes without control characters", "tenant", { sqlstate: "" });
  }
  const at = o.now === undefined ? new Date() : o.now;
  const iat = at instanceof Date ? Math.floor(at.getTime() / 1000) : NaN;
  if (!Number.isFinite(iat)) {
    throw new InputError("now: want a valid Date", "now", { sqlstate: "" });
  }
  const header = base64url(JSON.stringify({ alg: "HS256", typ: "JWT" }));
  const claims = { sub: recipient, iat, exp: iat + Math.ceil(ttlSeconds) };
  if (tenant !== null) {
    claims.tenant = tenant;
  }
  const body = base64url(JSON.stringify(claims));
  const mac = crypto.createHmac("sha256", secret).update(`${header}.${body}`).digest();
  return `${header}.${body}.${base64url(mac)}`;
}

module.exports = {
  NotInTransactionError,
  InputError,
  UnknownNotifierError,
  send,
  cancel,
  subscribe,
  unsubscribe,
  putRecipient,
  recipientToken,
};
