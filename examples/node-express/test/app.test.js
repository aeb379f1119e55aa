// The example against a real notifyd: clients/clients_test.go starts the
// daemon, creates the comments table and a role holding only notifyd_app
// (plus INSERT on comments), and runs `npm test` with their URLs.
const { test, before, after } = require("node:test");
const assert = require("node:assert/strict");
const pg = require("pg");
const { createApp } = require("../app");

for (const v of ["NOTIFYD_TEST_APP_URL", "NOTIFYD_TEST_DATABASE_URL", "NOTIFYD_TEST_API", "NOTIFYD_TEST_TOKEN_SECRET"]) {
  if (!process.env[v]) throw new Error(`${v} is not set: run through \`go test ./clients/\` (make test does)`);
}
const pool = new pg.Pool({ connectionString: process.env.NOTIFYD_TEST_APP_URL });
const owner = new pg.Pool({ connectionString: process.env.NOTIFYD_TEST_DATABASE_URL });
let server;
let base;

before(async () => {
  const app = createApp(pool, { tokenSecret: process.env.NOTIFYD_TEST_TOKEN_SECRET });
  await new Promise((resolve) => {
    server = app.listen(0, "127.0.0.1", resolve);
  });
  base = `http://127.0.0.1:${server.address().port}`;
});
after(async () => {
  await new Promise((resolve) => server.close(resolve));
  await pool.end();
  await owner.end();
});

async function post(path, body) {
  const res = await fetch(base + path, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
  return { status: res.status, body: await res.json() };
}

async function waitFor(sql, values) {
  const deadline = Date.now() + 30_000;
  for (;;) {
    const { rows } = await owner.query(sql, values);
    if (rows.length > 0) return rows[0];
    if (Date.now() > deadline) throw new Error(`no row after 30 s: ${sql}`);
    await new Promise((r) => setTimeout(r, 50)); // polling interval
  }
}

test("a comment and its notification commit together, and the watcher's token reads it", async () => {
  const res = await post("/posts/9/comments", { body: "Nice post", author: "ex-u1", author_name: "Ada", post_title: "Hello", watchers: ["ex-u2"] });
  assert.equal(res.status, 201, JSON.stringify(res.body));
  const { rows } = await owner.query("SELECT body FROM comments WHERE id = $1", [res.body.id]);
  assert.deepEqual(rows, [{ body: "Nice post" }]);
  const n = await owner.query("SELECT key FROM notify_notifications WHERE id = $1", [res.body.notification]);
  assert.deepEqual(n.rows, [{ key: `comment-${res.body.id}` }]);
  await waitFor("SELECT 1 FROM notify_inbox WHERE recipient = $1 AND key = $2", ["ex-u2", `comment-${res.body.id}`]);

  const { token } = await (await fetch(`${base}/notifyd-token?user=ex-u2`)).json();
  const inbox = await fetch(`${process.env.NOTIFYD_TEST_API}/v1/inbox`, { headers: { Authorization: `Bearer ${token}` } });
  assert.equal(inbox.status, 200);
  const items = (await inbox.json()).items;
  assert.deepEqual(items.map((i) => i.title), ["Ada commented on Hello"]);
});

test("a refused send rolls the comment back", async () => {
  const before = (await owner.query("SELECT count(*)::int AS n FROM comments")).rows[0].n;
  // No author_name: the notifier's params schema requires it.
  const res = await post("/posts/9/comments", { body: "Lost", author: "ex-u1", post_title: "Hello", watchers: ["ex-u2"] });
  assert.equal(res.status, 422);
  assert.equal(res.body.field, "params");
  assert.match(res.body.error, /\/author_name: missing required property/);
  const after = (await owner.query("SELECT count(*)::int AS n FROM comments")).rows[0].n;
  assert.equal(after, before, "the comment was written although its notification was refused");
  assert.equal((await owner.query("SELECT count(*)::int AS n FROM comments WHERE body = 'Lost'")).rows[0].n, 0);
});
