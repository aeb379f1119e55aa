package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/notifyd/notifyd/cmd/notifyd/internal/devmode"

	"github.com/notifyd/notifyd/internal/testing/pgtest"
	"github.com/notifyd/notifyd/server/servertest"
)

// syncBuffer is a bytes.Buffer safe for the command writing while the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// notifyd dev against a configured database: it migrates, runs the daemon,
// prints the URLs and tokens, captures email on /dev/ with the delivery log,
// serves the inbox demo with a working token, sends a sample notification
// from POST /dev/send, and stops cleanly.
func TestDevCommand(t *testing.T) {
	t.Parallel()
	_, url := pgtest.NewDBURL(t)
	dir := t.TempDir()
	// The config's address is busy: -listen moves the daemon off it.
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	cfg := writeConfig(t, `
database: {url: "`+url+`"}
http: {listen: "`+busy.Addr().String()+`"}
notifiers:
  comment.created:
    params: {type: object, properties: {post_title: {type: string}}}
    example: {post_title: Hello}
    channels:
      in_app: {title: "New comment on {{.post_title}}"}
      email: {subject: "New comment on {{.post_title}}", text: "Hi {{recipient.Name}}"}
channels:
  email: {from: "Dev <dev@dev.test>", smtp: {host: 127.0.0.1, port: 1}}
`)
	var out, errs syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- (&Main{Stdout: &out, Stderr: &errs}).Run(ctx, []string{"dev", "-config", cfg, "-dir", dir, "-listen", "127.0.0.1:0"})
	}()
	defer func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("dev returned %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Error("dev did not stop within 20 s of its context ending")
		}
	}()

	apiRE := regexp.MustCompile(`API:\s+(http://\S+)/v1/`)
	var base string
	servertest.Eventually(t, 30*time.Second, "dev prints its API URL", func() bool {
		if m := apiRE.FindStringSubmatch(out.String()); m != nil {
			base = m[1]
		}
		return base != ""
	})
	// Every route answers only loopback Host headers (DNS rebinding).
	for _, path := range []string{"/dev/", "/dev/demo", "/v1/inbox", "/healthz"} {
		req, _ := http.NewRequest("GET", base+path, nil)
		req.Host = "rebind.attacker.example"
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusMisdirectedRequest {
			t.Errorf("GET %s with Host rebind.attacker.example = %d, want 421", path, resp.StatusCode)
		}
	}
	for _, want := range []string{"captured email:", "inbox demo:", "admin token:", "token for u2:", "token secret:", "database:", "email goes to:", "demo recipients:", "database migrated", "curl -s -X POST"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("dev output lacks %q", want)
		}
	}
	var secrets devmode.Secrets
	b, err := os.ReadFile(filepath.Join(dir, devmode.SecretsFile))
	if err != nil || json.Unmarshal(b, &secrets) != nil || secrets.AdminToken == "" {
		t.Fatalf("dev secrets: %s (%v)", b, err)
	}

	do := func(method, path, token, contentType, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(raw)
	}
	// The demo recipients come with addresses, so the first send shows an email.
	if code, body := do("GET", "/v1/recipients/u2", secrets.AdminToken, "", ""); code != 200 ||
		!strings.Contains(body, `"email":"u2@example.test"`) {
		t.Fatalf("GET u2's seeded profile = %d %s", code, body)
	}
	if code, body := do("POST", "/dev/send", "", "text/plain", "x"); code != http.StatusUnsupportedMediaType {
		t.Fatalf("POST /dev/send as a form = %d %s; only JSON is accepted", code, body)
	}
	if code, body := do("POST", "/dev/send", "", "application/json", "{}"); code != http.StatusAccepted {
		t.Fatalf("POST /dev/send = %d %s", code, body)
	}
	var page string
	servertest.Eventually(t, 20*time.Second, "the /dev/ page shows the email and its sent delivery", func() bool {
		_, page = do("GET", "/dev/", "", "", "")
		return strings.Contains(page, "Captured email (1)") && strings.Contains(page, "<td>sent</td>")
	})
	if !strings.Contains(page, "New comment on Hello") || !strings.Contains(page, "Hi Grace") {
		t.Fatalf("captured email not rendered on /dev/:\n%s", page)
	}
	// The captured email's one-click unsubscribe link points at the dev
	// server and works there: the page, then the POST, then the rule.
	linkRE := regexp.MustCompile(`<a class="unsubscribe" href="(http://[^"]+)"`)
	lm := linkRE.FindStringSubmatch(page)
	if lm == nil || !strings.HasPrefix(lm[1], base+"/v1/unsubscribe/") {
		t.Fatalf("no unsubscribe link to %s on /dev/:\n%s", base, page)
	}
	unsubPath := strings.TrimPrefix(lm[1], base)
	if code, body := do("GET", unsubPath, "", "", ""); code != 200 || !strings.Contains(body, `<form method="post">`) {
		t.Fatalf("GET the unsubscribe link = %d %s", code, body)
	}
	if code, body := do("POST", unsubPath, "", "application/x-www-form-urlencoded", "List-Unsubscribe=One-Click"); code != 200 {
		t.Fatalf("POST the unsubscribe link = %d %s", code, body)
	}
	if code, body := do("GET", "/v1/recipients/u2/preferences", secrets.AdminToken, "", ""); code != 200 ||
		!strings.Contains(body, `"channel":"email","mode":"off"`) {
		t.Fatalf("u2's preferences after the unsubscribe = %d %s", code, body)
	}
	code, demo := do("GET", "/dev/demo", "", "", "")
	tokRE := regexp.MustCompile(`token for u2:\s+(\S+)`)
	m := tokRE.FindStringSubmatch(out.String())
	if code != 200 || m == nil || !strings.Contains(demo, m[1]) || !strings.Contains(demo, "notifyd-inbox") {
		t.Fatalf("GET /dev/demo = %d; want the inbox component with u2's printed token", code)
	}
	if code, body := do("GET", "/v1/inbox", m[1], "", ""); code != 200 || !strings.Contains(body, "New comment on Hello") {
		t.Fatalf("u2's inbox with the printed token = %d %s", code, body)
	}
}

// notifyd dev refuses to listen anywhere but loopback, before it starts
// anything.
func TestDevRefusesNonLoopbackListen(t *testing.T) {
	t.Parallel()
	for _, listen := range []string{"0.0.0.0:0", ":0", "[::]:0"} {
		cfg := writeConfig(t, "http: {listen: \""+listen+"\"}\n")
		dir := t.TempDir()
		var out, errs syncBuffer
		err := (&Main{Stdout: &out, Stderr: &errs}).Run(context.Background(), []string{"dev", "-config", cfg, "-dir", dir})
		if err == nil || !strings.Contains(err.Error(), "loopback") {
			t.Errorf("dev with http.listen %s = %v, want a refusal naming loopback", listen, err)
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			t.Errorf("dev with http.listen %s started something in its dir: %v", listen, entries)
		}
	}
}

// A busy port is reported before anything is started: no private
// PostgreSQL is created, and the message says how to move.
func TestDevBusyPortFailsBeforePostgres(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	cfg := writeConfig(t, "http: {listen: \"127.0.0.1:0\"}\n")
	dir := t.TempDir()
	var out, errs syncBuffer
	err = (&Main{Stdout: &out, Stderr: &errs}).Run(context.Background(),
		[]string{"dev", "-config", cfg, "-dir", dir, "-listen", busy.Addr().String()})
	if err == nil || !strings.Contains(err.Error(), busy.Addr().String()) || !strings.Contains(err.Error(), "-listen") {
		t.Fatalf("dev on a busy port = %v, want an error naming the address and -listen", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("dev on a busy port started something in its dir: %v", entries)
	}
	if strings.Contains(out.String(), "PostgreSQL") {
		t.Errorf("dev on a busy port started PostgreSQL:\n%s", out.String())
	}
}

// TestDevExampleConfigDeliversEverything: `notifyd dev` on the example config,
// as `make run` starts it: the banner's first curl, the demo's send button
// and every notifier's example each deliver, and no delivery fails. The
// billing webhook and the Slack message the example config names are
// captured and shown on /dev/, and the first email reads well: the comment's
// excerpt and an absolute link.
func TestDevExampleConfigDeliversEverything(t *testing.T) {
	_, url := pgtest.NewDBURL(t)
	t.Setenv("DATABASE_URL", url)
	for _, v := range []string{"NOTIFYD_ADMIN_TOKEN", "NOTIFYD_TOKEN_SECRET", "NOTIFYD_WEBHOOK_SECRET", "NOTIFYD_LISTEN"} {
		t.Setenv(v, "")
	}
	var out, errs syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- (&Main{Stdout: &out, Stderr: &errs}).Run(ctx, []string{"dev", "-config", "../../config.example.yaml",
			"-dir", t.TempDir(), "-listen", "127.0.0.1:0"})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("dev returned %v", err)
		}
	}()
	bannerRE := regexp.MustCompile(`(?s)API:\s+(http://\S+)/v1/.*admin token:\s+(\S+).*-d '(\{.*?\})'`)
	var m []string
	if !servertest.Wait(60*time.Second, func() bool { m = bannerRE.FindStringSubmatch(out.String()); return m != nil }) {
		t.Fatalf("dev printed no banner; stdout:\n%s\nstderr:\n%s", out.String(), errs.String())
	}
	base, admin, first := m[1], m[2], m[3]
	do := func(method, path, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+admin)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(raw)
	}
	// The banner's curl, as printed.
	if code, body := do("POST", "/v1/notifications", first); code != http.StatusAccepted {
		t.Fatalf("the banner's curl = %d %s", code, body)
	}
	// The demo's "send a test notification".
	if code, body := do("POST", "/dev/send", "{}"); code != http.StatusAccepted {
		t.Fatalf("POST /dev/send = %d %s", code, body)
	}
	// Every notifier's example, to u2.
	var cat struct {
		Notifiers []struct {
			Name    string
			Example map[string]any
		}
	}
	_, raw := do("GET", "/v1/notifiers", "")
	if err := json.Unmarshal([]byte(raw), &cat); err != nil || len(cat.Notifiers) < 4 {
		t.Fatalf("GET /v1/notifiers: %s (%v)", raw, err)
	}
	for _, n := range cat.Notifiers {
		body, _ := json.Marshal(map[string]any{"notifier": n.Name, "key": "example-" + n.Name, "actor": "u1",
			"recipients": []string{"u2"}, "params": n.Example})
		if code, resp := do("POST", "/v1/notifications", string(body)); code != http.StatusAccepted {
			t.Fatalf("send %s's example = %d %s", n.Name, code, resp)
		}
	}
	// Everything that is due settles; nothing fails.
	var page, pending string
	if !servertest.Wait(30*time.Second, func() bool {
		_, pending = do("GET", "/v1/deliveries?status=pending,sending,failed,rate_limited", "")
		_, page = do("GET", "/dev/", "")
		return strings.Contains(pending, `"items":[]`) && strings.Contains(page, "slack · invoice.paid") &&
			strings.Contains(page, "webhook · invoice.paid") && strings.Count(page, "<article>") >= 3
	}) {
		t.Fatalf("the example's deliveries did not settle: %s\n%s", pending, page)
	}
	if _, failed := do("GET", "/v1/deliveries?status=failed,refused,expired,unavailable", ""); !strings.Contains(failed, `"items":[]`) {
		t.Fatalf("the example config's dev run has failed deliveries: %s", failed)
	}
	if !strings.Contains(page, "moneybag: Invoice INV-2024-0042 paid") || !strings.Contains(page, "webhook-signature") {
		t.Fatalf("the captured Slack message or webhook is not shown on /dev/:\n%s", page)
	}
	// The first email reads well: the excerpt, and a link that works
	// outside the app.
	if !strings.Contains(page, "Great write-up! The part about the ledger answered my question.") ||
		!strings.Contains(page, "https://app.acme.test/posts/9#comment-1") || strings.Contains(page, "&lt;blockquote&gt;&lt;/blockquote&gt;") {
		t.Fatalf("the first email does not carry its excerpt and an absolute link:\n%s", page)
	}
	if code, body := do("POST", "/v1/notifications", strings.Replace(first, "https://app.acme.test/posts/9#comment-1", "/posts/9", 1)); code != http.StatusUnprocessableEntity ||
		!strings.Contains(body, `"pointer":"/url"`) {
		t.Fatalf("a relative link = %d %s, want 422 naming /url", code, body)
	}
}
