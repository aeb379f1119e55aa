// The types: `notifyd gen types -lang ts` output registered with the
// package types every send (a misspelt notifier or a wrong param does not
// compile), and a pg.Pool is refused at compile time. tsc checks files
// written next to the package (so "@notifyd/client" resolves to this
// package through its exports map), once as CommonJS and once as ESM.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { typesDir } from "./env";

const root = process.cwd();
const tsc = path.join(root, "node_modules", "typescript", "bin", "tsc");

function use(ext: "ts" | "mts"): string {
  return `import { Pool, PoolClient, Client } from "pg";
import { send, cancel, recipientToken, InputError, type TxClient } from "@notifyd/client";
import "./register${ext === "mts" ? ".mjs" : ""}";

declare const pool: Pool;
declare const client: PoolClient;
declare const plain: Client;
const ok = { notifier: "comment.created", key: "k", recipients: ["u1"], params: { post_title: "a", author_name: "b" } } as const;

export async function f(): Promise<void> {
  await send(client, { notifier: "comment.created", key: "k", recipients: ["u1", { id: "u2", reason: "author" }], params: { post_title: "a", author_name: "b", url: "/p" } });
  await send(plain, ok);
  await send<"comment.created">(client, { notifier: "comment.created", key: "k", topics: ["t"], params: { post_title: "a", author_name: "b" } });
  await send(client, { notifier: "team.joined", key: "k", recipients: ["u1"] });
  await send(client, { notifier: "team.joined", key: "k", recipients: ["u1"], params: { team: "x" } });
  const tx: TxClient = client;
  void tx;
  const n: number | null = await cancel(client, "comment.created", "k");
  void n;
  const t: string = recipientToken("secret", "u1", 600);
  void t;
  const e = new InputError("m", "f");
  const field: string = e.field;
  void field;
  // @ts-expect-error a pg.Pool cannot hold the caller's transaction
  await send(pool, ok);
  // @ts-expect-error a notifier that is not in the config
  await send(client, { notifier: "comment.craeted", key: "k", recipients: ["u1"], params: { post_title: "a", author_name: "b" } });
  // @ts-expect-error a param of the wrong type
  await send(client, { notifier: "comment.created", key: "k", recipients: ["u1"], params: { post_title: 1, author_name: "b" } });
  // @ts-expect-error a misspelt param
  await send(client, { notifier: "comment.created", key: "k", recipients: ["u1"], params: { post_titel: "a", author_name: "b" } });
  // @ts-expect-error params are required when the notifier has required params
  await send(client, { notifier: "comment.created", key: "k", recipients: ["u1"] });
  // @ts-expect-error cancel takes a notifier of the config
  await cancel(client, "comment.craeted", "k");
}
`;
}

function register(ext: "ts" | "mts"): string {
  return `import type { Notifiers } from "./notifiers${ext === "mts" ? ".js" : ""}";
declare module "@notifyd/client" {
  interface Register {
    notifiers: Notifiers;
  }
}
`;
}

const untyped = `import { PoolClient } from "pg";
import { send } from "@notifyd/client";
declare const client: PoolClient;
export const p = send(client, { notifier: "anything.at.all", key: "k", recipients: ["u1"], params: { n: 1 } });
export const q = send(client, { notifier: "no.params", key: "k", topics: ["t"] });
`;

function tscIn(dir: string, files: string[]): { ok: boolean; out: string } {
  try {
    const out = execFileSync(
      process.execPath,
      [tsc, "--noEmit", "--strict", "--target", "es2022", "--module", "node16", "--moduleResolution", "node16", "--types", "node", ...files],
      { cwd: dir, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] },
    );
    return { ok: true, out };
  } catch (err) {
    const e = err as { stdout?: string; stderr?: string };
    return { ok: false, out: `${e.stdout ?? ""}${e.stderr ?? ""}` };
  }
}

test("generated notifier types type send, and a pool is refused at compile time", () => {
  const dir = fs.mkdtempSync(path.join(root, ".typecheck-"));
  try {
    fs.copyFileSync(path.join(typesDir, "notifiers.ts"), path.join(dir, "notifiers.ts"));
    for (const ext of ["ts", "mts"] as const) {
      fs.writeFileSync(path.join(dir, `register.${ext}`), register(ext));
      fs.writeFileSync(path.join(dir, `use.${ext}`), use(ext));
      const r = tscIn(dir, ["notifiers.ts", `register.${ext}`, `use.${ext}`]);
      assert.ok(r.ok, `tsc (${ext}):\n${r.out}`);
    }
    fs.writeFileSync(path.join(dir, "untyped.ts"), untyped);
    const r = tscIn(dir, ["untyped.ts"]);
    assert.ok(r.ok, `tsc (no registered notifiers):\n${r.out}`);
    // And the refusals are real: without @ts-expect-error tsc fails.
    fs.writeFileSync(path.join(dir, "wrong.ts"), use("ts").replace(/\s*\/\/ @ts-expect-error[^\n]*/g, ""));
    const w = tscIn(dir, ["notifiers.ts", "register.ts", "wrong.ts"]);
    assert.ok(!w.ok, "tsc accepted the wrong calls");
    for (const want of ["Pool", '"comment.craeted"', "post_titel"]) {
      assert.ok(w.out.includes(want), `tsc's errors do not mention ${want}:\n${w.out}`);
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test("the ESM declarations are the CommonJS ones, re-exported: one source", () => {
  // Nothing but comments and the one re-export: a declaration written into
  // index.d.mts would be a second source that could drift from index.d.ts.
  const esm = fs.readFileSync(path.join(root, "lib", "index.d.mts"), "utf8");
  const code = esm.replace(/^\s*\/\/[^\n]*$/gm, "").trim();
  assert.equal(code, 'export * from "./index.js";', "lib/index.d.mts must only re-export lib/index.d.ts");
});

test("the declarations declare exactly what CommonJS and ESM export", async () => {
  const dts = fs.readFileSync(path.join(root, "lib", "index.d.ts"), "utf8");
  const declared = [...dts.matchAll(/^export declare (?:function|class) (\w+)/gm)].map((m) => m[1]).sort();
  const cjs = Object.keys(require("@notifyd/client")).sort();
  const esm = Object.keys(await import("@notifyd/client")).filter((k) => k !== "default").sort();
  assert.deepEqual(cjs, declared);
  assert.deepEqual(esm, declared);
});
