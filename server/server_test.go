package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/config"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/internal/smtpcapture"
	"github.com/notifyd/notifyd/internal/testing/pgtest"
	"github.com/notifyd/notifyd/server"
	"github.com/notifyd/notifyd/server/servertest"
	"github.com/notifyd/notifyd/stores"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// emptyDB creates a database with nothing in it and returns its URL.
func emptyDB(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	name := fmt.Sprintf("notifyd_empty_%d", time.Now().UnixNano())
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), pgtest.URL(t))
		if err == nil {
			_, _ = c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
			c.Close(context.Background())
		}
	})
	cfg, err := pgx.ParseConfig(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Replace(pgtest.URL(t), "/"+cfg.Database+"?", "/"+name+"?", 1)
}

func TestRunRefusesPendingMigrationsAndMigrateIsIdempotent(t *testing.T) {
	t.Parallel()
	url := emptyDB(t)
	cfg := servertest.Config(t, "")
	cfg.Database.URL = url
	_, err := server.New(context.Background(), server.Options{Config: cfg, NoHTTP: true})
	if err == nil || !strings.Contains(err.Error(), "notifyd migrate") {
		t.Fatalf("server.New on an unmigrated database = %v, want a refusal naming `notifyd migrate`", err)
	}

	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	// Two replicas migrating at once, then once more: no error, same result.
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range errs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = stores.Migrate(context.Background(), pool, "", nil) }()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatalf("concurrent migrate: %v", err)
		}
	}
	if err := stores.Migrate(context.Background(), pool, "", nil); err != nil {
		t.Fatalf("second migrate: %v", err)
	}
	if err := stores.CheckMigrations(context.Background(), pool, ""); err != nil {
		t.Fatalf("after migrate: %v", err)
	}
	d, err := server.New(context.Background(), server.Options{Config: cfg, NoHTTP: true})
	if err != nil {
		t.Fatalf("server.New after migrate: %v", err)
	}
	d.Close()
}

func TestEndToEndSendFanOutReadInbox(t *testing.T) {
	t.Parallel()
	_, url := pgtest.NewDBURL(t)
	mailbox := smtpcapture.Start(t)
	cfg := servertest.Config(t, servertest.BaseConfig+fmt.Sprintf(`
  order.shipped:
    channels:
      in_app: {title: "Order {{.order}} shipped"}
      email: {subject: "Order {{.order}} shipped", text: "Hi {{recipient.Name}}, order {{.order}} is on its way."}
channels:
  email:
    from: "Shop <shop@shop.test>"
    smtp: {host: 127.0.0.1, port: %d}
`, mailbox.Port()))
	cfg.Database.URL = url
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d, err := server.New(context.Background(), server.Options{Config: cfg, Listener: ln, Logger: servertest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	base := "http://" + d.Addr()

	call := apiCaller(t, base)

	if code, _ := call("PUT", "/v1/recipients/u2", servertest.AdminToken, map[string]any{"email": "u2@example.test", "name": "Grace"}); code != 200 {
		t.Fatalf("PUT recipient = %d", code)
	}
	code, res := call("POST", "/v1/notifications", servertest.AdminToken, map[string]any{
		"notifier": "order.shipped", "key": "o-1", "actor": "u1",
		"recipients": []any{"u1", map[string]any{"id": "u2", "reason": "author"}}, "params": map[string]any{"order": "#42"}})
	if code != 202 || res["duplicate"] != false {
		t.Fatalf("POST = %d %v", code, res)
	}
	id := res["id"].(string)

	tok, err := notifyd.RecipientToken(servertest.TokenSecret, "u2", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	var items []any
	servertest.Eventually(t, 10*time.Second, "the item reaches u2's inbox", func() bool {
		_, inbox := call("GET", "/v1/inbox", tok, nil)
		items, _ = inbox["items"].([]any)
		return len(items) == 1
	})
	item := items[0].(map[string]any)
	if item["title"] != "Order #42 shipped" || item["reason"] != "author" || item["read_at"] != nil {
		t.Fatalf("item = %v", item)
	}
	msgs := mailbox.WaitFor(1, 10*time.Second)
	if len(msgs) != 1 || !strings.Contains(msgs[0].Text, "Hi Grace, order #42") {
		t.Fatalf("email = %+v", msgs)
	}
	servertest.Eventually(t, 10*time.Second, "the ledger says sent", func() bool {
		_, n := call("GET", "/v1/notifications/"+id, servertest.AdminToken, nil)
		for _, d := range n["deliveries"].([]any) {
			d := d.(map[string]any)
			if d["channel"] == "email" && d["status"] == "sent" {
				return true
			}
		}
		return false
	})
	// The actor u1 was dropped.
	tok1, _ := notifyd.RecipientToken(servertest.TokenSecret, "u1", time.Hour)
	if _, inbox := call("GET", "/v1/inbox", tok1, nil); len(inbox["items"].([]any)) != 0 {
		t.Fatal("the actor got an inbox item")
	}

	// Operators: metrics carry notifyd's and River's series; River UI is behind the admin token.
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metricsBody, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	t.Logf("river series: %v", riverLines(string(metricsBody)))
	for _, want := range []string{`notifyd_notifications_total{notifier="order.shipped",outcome="accepted"} 1`,
		`notifyd_deliveries_total{channel="email",status="sent"} 1`, `notifyd_send_duration_seconds_count{channel="email",outcome="ok"} 1`,
		"notifyd_stream_clients 0", `river_work_count_total{`} {
		if !strings.Contains(string(metricsBody), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	resp, err = http.Get(base + "/riverui/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Basic") {
		t.Fatalf("/riverui/ without credentials = %d %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}
	req, _ := http.NewRequest("GET", base+"/riverui/", nil)
	req.SetBasicAuth("admin", servertest.AdminToken)
	if resp, err = http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(page), "<html") {
		t.Fatalf("/riverui/ with the admin token = %d", resp.StatusCode)
	}
	// River UI is never framed (clickjacking its buttons) nor cached: its
	// page, its API, and its refusals.
	for _, path := range []string{"/riverui/", "/riverui/api/jobs?state=available", "/riverui/no-such-asset.js"} {
		for _, auth := range []bool{true, false} {
			req, _ := http.NewRequest("GET", base+path, nil)
			if auth {
				req.SetBasicAuth("admin", servertest.AdminToken)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			h := resp.Header
			if h.Get("X-Frame-Options") != "DENY" || !slices.Contains(h.Values("Content-Security-Policy"), "frame-ancestors 'none'") ||
				h.Get("Cache-Control") != "no-store" {
				t.Errorf("GET %s (credentials %v) = %d with X-Frame-Options %q, CSP %q, Cache-Control %q", path, auth,
					resp.StatusCode, h.Get("X-Frame-Options"), h.Values("Content-Security-Policy"), h.Get("Cache-Control"))
			}
		}
	}
	// A cross-site POST carrying the browser's Basic credentials is refused (CSRF).
	req, _ = http.NewRequest("POST", base+"/riverui/api/jobs/cancel", strings.NewReader(`{"ids":["1"]}`))
	req.SetBasicAuth("admin", servertest.AdminToken)
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	if resp, err = http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("cross-site POST to River UI = %d, want 403", resp.StatusCode)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run returned %v after a clean stop", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the daemon did not drain within 20 s")
	}
}

func riverLines(metrics string) []string {
	var out []string
	for _, l := range strings.Split(metrics, "\n") {
		if strings.HasPrefix(l, "river_work") && !strings.Contains(l, "_bucket") && len(out) < 6 {
			out = append(out, l)
		}
	}
	return out
}

// TestEmbeddedOnTheCallersMux: with NoListen the API is served by the
// caller, under a prefix of its own mux, with the caller's pool (left open
// by Close); New changes no process-wide setting.
func TestEmbeddedOnTheCallersMux(t *testing.T) {
	pool, url := pgtest.NewDBURL(t)
	cfg := servertest.Config(t, "")
	cfg.Database.URL = url
	gcBefore := debug.SetGCPercent(123)
	defer debug.SetGCPercent(gcBefore)
	srv, err := server.New(context.Background(), server.Options{Config: cfg, Pool: pool, NoListen: true,
		Logger: servertest.Logger(), DrainTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if got := debug.SetGCPercent(123); got != 123 {
		t.Errorf("server.New changed GOGC to %d: the embedding program owns it", got)
	}
	if srv.Addr() != "" {
		t.Errorf("Addr = %q with NoListen", srv.Addr())
	}
	mux := http.NewServeMux()
	mux.Handle("/notify/", http.StripPrefix("/notify", srv.Handler()))
	mux.HandleFunc("GET /app", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "the app") })
	app := httptest.NewServer(mux)
	defer app.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()

	res, err := srv.Client().Send(context.Background(), notifyd.Notification{Notifier: "comment.created", Key: "c-1",
		Recipients: []notifyd.Recipient{{ID: "u2"}}, Params: map[string]any{"post_title": "Hi", "author_name": "Ada"}})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := notifyd.RecipientToken(cfg.HTTP.TokenSecret, "u2", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	servertest.Eventually(t, 15*time.Second, "u2's inbox item through the caller's mux", func() bool {
		req, _ := http.NewRequest("GET", app.URL+"/notify/v1/inbox", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode == http.StatusOK && strings.Contains(string(b), "Ada commented on Hi")
	})
	if resp, err := http.Get(app.URL + "/app"); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("the caller's own route: %v %v", resp, err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	srv.Close()
	// The caller's pool outlives the server.
	var id string
	if err := pool.QueryRow(context.Background(), `SELECT id::text FROM notify_notifications WHERE id = $1`, res.ID).Scan(&id); err != nil {
		t.Fatalf("the caller's pool after Close: %v", err)
	}
}

// TestNewRefusesBadChannels: a channel that cannot register, or a section
// a registered channel refuses, stops New before it connects anywhere.
func TestNewRefusesBadChannels(t *testing.T) {
	t.Parallel()
	cfg := servertest.Config(t, "")
	dup := channels.Plugin{Name: "email", PerRecipient: true, Open: func(*channels.Setup) (any, error) { return nil, nil }}
	if _, err := server.New(context.Background(), server.Options{Config: cfg, Channels: []channels.Plugin{dup}}); err == nil ||
		!strings.Contains(err.Error(), "registered twice") {
		t.Errorf("New with a second email channel = %v", err)
	}
	bad, err := config.Parse("bad.yaml", []byte("channels:\n  email: {from: nobody}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := server.New(context.Background(), server.Options{Config: bad}); err == nil ||
		!strings.Contains(err.Error(), "bad.yaml:2: channels.email.from") {
		t.Errorf("New with a bad channels.email = %v", err)
	}
}

// apiCaller returns a function that calls the daemon's API at base with a
// bearer token and a JSON body (nil for none), returning the status and the
// decoded JSON answer.
func apiCaller(t *testing.T, base string) func(method, path, token string, body any) (int, map[string]any) {
	return func(method, path, token string, body any) (int, map[string]any) {
		t.Helper()
		var rd io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			rd = bytes.NewReader(b)
		}
		req, _ := http.NewRequest(method, base+path, rd)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}
}
