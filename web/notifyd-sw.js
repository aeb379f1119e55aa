// notifyd-sw.js — the service worker of notifyd's desktop notifications.
// notifyd serves it at /ui/notifyd-sw.js; <notifyd-inbox> registers it when
// the recipient enables desktop notifications. A page on another origin than
// notifyd serves a copy from its own origin (service workers are
// same-origin) and names it in the inbox's service-worker attribute.
//
// A push message's data is notifyd's JSON {"id", "notifier", "key", "title",
// "body", "url"} (decrypted by the browser). It is shown as a notification
// tagged notifier:key, so a newer message for the same key replaces the
// older one. Clicking it focuses a window already at its url, or opens one;
// only http(s) urls are opened.

self.addEventListener("install", () => self.skipWaiting());
self.addEventListener("activate", (event) => event.waitUntil(self.clients.claim()));

self.addEventListener("push", (event) => {
  let data = {};
  if (event.data) {
    try {
      data = event.data.json();
    } catch {
      data = { title: event.data.text() };
    }
  }
  const options = {
    body: data.body || "",
    data: { id: data.id || "", notifier: data.notifier || "", key: data.key || "", url: data.url || "" },
  };
  if (data.notifier && data.key) options.tag = data.notifier + ":" + data.key;
  const shown = self.registration.showNotification(data.title || "Notification", options);
  try {
    event.waitUntil(shown);
  } catch {
    // A push event made by a script (tests, DevTools) cannot be extended.
  }
});

function safeURL(raw) {
  if (!raw) return "";
  try {
    const u = new URL(raw, self.location.origin);
    return u.protocol === "http:" || u.protocol === "https:" ? u.href : "";
  } catch {
    return "";
  }
}

self.addEventListener("notificationclick", (event) => {
  event.notification.close();
  const url = safeURL(event.notification.data && event.notification.data.url);
  if (!url) return;
  event.waitUntil((async () => {
    const windows = await self.clients.matchAll({ type: "window", includeUncontrolled: true });
    for (const w of windows) {
      if (w.url === url && "focus" in w) return w.focus();
    }
    return self.clients.openWindow(url);
  })());
});
