// Types of @notifyd/client for ESM importers. The one source is index.d.ts:
// this file re-exports it, as index.mjs re-exports index.js at run time, so
// ESM and CommonJS code see the same declarations (one InputError class, one
// Register interface to augment).
export * from "./index.js";
