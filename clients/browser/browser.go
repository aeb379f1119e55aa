// Package browser carries the source of @notifyd/browser, the headless
// recipient client (src/index.js), into the daemon: package web serves it at
// /ui/notifyd-client.js and the web components import it from there, so the
// components, @notifyd/react and an app's own code share one client.
package browser

import _ "embed"

// Source is src/index.js, the client's ES module as published (dist/index.js
// is the same code bundled; dist/index.cjs its CommonJS form).
//
//go:embed src/index.js
var Source []byte
