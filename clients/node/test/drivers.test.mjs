// The transaction guard with each node-postgres the package supports: the
// newest pg (the one package-lock.json pins), the oldest pg 8 minor the peer
// range allows, and pg-native. They come from testdata/drivers, whose lock
// file pins them (`npm ci` there; make test runs it). pg before 8.21 has no
// getTransactionStatus() and pg-native's answers null, so there the guard
// asks the server; every case must refuse a send outside a transaction and
// commit nothing.
import { test, after } from "node:test";
import assert from "node:assert/strict";
import { createRequire } from "node:module";
import fs from "node:fs";
import path from "node:path";
import { send, NotInTransactionError } from "@notifyd/client";

const root = process.cwd();
const fixture = path.join(root, "testdata", "drivers");
const need = createRequire(path.join(fixture, "package.json"));
const pkg = JSON.parse(fs.readFileSync(path.join(root, "package.json"), "utf8"));
const lock = JSON.parse(fs.readFileSync(path.join(root, "package-lock.json"), "utf8"));

const pg = need("pg");
const newest = need("pg/package.json").version;
const oldest = need("pg-oldest/package.json").version;
// The URLs name a Unix socket directory (host=…), which pg 8.0's URL parser
// does not read: every driver gets the same parsed configuration.
const parse = need("pg-connection-string").parse;
const app = parse(process.env.NOTIFYD_TEST_APP_URL);
const owner = new pg.Pool({ ...parse(process.env.NOTIFYD_TEST_DATABASE_URL), max: 1 });
after(() => owner.end());

// pg.native loads pg-native (the fixture's, for both pg versions): null when
// it could not be built.
function nativeOf(mod) {
  try {
    return mod.native ? [mod.native.Client, ""] : [null, "pg.native is null"];
  } catch (err) {
    return [null, String(err)];
  }
}
const pgOldest = need("pg-oldest");
const [native, nativeWhy] = nativeOf(pg);
const [oldNative, oldNativeWhy] = nativeOf(pgOldest);

const params = { post_title: "Hello", author_name: "Ada" };

async function count(key) {
  const res = await owner.query("SELECT count(*)::int AS n FROM notify_notifications WHERE key = $1", [key]);
  return res.rows[0].n;
}

test("the peer range says what these tests run: its floor is the oldest pg tested, the newest is the lock file's", () => {
  assert.equal(pkg.peerDependencies.pg, `^${oldest}`);
  assert.equal(lock.packages["node_modules/pg"].version, newest);
});

const drivers = [
  [`pg ${newest}`, pg.Client, ""],
  [`pg ${oldest}`, pgOldest.Client, ""],
  [`pg ${newest} with pg-native`, native, nativeWhy],
  // pg 8.0's native client has no getTransactionStatus: the server is asked.
  [`pg ${oldest} with pg-native`, oldNative, oldNativeWhy],
];

for (const [name, Client, why] of drivers) {
  test(`${name}: a send outside a transaction is refused and commits nothing`, { skip: Client ? false : `pg-native is not installed (it needs libpq-dev and a C++ compiler to build): ${why}` }, async () => {
    const key = `node-guard-${name.replace(/[^a-z0-9]+/g, "-")}`;
    const c = new Client(app);
    await c.connect();
    try {
      await assert.rejects(send(c, { notifier: "comment.created", key, recipients: ["node-u1"], params }), (err) => {
        assert.ok(err instanceof NotInTransactionError, String(err));
        return true;
      });
      assert.equal(await count(key), 0);

      // Inside a transaction it is part of it: rolled back, nothing.
      await c.query("BEGIN");
      await send(c, { notifier: "comment.created", key, recipients: ["node-u1"], params });
      await c.query("ROLLBACK");
      assert.equal(await count(key), 0);

      // A BEGIN queued ahead of the send (not awaited) is a transaction.
      const begin = c.query("BEGIN");
      const sent = send(c, { notifier: "comment.created", key, recipients: ["node-u1"], params });
      await begin;
      assert.equal((await sent).duplicate, false);
      await c.query("COMMIT");
      assert.equal(await count(key), 1);

      // Opting in sends on its own.
      const alone = await send(c, { notifier: "comment.created", key: `${key}-alone`, recipients: ["node-u1"], params }, { allowAutocommit: true });
      assert.equal(alone.duplicate, false);
      assert.equal(await count(`${key}-alone`), 1);
    } finally {
      await c.end();
    }
  });
}
