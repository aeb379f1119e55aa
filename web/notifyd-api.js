// notifyd-api.js — what the notifyd web components share, on top of the
// headless client @notifyd/browser (served beside them as notifyd-client.js
// and imported by relative URL, so a page loads both without knowing they
// exist): the API's error type and one JSON request helper.

import { NotifydError, apiURL, createClient, crossOriginHint, withTenant } from "./notifyd-client.js";

export { NotifydError, apiURL, createClient, crossOriginHint, withTenant };

/**
 * Calls the API with the recipient token: JSON in, JSON out. A refusal throws
 * a NotifydError with the API's error code and details; an aborted request
 * throws one whose message is "aborted".
 */
export function request({ endpoint, token, method, path, body, signal, keepalive = false }) {
  return createClient({ baseUrl: endpoint, token }).request(method, path, body, { signal, keepalive });
}
