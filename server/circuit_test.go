package server_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/internal/testing/pgtest"
	"github.com/notifyd/notifyd/server"
	"github.com/notifyd/notifyd/server/servertest"
)

// circuitConfig sends every ping to each recipient's webhook, on loopback.
const circuitConfig = `
queues: {fanout: 1, send: 4, digest: 1, maintenance: 1}
http: {admin_token: ` + servertest.AdminToken + `, token_secret: ` + servertest.TokenSecret + `}
channels:
  webhook: {secret: dev-webhook-secret-0123456789abcdef, allow_private: true, timeout: 2s}
notifiers:
  ping:
    channels:
      webhook: {default: immediate}
`

// TestRetryOnAnOpenCircuit: a webhook target that refuses connections three
// times in a row opens its circuit breaker. "Retry now" on one of its
// deliveries then says so (409 circuit_open, with the target, the time and
// the failures) and changes nothing, the delivery page shows the circuit,
// and a retry that closes the circuit sends the delivery at once, once the
// target answers again.
func TestRetryOnAnOpenCircuit(t *testing.T) {
	t.Parallel()
	// A port nobody listens on (yet): connections are refused.
	probe, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hook := "http://" + probe.Addr().String() + "/hook"
	probe.Close()

	pool, url := pgtest.NewDBURL(t)
	cfg := servertest.Config(t, circuitConfig)
	cfg.Database.URL = url
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(context.Background(), server.Options{Config: cfg, Pool: pool, Listener: ln,
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
			t.Errorf("Run: %v", err)
		}
		srv.Close()
	})
	call := apiCaller(t, "http://"+srv.Addr())
	admin := servertest.AdminToken

	// Three recipients on the dead target, one notification each: three
	// send jobs, three refused connections in a row.
	for i := range 3 {
		id := fmt.Sprintf("u%d", i)
		if code, body := call("PUT", "/v1/recipients/"+id, admin, map[string]any{"webhook_url": hook}); code != 200 {
			t.Fatalf("PUT recipient: %d %v", code, body)
		}
		if _, err := srv.Client().Send(context.Background(), notifyd.Notification{Notifier: "ping", Key: id,
			Recipients: []notifyd.Recipient{{ID: id}}}); err != nil {
			t.Fatal(err)
		}
	}
	var delivery string
	var circuit map[string]any
	servertest.Eventually(t, 30*time.Second, "the target's circuit to open", func() bool {
		var ids []string
		rows, err := pool.Query(context.Background(), `SELECT id::text FROM notify_deliveries WHERE status = 'failed' ORDER BY id`)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var id string
			_ = rows.Scan(&id)
			ids = append(ids, id)
		}
		rows.Close()
		for _, id := range ids {
			code, d := call("GET", "/v1/deliveries/"+id, admin, nil)
			if c, ok := d["circuit"].(map[string]any); code == 200 && ok {
				delivery, circuit = id, c
				return true
			}
		}
		return false
	})
	if circuit["target"] != "webhook "+strings.TrimSuffix(hook, "/hook") ||
		circuit["failures"] != 3.0 || !strings.Contains(circuit["last_error"].(string), "refused") {
		t.Fatalf("circuit %v", circuit)
	}

	// Retry now: refused, and the delivery is left as it was.
	var before string
	if err := pool.QueryRow(context.Background(), `SELECT updated_at::text FROM notify_deliveries WHERE id = $1`, delivery).Scan(&before); err != nil {
		t.Fatal(err)
	}
	code, body := call("POST", "/v1/deliveries/"+delivery+"/retry", admin, nil)
	msg, _ := body["error"].(map[string]any)["message"].(string)
	if code != 409 || body["error"].(map[string]any)["code"] != "circuit_open" || !strings.Contains(msg, "is paused until") ||
		!strings.Contains(msg, "after 3 failures") {
		t.Fatalf("retry on an open circuit: %d %v", code, body)
	}
	var after string
	if err := pool.QueryRow(context.Background(), `SELECT updated_at::text FROM notify_deliveries WHERE id = $1`, delivery).Scan(&after); err != nil || after != before {
		t.Fatalf("the refused retry changed the delivery (%s -> %s, %v)", before, after, err)
	}

	// The target is back: close the circuit and retry; the delivery is sent.
	back, err := net.Listen("tcp", strings.TrimSuffix(strings.TrimPrefix(hook, "http://"), "/hook"))
	if err != nil {
		t.Skipf("the probed port was taken meanwhile: %v", err)
	}
	received := make(chan struct{}, 10)
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		received <- struct{}{}
		w.WriteHeader(http.StatusNoContent)
	})}
	go func() { _ = hs.Serve(back) }()
	t.Cleanup(func() { _ = hs.Close() })
	code, body = call("POST", "/v1/deliveries/"+delivery+"/retry", admin, map[string]any{"close_circuit": true})
	if code != 202 {
		t.Fatalf("retry closing the circuit: %d %v", code, body)
	}
	servertest.Eventually(t, 15*time.Second, "the retried delivery to be sent", func() bool {
		var status string
		_ = pool.QueryRow(context.Background(), `SELECT status FROM notify_deliveries WHERE id = $1`, delivery).Scan(&status)
		return status == "sent"
	})
	if code, d := call("GET", "/v1/deliveries/"+delivery, admin, nil); code != 200 || d["circuit"] != nil {
		t.Fatalf("after the send: %d circuit %v", code, d["circuit"])
	}
}
