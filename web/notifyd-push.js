// notifyd-push.js — desktop notifications for <notifyd-inbox>: registers the
// service worker, subscribes the browser with the daemon's VAPID key and
// registers the subscription with the recipient API. Imported by the inbox
// by relative URL; a page may import it itself to offer the same elsewhere.

import { NotifydError, apiURL, request } from "./notifyd-api.js";

/** Whether this browser can receive push notifications at all. */
export function pushSupported() {
  return typeof navigator !== "undefined" && "serviceWorker" in navigator &&
    typeof window !== "undefined" && "PushManager" in window && "Notification" in window;
}

/** The service worker notifyd serves beside the components. */
export function defaultServiceWorker(endpoint) {
  return new URL(apiURL(endpoint, "/ui/notifyd-sw.js"), document.baseURI).href;
}

/** Unpadded base64url to bytes (the applicationServerKey). */
function keyBytes(b64url) {
  const b64 = b64url.replace(/-/g, "+").replace(/_/g, "/") + "=".repeat((4 - (b64url.length % 4)) % 4);
  return Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
}

function sameKey(buf, b64url) {
  if (!buf) return false;
  const a = new Uint8Array(buf);
  const b = keyBytes(b64url);
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

function failure(code, err) {
  const message = (err && err.message) || String(err);
  return new NotifydError(0, { error: { code, message } });
}

/** Resolves once reg has an active worker. */
function activated(reg) {
  if (reg.active) return Promise.resolve(reg);
  const sw = reg.installing || reg.waiting;
  return new Promise((resolve, reject) => {
    sw.addEventListener("statechange", () => {
      if (sw.state === "activated") resolve(reg);
      if (sw.state === "redundant") reject(new Error("the service worker was not installed"));
    });
  });
}

/**
 * Asks for permission, registers the service worker (serviceWorker, or
 * notifyd's /ui/notifyd-sw.js, which must then be on the page's origin),
 * subscribes with the VAPID key from GET /v1/push-subscriptions/vapid-key and
 * POSTs the subscription. Resolves to {id, endpoint}; rejects with a
 * NotifydError (code "unsupported", "permission_denied", "push_unavailable",
 * or the API's).
 */
export async function enablePush({ endpoint, token, serviceWorker }) {
  if (!pushSupported()) throw failure("unsupported", "this browser cannot show push notifications");
  const permission = await Notification.requestPermission();
  if (permission !== "granted") throw failure("permission_denied", "desktop notifications were not allowed");
  let reg;
  try {
    reg = await activated(await navigator.serviceWorker.register(serviceWorker || defaultServiceWorker(endpoint)));
  } catch (err) {
    throw failure("push_unavailable", err);
  }
  const { public_key: key } = await request({ endpoint, token, method: "GET", path: "/v1/push-subscriptions/vapid-key" });
  let sub;
  try {
    sub = await reg.pushManager.getSubscription();
    if (sub && !sameKey(sub.options && sub.options.applicationServerKey, key)) {
      await sub.unsubscribe(); // subscribed for another application server key
      sub = null;
    }
    if (!sub) sub = await reg.pushManager.subscribe({ userVisibleOnly: true, applicationServerKey: keyBytes(key) });
  } catch (err) {
    throw failure("push_unavailable", err);
  }
  const json = sub.toJSON();
  const res = await request({
    endpoint, token, method: "POST", path: "/v1/push-subscriptions",
    body: { endpoint: json.endpoint, expirationTime: json.expirationTime ?? null, keys: json.keys },
  });
  return { id: res.id, endpoint: json.endpoint };
}

/**
 * Unsubscribes this browser and deletes its subscription from the API.
 * Resolves to true when there was one.
 */
export async function disablePush({ endpoint, token, serviceWorker }) {
  if (!pushSupported()) return false;
  const reg = await navigator.serviceWorker.getRegistration(serviceWorker || defaultServiceWorker(endpoint));
  const sub = reg && (await reg.pushManager.getSubscription());
  if (!sub) return false;
  const list = await request({ endpoint, token, method: "GET", path: "/v1/push-subscriptions" });
  for (const s of list.subscriptions || []) {
    if (s.endpoint === sub.endpoint) {
      await request({ endpoint, token, method: "DELETE", path: "/v1/push-subscriptions/" + encodeURIComponent(s.id) });
    }
  }
  await sub.unsubscribe();
  return true;
}
