package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/examples/custom-channel/console"
	"github.com/notifyd/notifyd/internal/testing/pgtest"
	"github.com/notifyd/notifyd/server"
	"github.com/notifyd/notifyd/server/servertest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const (
	adminToken  = "admin-token-0123456789abcdef0123456789"
	tokenSecret = "token-secret-0123456789abcdef0123456789"
)

type bundle struct {
	base     string
	messages string
}

// start runs the example's daemon, console channel registered, on a fresh
// database, with its config written to a file as a user would.
func start(t *testing.T) *bundle {
	t.Helper()
	_, dbURL := pgtest.NewDBURL(t)
	dir := t.TempDir()
	messages := filepath.Join(dir, "messages.jsonl")
	src, err := os.ReadFile("config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	yaml := strings.Replace(string(src), "path: messages.jsonl", "path: "+messages, 1)
	path := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("DATABASE_URL", dbURL)
	t.Setenv("NOTIFYD_ADMIN_TOKEN", adminToken)
	t.Setenv("NOTIFYD_TOKEN_SECRET", tokenSecret)
	cfg, err := server.LoadConfig(path, plugins...)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(context.Background(), server.Options{Config: cfg, Channels: plugins, Listener: ln,
		Logger: servertest.Logger(), DrainTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
		srv.Close()
	})
	b := &bundle{base: "http://" + srv.Addr(), messages: messages}
	servertest.Eventually(t, 10*time.Second, "the API answers", func() bool {
		resp, err := http.Get(b.base + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return b
}

func (b *bundle) do(t *testing.T, method, path, token string, body any, out any) int {
	t.Helper()
	var r *bytes.Reader
	if body != nil {
		data, _ := json.Marshal(body)
		r = bytes.NewReader(data)
	} else {
		r = bytes.NewReader(nil)
	}
	req, _ := http.NewRequest(method, b.base+path, r)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			t.Fatalf("%s %s: decode: %v", method, path, err)
		}
	}
	return resp.StatusCode
}

// lines reads the console file ("" lines when it does not exist yet).
func (b *bundle) lines(t *testing.T) []console.Line {
	t.Helper()
	f, err := os.Open(b.messages)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []console.Line
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var l console.Line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		out = append(out, l)
	}
	return out
}

type deliveries struct {
	Deliveries []struct {
		Recipient *string `json:"recipient"`
		Channel   string  `json:"channel"`
		Status    string  `json:"status"`
		LastError *string `json:"last_error"`
	} `json:"deliveries"`
}

func (d deliveries) find(recipient, channel string) (status string) {
	for _, x := range d.Deliveries {
		if x.Recipient != nil && *x.Recipient == recipient && x.Channel == channel {
			return x.Status
		}
	}
	return ""
}

// TestConsoleChannel: the registered channel is configured in YAML, sends
// through the ledger, is chosen in preferences and visible in the API.
func TestConsoleChannel(t *testing.T) {
	b := start(t)

	// u3 turns the console channel off; a rule naming a channel nobody
	// registered is refused.
	rules := map[string]any{"rules": []map[string]string{{"scope": "*", "channel": "console", "mode": "off"}}}
	if code := b.do(t, "PUT", "/v1/recipients/u3/preferences", adminToken, rules, nil); code != http.StatusOK {
		t.Fatalf("PUT preferences: %d", code)
	}
	bad := map[string]any{"rules": []map[string]string{{"scope": "*", "channel": "fax", "mode": "off"}}}
	var refused struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	if code := b.do(t, "PUT", "/v1/recipients/u3/preferences", adminToken, bad, &refused); code != http.StatusUnprocessableEntity ||
		!strings.Contains(refused.Error.Message, `"console"`) {
		t.Fatalf("a rule for an unregistered channel: %d %+v, want 422 listing console", code, refused)
	}

	var sent struct{ ID string }
	n := map[string]any{"notifier": "comment.created", "key": "c-1", "recipients": []string{"u2", "u3"},
		"params": map[string]string{"post_title": "Hello", "author_name": "Ada"}}
	if code := b.do(t, "POST", "/v1/notifications", adminToken, n, &sent); code != http.StatusAccepted {
		t.Fatalf("POST /v1/notifications: %d", code)
	}

	var d deliveries
	servertest.Eventually(t, 15*time.Second, "console delivery to u2 sent and u3's skipped", func() bool {
		d = deliveries{}
		b.do(t, "GET", "/v1/notifications/"+sent.ID, adminToken, nil, &d)
		return d.find("u2", console.Name) == "sent" && d.find("u3", console.Name) == "skipped"
	})
	if d.find("u3", "in_app") != "sent" {
		t.Errorf("u3's inbox item: %q; turning console off must not touch in_app", d.find("u3", "in_app"))
	}
	lines := b.lines(t)
	if len(lines) != 1 {
		t.Fatalf("%d lines in the console file, want 1 (u3 turned console off): %+v", len(lines), lines)
	}
	l := lines[0]
	if l.Recipient != "u2" || l.Notifier != "comment.created" || l.Key != "c-1" || l.NotificationID != sent.ID ||
		l.Text != "Ada commented on Hello" || l.DeliveryID == "" || l.Attempt != 1 {
		t.Errorf("line = %+v", l)
	}

	// The preference center sees the channel like a built-in one.
	tok, err := notifyd.RecipientToken(tokenSecret, "u3", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	var prefs struct {
		Effective map[string]struct {
			Channels map[string]string `json:"channels"`
		} `json:"effective"`
		Channels []struct {
			Name  string   `json:"name"`
			Modes []string `json:"modes"`
		} `json:"channels"`
	}
	if code := b.do(t, "GET", "/v1/preferences", tok, nil, &prefs); code != http.StatusOK {
		t.Fatalf("GET /v1/preferences: %d", code)
	}
	if got := prefs.Effective["comment.created"].Channels["console"]; got != "off" {
		t.Errorf("effective console mode = %q, want off", got)
	}
	if got := fmt.Sprint(prefs.Channels); !strings.Contains(got, "{console [immediate off]}") {
		t.Errorf("channels = %s, want console with immediate and off", got)
	}
	var doc map[string]any
	b.do(t, "GET", "/v1/openapi.json", "", nil, &doc)
	if !strings.Contains(fmt.Sprint(doc["components"]), "console") {
		t.Error("the API document does not list the console channel")
	}
}

// TestConsoleConfigErrors: the channel's own sections are checked with the
// file's lines, like any other config key.
func TestConsoleConfigErrors(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "bad.yaml")
	src := "channels:\n  console:\n    paht: x\nnotifiers:\n  n:\n    channels:\n      console: {}\n"
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := server.LoadConfig(path, plugins...)
	want := []string{
		path + ":2: channels.console.path: must be set (the file messages are appended to)",
		path + ":3: channels.console.paht: unknown key (want path)",
		path + ":7: notifiers.n.channels.console.text: must be set",
	}
	if err == nil || err.Error() != strings.Join(want, "\n") {
		t.Fatalf("LoadConfig = %v\nwant:\n%s", err, strings.Join(want, "\n"))
	}
	// Without the plugin the section is an unknown channel.
	if _, err := server.LoadConfig(path); err == nil || !strings.Contains(err.Error(), `unknown channel "console"`) {
		t.Fatalf("LoadConfig without the plugin = %v", err)
	}
}
