// These tests run against a real notifyd: clients/clients_test.go starts a
// daemon on a fresh database and runs them with its URL in
// NOTIFYD_TEST_DATABASE_URL (`make test` does this).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { Pool, PoolClient } from "pg";
import { send, cancel, subscribe, unsubscribe, InputError, UnknownNotifierError } from "../src";

const url = process.env.NOTIFYD_TEST_DATABASE_URL;
if (!url) {
  throw new Error("NOTIFYD_TEST_DATABASE_URL is not set: run these tests through `go test ./clients/`");
}
const pool = new Pool({ connectionString: url, max: 4 });
const params = { post_title: "Hello", author_name: "Ada" };

before(async () => {
  await pool.query("SELECT 1");
});
after(async () => {
  await pool.end();
});

async function inTx<T>(fn: (c: PoolClient) => Promise<T>, commit = true): Promise<T> {
  const c = await pool.connect();
  try {
    await c.query("BEGIN");
    const res = await fn(c);
    await c.query(commit ? "COMMIT" : "ROLLBACK");
    return res;
  } catch (err) {
    await c.query("ROLLBACK");
    throw err;
  } finally {
    c.release();
  }
}

async function count(sql: string, values: unknown[]): Promise<number> {
  const res = await pool.query(`SELECT count(*)::int AS n FROM (${sql}) q`, values);
  return res.rows[0].n;
}

// waitFor polls until sql returns a row, for at most 30 s (a fan-out on a
// loaded machine), and returns it.
async function waitFor(sql: string, values: unknown[]): Promise<any> {
  const deadline = Date.now() + 30_000;
  for (;;) {
    const res = await pool.query(sql, values);
    if (res.rows.length > 0) {
      return res.rows[0];
    }
    if (Date.now() > deadline) {
      throw new Error(`no row after 30 s: ${sql} ${JSON.stringify(values)}`);
    }
    await new Promise((r) => setTimeout(r, 50)); // polling interval
  }
}

test("rolled back: nothing is sent", async () => {
  const res = await inTx(async (c) => {
    const res = await send(c, { notifier: "comment.created", key: "node-rollback", recipients: ["node-u1"], params });
    assert.equal(res.duplicate, false);
    // Inside the transaction the notification and its fan-out job exist.
    assert.equal((await c.query("SELECT 1 FROM river_job WHERE args->>'notification_id' = $1", [res.id])).rows.length, 1);
    return res;
  }, false);
  assert.equal(await count("SELECT 1 FROM notify_notifications WHERE id = $1", [res.id]), 0);
  assert.equal(await count("SELECT 1 FROM river_job WHERE args->>'notification_id' = $1", [res.id]), 0);
  // A later send of the same pair is new: the rolled-back one never existed.
  const again = await inTx((c) => send(c, { notifier: "comment.created", key: "node-rollback", recipients: ["node-u1"], params }));
  assert.equal(again.duplicate, false);
  assert.notEqual(again.id, res.id);
});

test("committed: the inbox item appears", async () => {
  const res = await inTx((c) =>
    send(c, {
      notifier: "comment.created",
      key: "node-commit",
      recipients: [{ id: "node-u2", reason: "author" }, "node-u3"],
      actor: "node-u9",
      params,
    }),
  );
  assert.match(res.id, /^[0-9a-f]{8}-[0-9a-f]{4}-7/);
  const item = await waitFor("SELECT title, reason FROM notify_inbox WHERE recipient = $1 AND key = $2", ["node-u2", "node-commit"]);
  assert.equal(item.title, "Ada commented on Hello");
  assert.equal(item.reason, "author");
  await waitFor("SELECT 1 FROM notify_inbox WHERE recipient = $1 AND key = $2", ["node-u3", "node-commit"]);
});

test("duplicates return the first id", async () => {
  const first = await inTx((c) => send(c, { notifier: "comment.created", key: "node-dup", recipients: ["node-u4"], params }));
  const again = await inTx((c) => send(c, { notifier: "comment.created", key: "node-dup", recipients: ["node-u5"], params }));
  assert.deepEqual(again, { id: first.id, duplicate: true });
  assert.equal(await count("SELECT 1 FROM notify_notifications WHERE key = $1", ["node-dup"]), 1);
});

test("an unknown notifier is refused at once", async () => {
  await assert.rejects(
    inTx((c) => send(c, { notifier: "no.such", key: "node-unknown", recipients: ["node-u1"] })),
    (err: unknown) => {
      assert.ok(err instanceof UnknownNotifierError, String(err));
      assert.equal(err.field, "notifier");
      assert.match(err.message, /unknown notifier "no.such"/);
      assert.equal((err.cause as { code: string }).code, "22023");
      return true;
    },
  );
  assert.equal(await count("SELECT 1 FROM notify_notifications WHERE key = $1", ["node-unknown"]), 0);
});

test("malformed input names the field", async () => {
  await assert.rejects(
    inTx((c) => send(c, { notifier: "comment.created", key: "node-bad", recipients: ["node-u1", { id: "" }] })),
    (err: unknown) => {
      assert.ok(err instanceof InputError && !(err instanceof UnknownNotifierError), String(err));
      assert.equal(err.field, "recipients[1].id");
      assert.equal(err.message, "recipients[1].id: is required");
      return true;
    },
  );
  assert.equal(await count("SELECT 1 FROM notify_notifications WHERE key = $1", ["node-bad"]), 0);
});

test("subscribe, send to the topic, unsubscribe, cancel", async () => {
  assert.equal(await inTx((c) => subscribe(c, "node-topic", "node-u6")), true);
  assert.equal(await inTx((c) => subscribe(c, "node-topic", "node-u6", "watching")), false);
  await inTx((c) => send(c, { notifier: "comment.created", key: "node-topic-1", topics: ["node-topic"], params }));
  const item = await waitFor("SELECT reason FROM notify_inbox WHERE recipient = $1 AND key = $2", ["node-u6", "node-topic-1"]);
  assert.equal(item.reason, "watching");
  assert.equal(await inTx((c) => unsubscribe(c, "node-topic", "node-u6")), true);
  assert.equal(await inTx((c) => unsubscribe(c, "node-topic", "node-u6")), false);

  assert.equal(await inTx((c) => cancel(c, "comment.created", "node-never-sent")), null);
  const withdrawn = await inTx((c) => cancel(c, "comment.created", "node-topic-1"));
  assert.equal(withdrawn, 1); // the inbox item
  assert.equal(await count("SELECT 1 FROM notify_inbox WHERE key = $1", ["node-topic-1"]), 0);
});
