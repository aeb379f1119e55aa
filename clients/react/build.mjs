// Builds dist/: the ES module and CommonJS forms of src/ (react and
// @notifyd/browser stay imports), the type declarations (tsc) and the
// stylesheet. Run by `npm run build` and before `npm pack`.
import { build } from "esbuild";
import { execFileSync } from "node:child_process";
import { copyFileSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";

rmSync("dist", { recursive: true, force: true });
mkdirSync("dist");
const common = {
  entryPoints: ["src/index.tsx"],
  bundle: true,
  target: "es2022",
  jsx: "automatic",
  external: ["react", "react/jsx-runtime", "@notifyd/browser"],
  logLevel: "warning",
};
await build({ ...common, format: "esm", outfile: "dist/index.js" });
await build({ ...common, format: "cjs", outfile: "dist/index.cjs" });
const tsc = createRequire(import.meta.url).resolve("typescript/bin/tsc");
execFileSync(process.execPath, [tsc, "-p", "."], { stdio: "inherit" });
// Declarations for node16/nodenext resolution: the ES module's name their
// files with extensions, and the CommonJS entry has CommonJS declarations.
const dts = readFileSync("dist/index.d.ts", "utf8");
writeFileSync("dist/index.d.ts", dts.replace('from "./store"', 'from "./store.js"'));
writeFileSync("dist/index.d.cts", dts.replace('from "./store"', 'from "./store.cjs"'));
copyFileSync("dist/store.d.ts", "dist/store.d.cts");
copyFileSync("src/styles.css", "dist/styles.css");
