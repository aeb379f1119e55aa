// @notifyd/react on a server: importing it touches no browser global, and
// every component renders its empty state with React 19 and React 18
// (testdata/react18), through the ES module and the CommonJS build.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createRequire } from "node:module";
import { build } from "esbuild";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(import.meta.url);

const page = (React, N) =>
  React.createElement(
    N.NotifydProvider,
    { baseUrl: "http://127.0.0.1:9", token: "t" },
    React.createElement(N.Bell),
    React.createElement(N.Inbox),
    React.createElement(N.Preferences),
    React.createElement(N.Toaster),
  );

function check(html) {
  assert.match(html, /class="notifyd-bell-button"[^>]*aria-label="Notifications"/);
  assert.match(html, /<h2[^>]*>Notifications<\/h2>/);
  assert.match(html, /role="region" aria-label="New notifications"/);
  assert.doesNotMatch(html, /notifyd-badge/);
}

test("no browser global is needed to import and render (React 19, ES module)", async () => {
  assert.equal(typeof window, "undefined");
  assert.equal(typeof document, "undefined");
  const React = await import("react");
  const { renderToString } = await import("react-dom/server");
  const N = await import("../dist/index.js");
  check(renderToString(page(React, N)));
});

test("the CommonJS build renders too (React 19)", () => {
  const React = require("react");
  const { renderToString } = require("react-dom/server");
  check(renderToString(page(React, require("../dist/index.cjs"))));
});

// React 18: the package bundled against testdata/react18's react and
// react-dom (npm ci there), rendered on the server.
test("React 18", async (t) => {
  const r18 = join(here, "..", "testdata", "react18", "node_modules");
  let React18;
  try {
    React18 = require(join(r18, "react"));
  } catch {
    if (process.env.CI) assert.fail("clients/react/testdata/react18/node_modules is missing: run `npm ci` there");
    t.skip("clients/react/testdata/react18/node_modules is missing: run `npm ci` there");
    return;
  }
  assert.match(React18.version, /^18\./);
  const dir = mkdtempSync(join(tmpdir(), "notifyd-react18-"));
  try {
    const entry = join(dir, "entry.mjs");
    writeFileSync(
      entry,
      `import * as React from "react"; import { renderToString } from "react-dom/server";
       import * as N from ${JSON.stringify(join(here, "..", "dist", "index.js"))};
       export const version = React.version;
       export const html = renderToString(React.createElement(N.NotifydProvider, { baseUrl: "http://127.0.0.1:9", token: "t" },
         React.createElement(N.Bell), React.createElement(N.Inbox), React.createElement(N.Preferences), React.createElement(N.Toaster)));`,
    );
    const react18 = {
      name: "react18",
      setup(b) {
        b.onResolve({ filter: /^react(-dom)?(\/.*)?$/ }, (args) => ({ path: require.resolve(args.path, { paths: [r18] }) }));
      },
    };
    const out = join(dir, "out.mjs");
    await build({ entryPoints: [entry], bundle: true, platform: "node", format: "esm", outfile: out, plugins: [react18], logLevel: "error",
      banner: { js: "import { createRequire as __cr } from 'node:module'; const require = __cr(import.meta.url);" } });
    const m = await import(out);
    assert.match(m.version, /^18\./);
    check(m.html);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

// The declarations resolve for a TypeScript consumer under node16/nodenext,
// from an ES module and from CommonJS (the bundler resolution the example
// uses is the lenient case).
test("types under nodenext, ESM and CommonJS", async () => {
  const { execFileSync } = await import("node:child_process");
  const { mkdirSync, symlinkSync } = await import("node:fs");
  const root = join(here, "..");
  const dir = mkdtempSync(join(tmpdir(), "notifyd-react-types-"));
  try {
    const nm = join(dir, "node_modules");
    mkdirSync(join(nm, "@notifyd"), { recursive: true });
    symlinkSync(root, join(nm, "@notifyd", "react"));
    symlinkSync(join(root, "..", "browser"), join(nm, "@notifyd", "browser"));
    for (const p of ["react", "@types", "csstype"]) symlinkSync(join(root, "node_modules", p), join(nm, p));
    writeFileSync(join(dir, "a.mts"), `import { Bell, InboxStore, type InboxItem } from "@notifyd/react";
import { createClient } from "@notifyd/browser";
type N = { "comment.created": { author_name: string } };
export const s = new InboxStore<N>(createClient<N>({}));
export const who = (i: InboxItem<N>) => (i.notifier === "comment.created" ? i.params.author_name : "");
export { Bell };
`);
    writeFileSync(join(dir, "b.cts"), `import R = require("@notifyd/react");
import B = require("@notifyd/browser");
export const s = new R.InboxStore(B.createClient({}));
`);
    writeFileSync(join(dir, "tsconfig.json"), JSON.stringify({
      compilerOptions: { module: "nodenext", moduleResolution: "nodenext", strict: true, noEmit: true, lib: ["es2022", "dom"], types: [] },
      files: ["a.mts", "b.cts"],
    }));
    execFileSync(process.execPath, [require.resolve("typescript/bin/tsc"), "-p", dir], { stdio: "pipe" });
  } catch (err) {
    assert.fail(String(err.stdout || err));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
