// A page with notifyd's live bell, toasts and preference center. Your backend
// mints the signed-in user's recipient token at /notifyd-token (see
// docs/inbox.md); notifyd runs at NOTIFYD_URL and lists this page's origin in
// http.allowed_origins.
import { createRoot } from "react-dom/client";
import { Bell, NotifydProvider, Preferences, Toaster, useNotifydStream, type InboxItem } from "@notifyd/react";
import "@notifyd/react/styles.css";
// `notifyd gen types -lang ts > src/notifiers.ts`: the params of every notifier.
import type { Notifiers } from "./notifiers";

const NOTIFYD_URL = new URL(location.href).searchParams.get("notifyd") ?? "http://127.0.0.1:8080";

// Called for the first token and again whenever it expires.
async function fetchToken(): Promise<string> {
  const res = await fetch("/notifyd-token", { credentials: "same-origin" });
  if (!res.ok) throw new Error(`notifyd token: HTTP ${res.status}`);
  return res.text();
}

// A toast typed by notifier: checking item.notifier narrows item.params to
// that notifier's params (a misspelt notifier or param fails tsc).
function Toast(item: InboxItem<Notifiers>, dismiss: () => void) {
  const from = item.notifier === "comment.created" ? item.params.author_name : item.actor;
  return (
    <>
      <span className="notifyd-title">{item.title}</span>
      {from && <span className="notifyd-body">from {from}</span>}
      <button type="button" className="notifyd-dismiss" aria-label={`Dismiss: ${item.title}`} onClick={dismiss}>
        <span aria-hidden="true">×</span>
      </button>
    </>
  );
}

function Connection() {
  const state = useNotifydStream();
  return (
    <span className="connection" data-state={state}>
      {state === "open" ? "Live" : state === "reconnecting" ? "Reconnecting…" : ""}
    </span>
  );
}

function App() {
  return (
    <NotifydProvider baseUrl={NOTIFYD_URL} getToken={fetchToken} refreshToken={fetchToken}>
      <header style={{ display: "flex", gap: 16, alignItems: "center", justifyContent: "space-between" }}>
        <h1>My app</h1>
        <Connection />
        <Bell />
      </header>
      <main>
        <Preferences />
      </main>
      <Toaster<Notifiers> renderToast={Toast} />
    </NotifydProvider>
  );
}

createRoot(document.getElementById("root")!).render(<App />);
