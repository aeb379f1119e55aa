// @notifyd/browser in Node against a real daemon (clients/clients_test.go
// starts it): the stream read over fetch, resume without loss or repeat,
// marks, and the token refresh callback.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createHmac } from "node:crypto";
import { createRequire } from "node:module";
import { createClient, NotifydError } from "../dist/index.js";

const api = process.env.NOTIFYD_TEST_API;
const secret = process.env.NOTIFYD_TEST_TOKEN_SECRET;
const admin = process.env.NOTIFYD_TEST_ADMIN_TOKEN;
const skip = !api && "NOTIFYD_TEST_API is not set: run through clients/clients_test.go";

const b64 = (v) => Buffer.from(typeof v === "string" ? v : JSON.stringify(v)).toString("base64url");

/** An HS256 recipient token for sub, valid from iat for ttl seconds. */
function token(sub, ttl = 3600, iat = Math.floor(Date.now() / 1000)) {
  const head = b64({ alg: "HS256", typ: "JWT" }) + "." + b64({ sub, iat, exp: iat + ttl });
  return head + "." + createHmac("sha256", secret).update(head).digest("base64url");
}

async function send(recipient, key) {
  const res = await fetch(api + "/v1/notifications", {
    method: "POST",
    headers: { Authorization: "Bearer " + admin, "Content-Type": "application/json" },
    body: JSON.stringify({ notifier: "comment.created", key, recipients: [recipient], params: { post_title: key, author_name: "Ada" } }),
  });
  assert.equal(res.status, 202, await res.text());
}

/** Polls cond until it holds, or fails with what after the deadline. */
async function waitFor(what, cond, ms = 60000) {
  const end = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > end) assert.fail("gave up waiting for " + what);
    await new Promise((r) => setTimeout(r, 25));
  }
}

test("the CommonJS build has the same exports", () => {
  const cjs = createRequire(import.meta.url)("../dist/index.cjs");
  assert.equal(typeof cjs.createClient, "function");
  assert.equal(typeof cjs.NotifydError, "function");
});

test("stream over fetch: live items, resumed from the last cursor without loss or repeat", { skip }, async () => {
  const client = createClient({ baseUrl: api, token: token("n-stream"), EventSource: null });
  const seen = [];
  const counts = [];
  const stop = client.subscribe({ created: (it) => seen.push(it.key), counts: (c) => counts.push(c) });
  await waitFor("the stream to open", () => client.connectionState === "open");
  await send("n-stream", "a");
  await waitFor("item a", () => seen.includes("a"));
  await waitFor("counts of 1", () => counts.some((c) => c.unread === 1));
  const cursor = client.lastEventId;
  assert.ok(cursor, "no event id");

  client.close(); // the connection drops
  assert.equal(client.connectionState, "closed");
  await send("n-stream", "b");
  await waitFor("b in the inbox", async () => (await client.inbox()).items.length === 2);
  client.reconnect();
  await waitFor("item b after the reconnect", () => seen.includes("b"));
  await waitFor("the stream to open again", () => client.connectionState === "open");
  await send("n-stream", "c");
  await waitFor("item c", () => seen.includes("c"));
  assert.deepEqual(seen, ["a", "b", "c"]);
  stop();
  assert.equal(client.connectionState, "idle");
});

test("pages, counts and marks", { skip }, async () => {
  const client = createClient({ baseUrl: api, token: token("n-marks") });
  for (const k of ["m1", "m2", "m3"]) await send("n-marks", k);
  await waitFor("three items", async () => (await client.counts()).unread === 3);
  // Three notifications fan out in any order: the pages hold each item once.
  const p1 = await client.inbox({ limit: 2 });
  assert.equal(p1.items.length, 2);
  const p2 = await client.inbox({ limit: 2, cursor: p1.next_cursor });
  assert.equal(p2.items.length, 1);
  assert.equal(p2.next_cursor, null);
  assert.deepEqual([...p1.items, ...p2.items].map((i) => i.key).sort(), ["m1", "m2", "m3"]);
  assert.deepEqual(await client.markRead([p1.items[0].id]), { marked: 1 });
  assert.equal((await client.counts()).unread, 2);
  await client.markSeen();
  assert.equal((await client.counts()).unseen, 0);
  await client.archive([p2.items[0].id]);
  assert.deepEqual((await client.inbox({ filter: "archived" })).items.map((i) => i.key), [p2.items[0].key]);
  await client.markAllRead();
  assert.equal((await client.counts()).unread, 0);
  const prefs = await client.preferences();
  assert.ok(prefs.effective["comment.created"]);
  await client.saveQuietHours({ start: "22:00", end: "07:00" });
  assert.deepEqual((await client.quietHours()).quiet_hours, { start: "22:00", end: "07:00" });
});

test("a 401 asks refreshToken once and retries with its token", { skip }, async () => {
  let calls = 0;
  const expired = token("n-refresh", 60, Math.floor(Date.now() / 1000) - 3600);
  const client = createClient({ baseUrl: api, token: expired, refreshToken: () => (calls++, token("n-refresh")) });
  const c = await client.counts();
  assert.equal(c.unread, 0);
  assert.equal(calls, 1);
});

test("without a way to refresh, a 401 is a NotifydError and the stream stops at unauthorized", { skip }, async () => {
  const client = createClient({ baseUrl: api, token: "not-a-token", EventSource: null });
  await assert.rejects(client.counts(), (err) => err instanceof NotifydError && err.status === 401);
  const errors = [];
  client.subscribe({ error: (e) => errors.push(e) });
  await waitFor("unauthorized", () => client.connectionState === "unauthorized");
  assert.equal(errors[0].status, 401);
});

test("the stream's token expires: reauth, refreshToken, resumed with nothing missed", { skip }, async () => {
  let calls = 0;
  const client = createClient({ baseUrl: api, token: token("n-reauth", 3), EventSource: null, refreshToken: () => (calls++, token("n-reauth")) });
  const seen = [];
  const states = [];
  client.subscribe({ created: (it) => seen.push(it.key), state: (s) => states.push(s) });
  await waitFor("the refresh callback", () => calls >= 1);
  await waitFor("the stream open with the fresh token", () => client.connectionState === "open");
  await send("n-reauth", "after");
  await waitFor("an item after the refresh", () => seen.includes("after"));
  assert.deepEqual(seen, ["after"]);
  client.close();
});
