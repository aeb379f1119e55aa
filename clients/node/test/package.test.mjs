// The package as a user installs it: from its `npm pack` tarball and from
// its path, in a clean directory outside the repository; then required
// (CommonJS), imported (ESM) and type-checked there.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";

const root = process.cwd();
const tsc = path.join(root, "node_modules", "typescript", "bin", "tsc");

function sh(cwd, cmd, args) {
  return execFileSync(cmd, args, { cwd, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
}

function npm(cwd, ...args) {
  // --prefer-offline: pg, the peer dependency, comes from npm's cache when
  // `npm ci` has put it there.
  return sh(cwd, "npm", [...args, "--prefer-offline", "--no-audit", "--no-fund", "--loglevel=error"]);
}

const cjs = `const n = require("@notifyd/client");
const fake = { query: async () => ({ rows: [{ id: "x", duplicate: false }] }) };
n.send(fake, { notifier: "a", key: "k", recipients: ["u"] }).then((r) => {
  if (r.id !== "x" || typeof n.recipientToken !== "function" || !(new n.UnknownNotifierError("m") instanceof n.InputError)) process.exit(1);
  console.log("cjs ok");
});
`;
const esm = `import { send, InputError, UnknownNotifierError, recipientToken } from "@notifyd/client";
import { createRequire } from "node:module";
const required = createRequire(import.meta.url)("@notifyd/client");
if (required.InputError !== InputError) { console.error("two InputError classes"); process.exit(1); }
const r = await send({ query: async () => ({ rows: [{ id: "y", duplicate: true }] }) }, { notifier: "a", key: "k", topics: ["t"] });
if (r.id !== "y" || !(new UnknownNotifierError("m") instanceof InputError) || recipientToken("s", "u", 1).split(".").length !== 3) process.exit(1);
console.log("esm ok");
`;
const ts = `import { send, InputError, type Notification } from "@notifyd/client";
const n: Notification = { notifier: "a", key: "k", recipients: ["u"] };
export const p: Promise<{ id: string; duplicate: boolean }> = send({ query: async () => ({ rows: [] }) }, n);
export const e: string = new InputError("m", "f").field;
`;

function cleanApp(name) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `notifyd-${name}-`));
  fs.writeFileSync(path.join(dir, "package.json"), JSON.stringify({ name: "app", version: "1.0.0", private: true }));
  return dir;
}

function checkInstalled(dir) {
  fs.writeFileSync(path.join(dir, "use.cjs"), cjs);
  fs.writeFileSync(path.join(dir, "use.mjs"), esm);
  assert.equal(sh(dir, process.execPath, ["use.cjs"]).trim(), "cjs ok");
  assert.equal(sh(dir, process.execPath, ["use.mjs"]).trim(), "esm ok");
  for (const file of ["use.ts", "use.mts"]) {
    fs.writeFileSync(path.join(dir, file), ts);
    try {
      sh(dir, process.execPath, [tsc, "--noEmit", "--strict", "--module", "node16", "--moduleResolution", "node16", file]);
    } catch (err) {
      assert.fail(`tsc ${file} in ${dir}:\n${err.stdout}${err.stderr}`);
    }
  }
}

test("the tarball holds the library and its README, and installs in a clean directory", () => {
  const out = fs.mkdtempSync(path.join(os.tmpdir(), "notifyd-pack-"));
  const app = cleanApp("tarball");
  try {
    const [packed] = JSON.parse(npm(root, "pack", "--json", "--pack-destination", out));
    const files = packed.files.map((f) => f.path).sort();
    assert.deepEqual(files, ["README.md", "lib/index.d.mts", "lib/index.d.ts", "lib/index.js", "lib/index.mjs", "package.json"]);
    npm(app, "install", path.join(out, packed.filename));
    const installed = JSON.parse(fs.readFileSync(path.join(app, "node_modules", "@notifyd", "client", "package.json"), "utf8"));
    assert.equal(installed.version, packed.version);
    assert.ok(fs.existsSync(path.join(app, "node_modules", "pg")), "the peer dependency pg was not installed");
    checkInstalled(app);
  } finally {
    fs.rmSync(out, { recursive: true, force: true });
    fs.rmSync(app, { recursive: true, force: true });
  }
});

test("installs from its path in a clean directory", () => {
  const app = cleanApp("path");
  try {
    npm(app, "install", root);
    checkInstalled(app);
  } finally {
    fs.rmSync(app, { recursive: true, force: true });
  }
});

test("the README stands alone: no links into the repository", () => {
  const readme = fs.readFileSync(path.join(root, "README.md"), "utf8");
  const relative = [...readme.matchAll(/\]\((?!https:\/\/|#)([^)]*)\)/g)].map((m) => m[1]);
  assert.deepEqual(relative, [], "relative links break on the registry's page");
  const pkg = JSON.parse(fs.readFileSync(path.join(root, "package.json"), "utf8"));
  for (const field of ["name", "version", "license", "repository", "homepage", "description"]) {
    assert.ok(pkg[field], `package.json has no ${field}`);
  }
});
