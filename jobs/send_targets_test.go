package jobs_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/internal/smtpcapture"
	"github.com/notifyd/notifyd/server/servertest"
)

// tarpitHost is a webhook host that takes requests and never answers them,
// until heal: from then on it answers 204 and records the webhook-id of each
// request. A request held before heal is never answered.
type tarpitHost struct {
	*httptest.Server
	healed atomic.Bool
	mu     sync.Mutex
	got    map[string]int
}

func tarpit(t *testing.T) *tarpitHost {
	stop := make(chan struct{})
	h := &tarpitHost{got: map[string]int{}}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h.healed.Load() {
			h.mu.Lock()
			h.got[r.Header.Get("webhook-id")]++
			h.mu.Unlock()
			w.WriteHeader(http.StatusNoContent)
			return
		}
		select {
		case <-r.Context().Done(): // the sender gave up
		case <-stop:
		}
	}))
	t.Cleanup(h.Close)
	t.Cleanup(func() { close(stop) }) // runs first: unblock the handlers so Close returns
	return h
}

func (h *tarpitHost) received(id string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.got[id]
}

// One target never waits on another: three recipients whose webhook_url
// never answers do not delay the 1,000 emails of the same notification,
// however the batches mix them; the tarpit deliveries fail at their timeout
// and are retried (or parked by the breaker), and no send job holds its
// worker much past one timeout.
func TestHungWebhooksDoNotDelayEmail(t *testing.T) {
	t.Parallel()
	const (
		n       = 1000
		timeout = 15 * time.Second
		// Well inside timeout: were an email waiting on a tarpit webhook, it
		// would arrive only after it.
		emailWithin = 10 * time.Second
	)
	b := setup(t)
	srv := smtpcapture.Start(t)
	hook := tarpit(t)
	b.cfg = servertest.Config(t, servertest.BaseConfig+fmt.Sprintf(`
  invoice.paid:
    max_recipients: 5000
    channels:
      email: {subject: "Paid", text: "You paid."}
      webhook: {default: immediate}
channels:
  email:
    from: "Acme <notify@acme.test>"
    smtp: {host: 127.0.0.1, port: %d, tls: none}
    timeout: 5s
  webhook: {secret: %q, timeout: %s, allow_private: true}
`, srv.Port(), webhookSecret, timeout))
	b.deps.Config = b.cfg
	servertest.Wire(b.deps, servertest.Channels(t, b.cfg))
	b.deps.Backoff = func(int) time.Duration { return 100 * time.Millisecond }
	client := servertest.Client(t, b.pool, b.cfg)

	// Every recipient has an email address; three of them, spread over the
	// audience, also have a webhook_url on the tarpit.
	ctx := context.Background()
	hooked := map[string]bool{"r0000": true, "r0499": true, "r0998": true}
	if _, err := b.pool.Exec(ctx, `INSERT INTO notify_recipients (id, email, webhook_url)
		SELECT 'r' || lpad(i::text, 4, '0'), 'r' || i || '@example.test',
		       CASE WHEN i IN (0, 499, 998) THEN $1 || '/hooks/' || i END
		FROM generate_series(0, $2 - 1) AS i`, hook.URL, n); err != nil {
		t.Fatal(err)
	}
	nf := notifyd.Notification{Notifier: "invoice.paid", Key: "inv-tarpit"}
	for i := range n {
		nf.Recipients = append(nf.Recipients, notifyd.Recipient{ID: fmt.Sprintf("r%04d", i)})
	}
	servertest.StartWorkers(t, b.deps)
	start := time.Now()
	res, err := client.Send(ctx, nf)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(srv.WaitFor(n, emailWithin)); got < n {
		t.Fatalf("%d of %d emails received within %s of the send (the webhooks time out after %s)", got, n, emailWithin, timeout)
	}
	t.Logf("%d emails received %s after the send", n, time.Since(start).Round(time.Millisecond))

	// Each tarpit delivery was attempted, failed at its timeout and is due
	// again with a send job for it; at least one was then parked by its
	// host's breaker or by its lane without being attempted.
	var parked bool
	servertest.Eventually(t, 3*timeout, "every tarpit delivery failed and retried, one parked", func() bool {
		rows, err := b.pool.Query(ctx, `SELECT recipient, status, attempts, coalesce(last_error, ''), next_attempt_at IS NOT NULL,
			EXISTS (SELECT 1 FROM river_job j WHERE j.kind = 'notify.send' AND j.state IN ('scheduled', 'available', 'running', 'retryable')
			        AND position(uuid_send(d.id) IN decode(j.args->>'ids', 'base64')) > 0)
			FROM notify_deliveries d WHERE notification_id = $1 AND channel = 'webhook' AND recipient = ANY($2)`,
			res.ID, []string{"r0000", "r0499", "r0998"})
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var seen int
		for rows.Next() {
			var recipient, status, lastError string
			var attempts int
			var due, queued bool
			if err := rows.Scan(&recipient, &status, &attempts, &lastError, &due, &queued); err != nil {
				t.Fatal(err)
			}
			if !hooked[recipient] || status != "failed" || attempts < 1 || !due || !queued {
				return false
			}
			if !strings.Contains(lastError, "not attempted") && !strings.Contains(strings.ToLower(lastError), "timeout") &&
				!strings.Contains(lastError, "deadline exceeded") {
				t.Fatalf("tarpit delivery to %s failed with %q, want a timeout or a parking", recipient, lastError)
			}
			parked = parked || strings.Contains(lastError, "not attempted")
			seen++
		}
		return seen == len(hooked) && parked
	})

	// No send job held its worker past the webhook timeout (and a settle).
	var nanos int64
	if err := b.pool.QueryRow(ctx, `SELECT (coalesce(max(extract(epoch FROM coalesce(finalized_at, now()) - attempted_at)), 0) * 1e9)::bigint
		FROM river_job WHERE kind = 'notify.send' AND attempted_at IS NOT NULL AND (state = 'running' OR finalized_at IS NOT NULL)`).Scan(&nanos); err != nil {
		t.Fatal(err)
	}
	longest := time.Duration(nanos)
	if longest < 100*time.Microsecond {
		t.Fatalf("the longest send job ran %s: the query measured nothing", longest)
	}
	if longest > timeout+time.Second {
		t.Fatalf("a send job ran for %s, past the webhook timeout of %s", longest.Round(time.Millisecond), timeout)
	}
	if n := servertest.Count(t, b.pool, `SELECT count(*) FROM notify_deliveries WHERE notification_id = $1 AND channel = 'email' AND status = 'sent'`, res.ID); n != 1000 {
		t.Fatalf("%d email deliveries recorded sent, want 1000", n)
	}

	// The host answers again: the retried or parked deliveries go out, each
	// once, when their breaker lets them.
	hook.healed.Store(true)
	servertest.Eventually(t, 40*time.Second, "the tarpit deliveries sent after the host recovered", func() bool {
		return servertest.Count(t, b.pool, `SELECT count(*) FROM notify_deliveries WHERE notification_id = $1 AND channel = 'webhook' AND status = 'sent'`, res.ID) == len(hooked)
	})
	rows, err := b.pool.Query(ctx, `SELECT id::text FROM notify_deliveries WHERE notification_id = $1 AND channel = 'webhook' AND status = 'sent'`, res.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		if got := hook.received(id); got != 1 {
			t.Fatalf("the recovered host received delivery %s %d times, want once", id, got)
		}
	}
}
