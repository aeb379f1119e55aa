// The client against a real notifyd, connected as a role that holds only
// notifyd_app: clients/clients_test.go starts the daemon and runs `npm test`
// with the URLs in the environment (see env.ts).
import { test, after } from "node:test";
import assert from "node:assert/strict";
import {
  send,
  cancel,
  subscribe,
  unsubscribe,
  putRecipient,
  recipientToken,
  InputError,
  UnknownNotifierError,
  NotInTransactionError,
} from "@notifyd/client";
import { app, owner, inTx, count, waitFor, api, tokenSecret } from "./env";

const params = { post_title: "Hello", author_name: "Ada" };

after(async () => {
  await app.end();
  await owner.end();
});

test("the app's row and the send roll back together", async () => {
  const res = await inTx(async (c) => {
    await c.query("INSERT INTO comments (id, body) VALUES ($1, $2)", [1001, "rolled back"]);
    const res = await send(c, { notifier: "comment.created", key: "node-rollback", recipients: ["node-u1"], params });
    assert.equal(res.duplicate, false);
    return res;
  }, false);
  assert.equal(await count("SELECT 1 FROM comments WHERE id = $1", [1001]), 0);
  assert.equal(await count("SELECT 1 FROM notify_notifications WHERE id = $1", [res.id]), 0);
  assert.equal(await count("SELECT 1 FROM river_job WHERE args->>'notification_id' = $1", [res.id]), 0);
  // A later send of the same pair is new: the rolled-back one never existed.
  const again = await inTx((c) => send(c, { notifier: "comment.created", key: "node-rollback", recipients: ["node-u1"], params }));
  assert.equal(again.duplicate, false);
  assert.notEqual(again.id, res.id);
});

test("the app's row and the send commit together, and the inbox item appears", async () => {
  const res = await inTx(async (c) => {
    await c.query("INSERT INTO comments (id, body) VALUES ($1, $2)", [1002, "committed"]);
    return send(c, {
      notifier: "comment.created",
      key: "node-commit",
      recipients: [{ id: "node-u2", reason: "author" }, "node-u3"],
      actor: "node-u9",
      params,
    });
  });
  assert.match(res.id, /^[0-9a-f]{8}-[0-9a-f]{4}-7/);
  assert.equal(await count("SELECT 1 FROM comments WHERE id = $1", [1002]), 1);
  const item = await waitFor("SELECT title, reason FROM notify_inbox WHERE recipient = $1 AND key = $2", ["node-u2", "node-commit"]);
  assert.equal(item.title, "Ada commented on Hello");
  assert.equal(item.reason, "author");
  await waitFor("SELECT 1 FROM notify_inbox WHERE recipient = $1 AND key = $2", ["node-u3", "node-commit"]);
});

test("a duplicate returns the first id", async () => {
  const first = await inTx((c) => send(c, { notifier: "comment.created", key: "node-dup", recipients: ["node-u4"], params }));
  const again = await inTx((c) => send(c, { notifier: "comment.created", key: "node-dup", recipients: ["node-u5"], params }));
  assert.deepEqual(again, { id: first.id, duplicate: true });
  assert.equal(await count("SELECT 1 FROM notify_notifications WHERE key = $1", ["node-dup"]), 1);
});

test("send refuses a pg.Pool, and a client outside a transaction, and writes nothing", async () => {
  await assert.rejects(
    // The types refuse a pool too (typecheck.test.ts); this is the run-time check.
    send(app as any, { notifier: "comment.created", key: "node-pool", recipients: ["node-u1"], params }),
    (err: unknown) => {
      assert.ok(err instanceof NotInTransactionError, String(err));
      assert.match(err.message, /pg\.Pool, which cannot hold your transaction/);
      return true;
    },
  );
  const c = await app.connect();
  try {
    await assert.rejects(
      send(c, { notifier: "comment.created", key: "node-pool", recipients: ["node-u1"], params }),
      (err: unknown) => {
        assert.ok(err instanceof NotInTransactionError, String(err));
        assert.match(err.message, /not in a transaction/);
        return true;
      },
    );
    assert.equal(await count("SELECT 1 FROM notify_notifications WHERE key = $1", ["node-pool"]), 0);
    // An un-awaited BEGIN is queued ahead of the send: that is a transaction.
    const begin = c.query("BEGIN");
    const res = send(c, { notifier: "comment.created", key: "node-pool", recipients: ["node-u1"], params });
    await begin;
    await res;
    await c.query("ROLLBACK");
    // Opting in sends on its own.
    const alone = await send(c, { notifier: "comment.created", key: "node-pool", recipients: ["node-u1"], params }, { allowAutocommit: true });
    assert.equal(alone.duplicate, false);
  } finally {
    c.release();
  }
  assert.equal(await count("SELECT 1 FROM notify_notifications WHERE key = $1", ["node-pool"]), 1);
});

test("an unknown notifier is an UnknownNotifierError", async () => {
  await assert.rejects(
    inTx((c) => send(c, { notifier: "no.such", key: "node-unknown", recipients: ["node-u1"] })),
    (err: unknown) => {
      assert.ok(err instanceof UnknownNotifierError, String(err));
      assert.ok(err instanceof InputError);
      assert.equal(err.name, "UnknownNotifierError");
      assert.equal(err.field, "notifier");
      assert.equal(err.sqlstate, "22023");
      assert.match(err.message, /unknown notifier "no.such"/);
      assert.equal((err.cause as { code: string }).code, "22023");
      return true;
    },
  );
  assert.equal(await count("SELECT 1 FROM notify_notifications WHERE key = $1", ["node-unknown"]), 0);
});

test("a notification of a tenant carries it; an unknown tenant is an InputError on tenant", async () => {
  await inTx((c) => send(c, { notifier: "comment.created", key: "node-tenant", recipients: ["node-u1"], params, tenant: "acme" }));
  assert.equal(await count("SELECT 1 FROM notify_notifications WHERE key = $1 AND tenant = 'acme'", ["node-tenant"]), 1);
  await assert.rejects(
    inTx((c) => send(c, { notifier: "comment.created", key: "node-tenant-2", recipients: ["node-u1"], params, tenant: "nope" })),
    (err: unknown) => {
      assert.ok(err instanceof InputError && !(err instanceof UnknownNotifierError), String(err));
      assert.equal(err.field, "tenant");
      assert.equal(err.sqlstate, "22023");
      return true;
    },
  );
  assert.equal(await count("SELECT 1 FROM notify_notifications WHERE key = $1", ["node-tenant-2"]), 0);
});

test("malformed input is an InputError naming the field", async () => {
  const cases: Array<[() => Promise<unknown>, string, RegExp, string?]> = [
    [() => inTx((c) => send(c, { notifier: "comment.created", key: "node-bad", recipients: ["node-u1", { id: "" }], params })),
      "recipients[1].id", /^recipients\[1\]\.id: is required$/],
    [() => inTx((c) => send(c, { notifier: "comment.created", key: "node-bad", recipients: ["node-u1"], params: { post_title: "x" } })),
      "params", /^comment\.created: params \/author_name: missing required property$/, "/author_name"],
    [() => inTx((c) => send(c, { notifier: "comment.created", key: "", recipients: ["node-u1"], params })),
      "key", /^key: is required$/],
    [() => inTx((c) => send(c, { notifier: "comment.created", key: "node-bad", params })),
      "recipients", /^recipients: give at least one recipient or topic$/],
    [() => inTx((c) => subscribe(c, "node-topic", "node-u1", "two words")), "reason", /^reason: want one word/],
    [() => inTx((c) => putRecipient(c, "node-p1", { email: "not an address" })), "email", /^email: /],
    [() => inTx((c) => putRecipient(c, "node-p1", { nickname: "x" } as any)), "nickname", /^nickname: unknown field$/],
  ];
  for (const [call, field, message, detail] of cases) {
    await assert.rejects(call(), (err: unknown) => {
      assert.ok(err instanceof InputError && !(err instanceof UnknownNotifierError), String(err));
      assert.equal(err.field, field);
      assert.match(err.message, message);
      assert.equal(err.sqlstate, "22023");
      if (detail !== undefined) {
        assert.equal(err.detail, detail);
      }
      return true;
    });
  }
  assert.equal(await count("SELECT 1 FROM notify_notifications WHERE key = $1", ["node-bad"]), 0);
  assert.equal(await count("SELECT 1 FROM notify_recipients WHERE id = $1", ["node-p1"]), 0);
});

test("putRecipient writes the profile in the transaction", async () => {
  await inTx((c) => putRecipient(c, "node-p2", { email: "ada@example.com", timezone: "Europe/Paris", data: { plan: "pro" } }), false);
  assert.equal(await count("SELECT 1 FROM notify_recipients WHERE id = $1", ["node-p2"]), 0);
  await inTx((c) => putRecipient(c, "node-p2", { email: "ada@example.com", timezone: "Europe/Paris", data: { plan: "pro" } }));
  await inTx((c) => putRecipient(c, "node-p2", { name: "Ada", timezone: null }));
  const row = (await owner.query("SELECT email, name, timezone, data FROM notify_recipients WHERE id = $1", ["node-p2"])).rows[0];
  assert.deepEqual(row, { email: "ada@example.com", name: "Ada", timezone: null, data: { plan: "pro" } });
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
  assert.equal(await inTx((c) => cancel(c, "comment.created", "node-topic-1")), 0);
});

test("a minted recipient token reads the inbox", async () => {
  await inTx((c) => send(c, { notifier: "comment.created", key: "node-token", recipients: ["node-u7"], params }));
  await waitFor("SELECT 1 FROM notify_inbox WHERE recipient = $1 AND key = $2", ["node-u7", "node-token"]);
  const token = recipientToken(tokenSecret, "node-u7", 600);
  const res = await fetch(`${api}/v1/inbox`, { headers: { Authorization: `Bearer ${token}` } });
  const body = (await res.json()) as { items: Array<{ key: string; title: string }> };
  assert.equal(res.status, 200, JSON.stringify(body));
  assert.deepEqual(body.items.map((i) => [i.key, i.title]), [["node-token", "Ada commented on Hello"]]);

  const claims = JSON.parse(Buffer.from(token.split(".")[1], "base64url").toString());
  assert.equal(claims.sub, "node-u7");
  assert.equal(claims.exp - claims.iat, 600);

  // The signature is checked: another secret, or an expired token, is refused.
  for (const bad of [
    recipientToken(tokenSecret + "x", "node-u7", 600),
    recipientToken(tokenSecret, "node-u7", 60, new Date(Date.now() - 3600_000)),
  ]) {
    const r = await fetch(`${api}/v1/inbox`, { headers: { Authorization: `Bearer ${bad}` } });
    assert.equal(r.status, 401);
    await r.body?.cancel();
  }
});

test("a tenant token reads only its tenant", async () => {
  await owner.query("INSERT INTO notify_tenants (id, name) VALUES ('globex', 'Globex') ON CONFLICT (id) DO NOTHING");
  await inTx(async (c) => {
    await send(c, { notifier: "comment.created", key: "node-tt-acme", recipients: ["node-tt"], params, tenant: "acme" });
    await send(c, { notifier: "comment.created", key: "node-tt-globex", recipients: ["node-tt"], params, tenant: "globex" });
  });
  for (const key of ["node-tt-acme", "node-tt-globex"]) {
    await waitFor("SELECT 1 FROM notify_inbox WHERE recipient = $1 AND key = $2", ["node-tt", key]);
  }
  const keys = async (token: string, query = ""): Promise<[number, string[]]> => {
    const res = await fetch(`${api}/v1/inbox${query}`, { headers: { Authorization: `Bearer ${token}` } });
    const body = (await res.json()) as { items?: Array<{ key: string }> };
    return [res.status, (body.items ?? []).map((i) => i.key).sort()];
  };
  const token = recipientToken(tokenSecret, "node-tt", 600, { tenant: "acme" });
  assert.equal(JSON.parse(Buffer.from(token.split(".")[1], "base64url").toString()).tenant, "acme");
  assert.deepEqual(await keys(token), [200, ["node-tt-acme"]]);
  assert.equal((await keys(token, "?tenant=globex"))[0], 403);
  // Without the claim the token reads every tenant's items.
  assert.deepEqual(await keys(recipientToken(tokenSecret, "node-tt", 600)), [200, ["node-tt-acme", "node-tt-globex"]]);
});

test("recipientToken refuses what the daemon would", () => {
  for (const [call, field] of [
    [() => recipientToken("", "u1", 60), "secret"],
    [() => recipientToken("s", "", 60), "recipient"],
    [() => recipientToken("s", "x".repeat(256), 60), "recipient"],
    [() => recipientToken("s", "u1", 0), "ttl"],
    [() => recipientToken("s", "u1", 60, { tenant: "" }), "tenant"],
    [() => recipientToken("s", "u1", 60, { tenant: "a\nb" }), "tenant"],
    [() => recipientToken("s", "u1", 60, { tenant: "x".repeat(256) }), "tenant"],
  ] as Array<[() => string, string]>) {
    assert.throws(call, (err: unknown) => err instanceof InputError && err.field === field && err.sqlstate === "");
  }
});
