// Builds dist/: the ES module and CommonJS forms of src/index.js (which the
// daemon also serves as it is) and their type declarations.
import { build } from "esbuild";
import { copyFileSync, mkdirSync, rmSync } from "node:fs";

rmSync("dist", { recursive: true, force: true });
mkdirSync("dist");
const common = { entryPoints: ["src/index.js"], bundle: true, target: "es2022", platform: "neutral", logLevel: "warning" };
await build({ ...common, format: "esm", outfile: "dist/index.js" });
await build({ ...common, format: "cjs", outfile: "dist/index.cjs" });
copyFileSync("src/index.d.ts", "dist/index.d.ts");
copyFileSync("src/index.d.ts", "dist/index.d.cts");
