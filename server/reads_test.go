package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/internal/pgcluster"
	"github.com/notifyd/notifyd/server"
	"github.com/notifyd/notifyd/server/servertest"
)

// replicaPair is a primary with a streaming standby, each a private cluster
// of its own, and notifyd migrated on the primary.
type replicaPair struct {
	primary, standby *pgcluster.Cluster
	primaryURL       string
	standbyURL       string
}

// startReplicaPair starts a primary (tuned, with replication on), migrates
// a database on it, and starts a standby of it with pg_basebackup -R.
func startReplicaPair(t *testing.T) *replicaPair {
	t.Helper()
	ctx := t.Context()
	primary, err := pgcluster.Start(ctx, pgcluster.Options{Dir: postgresTempDir(t), Tuned: true, Replication: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = primary.Stop() })
	if err := primary.EnsureDatabase(ctx, "notifyd"); err != nil {
		t.Fatal(err)
	}
	rp := &replicaPair{primary: primary, primaryURL: primary.URL("notifyd")}
	cfg := servertest.Config(t, "")
	cfg.Database.URL = rp.primaryURL
	pool, err := server.OpenPool(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	err = server.Migrate(ctx, cfg, pool, nil)
	pool.Close()
	if err != nil {
		t.Fatal(err)
	}
	standby, err := pgcluster.StartStandby(ctx, primary, pgcluster.Options{Dir: postgresTempDir(t), Tuned: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = standby.Stop() })
	rp.standby, rp.standbyURL = standby, standby.URL("notifyd")
	return rp
}

// postgresTempDir is a t.TempDir() the postgres account can reach when the
// test runs as root (the cluster's programs run as postgres).
func postgresTempDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if os.Geteuid() == 0 {
		for _, d := range []string{dir, filepath.Dir(dir)} {
			if err := os.Chmod(d, 0o711); err != nil {
				t.Fatal(err)
			}
		}
	}
	return dir
}

// readyReplica is /readyz's read_replica.
type readyReplica struct {
	Reads string `json:"reads"`
	LagMS int64  `json:"lag_ms"`
	Error string `json:"error"`
}

// TestReadReplica runs the daemon with database.read_url on a real
// streaming standby and shows, with the standby's WAL replay paused (so that
// it answers with what it had), that inbox reads come from the standby while
// it is within database.max_read_lag, that writes go to the primary and
// are never tried on the standby, that a notification just created is found
// although the standby lacks it, that reads move to the primary once the
// standby is too far behind or down, and back when it has caught up, and
// that /readyz reports all of it.
func TestReadReplica(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	rp := startReplicaPair(t)
	primary, err := pgx.Connect(ctx, rp.primaryURL)
	if err != nil {
		t.Fatal(err)
	}
	defer primary.Close(context.Background())
	standby, err := pgx.Connect(ctx, rp.standbyURL)
	if err != nil {
		t.Fatal(err)
	}
	defer standby.Close(context.Background())

	cfg := servertest.Config(t, "")
	cfg.Database.URL, cfg.Database.ReadURL = rp.primaryURL, rp.standbyURL
	// Wide enough that the reads made right after pausing the standby's
	// replay happen before it counts as too far behind.
	cfg.Database.MaxReadLag = config.Duration(5 * time.Second)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d, err := server.New(ctx, server.Options{Config: cfg, Listener: ln, Logger: servertest.Logger(), DrainTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("daemon: %v", err)
		}
		d.Close()
	})
	base := "http://" + d.Addr()
	token, err := notifyd.RecipientToken(servertest.TokenSecret, "r1", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	call := func(method, path, tok string, body any) (int, map[string]any) {
		t.Helper()
		var rd io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			rd = bytes.NewReader(b)
		}
		req, _ := http.NewRequestWithContext(ctx, method, base+path, rd)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		raw, _ := io.ReadAll(resp.Body)
		_ = json.Unmarshal(raw, &out)
		return resp.StatusCode, out
	}
	replica := func() readyReplica {
		t.Helper()
		code, body := call("GET", "/readyz", "", nil)
		if code != 200 {
			t.Fatalf("/readyz = %d %v", code, body)
		}
		var rr readyReplica
		raw, _ := json.Marshal(body["read_replica"])
		if err := json.Unmarshal(raw, &rr); err != nil || rr.Reads == "" {
			t.Fatalf("/readyz without read_replica: %v", body)
		}
		return rr
	}
	unread := func() float64 {
		t.Helper()
		code, body := call("GET", "/v1/inbox/counts", token, nil)
		if code != 200 {
			t.Fatalf("counts = %d %v", code, body)
		}
		return body["unread"].(float64)
	}
	addItem := func(key string) string {
		t.Helper()
		var id string
		if err := primary.QueryRow(ctx, `INSERT INTO notify_inbox (id, recipient, notifier, key, title)
			VALUES (gen_random_uuid(), 'r1', 'comment.created', $1, 'an item') RETURNING id::text`, key).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	first := addItem("k1")

	// 1. In sync: reads on the standby, lag reported.
	servertest.Eventually(t, 30*time.Second, "reads on the standby", func() bool {
		return replica().Reads == "standby" && unread() == 1
	})
	if rr := replica(); rr.LagMS > cfg.Database.MaxReadLag.D().Milliseconds() || rr.Error != "" {
		t.Fatalf("read_replica %+v", rr)
	}

	// 2. Replay paused: the standby answers with what it had.
	if _, err := standby.Exec(ctx, `SELECT pg_wal_replay_pause()`); err != nil {
		t.Fatal(err)
	}
	servertest.Eventually(t, 10*time.Second, "replay paused", func() bool {
		var state string
		return standby.QueryRow(ctx, `SELECT pg_get_wal_replay_pause_state()`).Scan(&state) == nil && state == "paused"
	})
	paused := time.Now()
	addItem("k2")
	got := unread()
	if elapsed := time.Since(paused); elapsed >= cfg.Database.MaxReadLag.D() {
		t.Fatalf("the reads after the pause took %s, past database.max_read_lag: nothing shown", elapsed)
	}
	if got != 1 {
		t.Fatalf("unread %v right after an insert on the primary with the standby paused: want 1, the standby's answer", got)
	}
	// A write goes to the primary: the mark reports the item it changed, which
	// the standby never saw change.
	code, body := call("POST", "/v1/inbox/read", token, map[string]any{"ids": []string{first}})
	if code != 200 || body["marked"] != 1.0 {
		t.Fatalf("mark read with the standby paused = %d %v", code, body)
	}
	// A notification the standby lacks is still found by id (its read falls
	// back to the primary on "not found").
	code, sent := call("POST", "/v1/notifications", servertest.AdminToken, map[string]any{
		"notifier": "comment.created", "key": "replica-1", "recipients": []any{"r2"},
		"params": map[string]any{"post_title": "p", "author_name": "a"}})
	if code != http.StatusAccepted {
		t.Fatalf("send = %d %v", code, sent)
	}
	if code, body := call("GET", "/v1/notifications/"+sent["id"].(string), servertest.AdminToken, nil); code != 200 {
		t.Fatalf("GET the new notification with the standby paused = %d %v", code, body)
	}

	// 3. Too far behind: reads move to the primary, which has both items
	// (one of them now read).
	servertest.Eventually(t, 30*time.Second, "reads on the primary once the standby is too far behind", func() bool {
		rr := replica()
		return rr.Reads == "primary" && strings.Contains(rr.Error, "behind") && unread() == 1
	})
	if rr := replica(); rr.LagMS < cfg.Database.MaxReadLag.D().Milliseconds() {
		t.Fatalf("read_replica %+v: lag below max_read_lag while reads are on the primary", rr)
	}

	// 4. Caught up again: back on the standby.
	if _, err := standby.Exec(ctx, `SELECT pg_wal_replay_resume()`); err != nil {
		t.Fatal(err)
	}
	servertest.Eventually(t, 30*time.Second, "reads back on the standby", func() bool {
		return replica().Reads == "standby" && unread() == 1
	})

	// 5. Standby down: reads on the primary, the API keeps answering.
	standby.Close(context.Background())
	if err := rp.standby.Stop(); err != nil {
		t.Fatal(err)
	}
	addItem("k3")
	servertest.Eventually(t, 30*time.Second, "reads on the primary with the standby down", func() bool {
		rr := replica()
		return rr.Reads == "primary" && strings.Contains(rr.Error, "unreachable") && unread() == 2
	})

	// No write was ever tried on the standby: it logged no refused write.
	log, err := os.ReadFile(rp.standby.LogFile())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(log), "read-only transaction") {
		t.Fatalf("the standby refused a write:\n%s", log)
	}
}
