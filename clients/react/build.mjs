// Builds dist/: the ES module and CommonJS forms of src/ (react and
// @notifyd/browser stay imports), the type declarations (tsc) and the
// stylesheet. Run by `npm run build` and before `npm pack`.
import { build } from "esbuild";
import { execFileSync } from "node:child_process";
import { copyFileSync, mkdirSync, rmSync } from "node:fs";
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
copyFileSync("dist/index.d.ts", "dist/index.d.cts");
copyFileSync("src/styles.css", "dist/styles.css");
