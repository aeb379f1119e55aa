package stream_test

import (
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/internal/metrics"
	"github.com/notifyd/notifyd/internal/stream"
	"github.com/notifyd/notifyd/internal/testing/pgtest"
)

// At its token's exp (by the handler's clock, here an hour on) the stream
// sends reauth, without an id, and ends.
func TestStreamEndsWithReauthWhenItsTokenExpires(t *testing.T) {
	t.Parallel()
	now := time.Now()
	b := setup(t, stream.HandlerOptions{Clock: func() time.Time { return now.Add(time.Hour) }})
	tok, err := notifyd.RecipientTokenAt(secret, "u1", time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	c := open(t, b.srv, nil, http.Header{"Authorization": {"Bearer " + tok}})
	c.expectCounts(t, 0, 0)
	ev := c.expect(t, "reauth")
	if ev.id != "" || ev.data != "{}" {
		t.Fatalf("reauth: id %q data %q, want no id and {}", ev.id, ev.data)
	}
	expectEnded(t, c)
	// A stream whose token has an hour to go by the handler's clock stays.
	live := setup(t, stream.HandlerOptions{})
	s := connect(t, live.srv, "u1", "")
	s.expectCounts(t, 0, 0)
	create(t, live.pool, "u1")
	s.expect(t, "inbox.created")
}

// The stream of one recipient too many is a 429 in the API's error shape,
// with Retry-After; other recipients are not affected, and a closed stream
// frees its place.
func TestStreamsPerRecipientAreCapped(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, func() int { return 0 })
	if err != nil {
		t.Fatal(err)
	}
	b := setup(t, stream.HandlerOptions{MaxPerRecipient: 2, Metrics: m})
	first := connect(t, b.srv, "u1", "")
	first.expectCounts(t, 0, 0)
	connect(t, b.srv, "u1", "").expectCounts(t, 0, 0)
	resp, cancel := get(t, b.srv, nil, http.Header{"Authorization": {"Bearer " + token(t, "u1")}})
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	cancel()
	var e struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	if resp.StatusCode != http.StatusTooManyRequests || json.Unmarshal(body, &e) != nil || e.Error.Code != "rate_limited" ||
		resp.Header.Get("Retry-After") == "" {
		t.Fatalf("third stream: %s Retry-After %q: %s", resp.Status, resp.Header.Get("Retry-After"), body)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	counted := false
	for _, mf := range mfs {
		for _, mm := range mf.GetMetric() {
			if mf.GetName() == "notifyd_http_limited_total" && mm.GetLabel()[0].GetValue() == metrics.LimitStreams {
				counted = mm.GetCounter().GetValue() == 1
			}
		}
	}
	if !counted {
		t.Fatal(`notifyd_http_limited_total{limit="streams"} is not 1`)
	}
	connect(t, b.srv, "u2", "").expectCounts(t, 0, 0)
	first.close()
	waitFor(t, "the closed stream's place", func() bool {
		resp, cancel := get(t, b.srv, nil, http.Header{"Authorization": {"Bearer " + token(t, "u1")}})
		if resp.StatusCode == http.StatusOK {
			t.Cleanup(func() { cancel(); resp.Body.Close() })
			return true
		}
		resp.Body.Close()
		cancel()
		return false
	})
}

// A query string that does not parse is a 400, not a stream that lost its
// last_event_id.
func TestStreamRefusesAMalformedQuery(t *testing.T) {
	t.Parallel()
	b := setup(t, stream.HandlerOptions{})
	resp, cancel := get(t, b.srv, nil, http.Header{"Authorization": {"Bearer " + token(t, "u1")}})
	resp.Body.Close()
	cancel()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("control: %s", resp.Status)
	}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, b.srv.URL+path+"?last_event_id=%zz", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token(t, "u1"))
	resp, err = b.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("malformed query: %s: %s", resp.Status, body)
	}
}

// A stream whose token is revoked while it is open (tokens_valid_after moved
// past its iat, as PUT /v1/recipients/{id} does, here by another replica's
// hand: straight in the database) ends with reauth at the Hub's next check.
// The recipient's stream on a token issued after the revocation time, and
// another recipient's stream, run on.
func TestStreamEndsWithReauthWhenItsTokenIsRevoked(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.NewDB(t)
	hub := newHub(t, pool)
	stream.SetRevokeEvery(hub, 20*time.Millisecond)
	srv := serve(t, hub, stream.HandlerOptions{}, nil)
	run(t, hub)
	if _, err := pool.Exec(ctx, `INSERT INTO notify_recipients (id) VALUES ('u1'), ('u2')`); err != nil {
		t.Fatal(err)
	}
	now := time.Now().Truncate(time.Second)
	bearer := func(recipient string, issued time.Time) http.Header {
		tok, err := notifyd.RecipientTokenAt(secret, recipient, time.Hour, issued)
		if err != nil {
			t.Fatal(err)
		}
		return http.Header{"Authorization": {"Bearer " + tok}}
	}
	old := open(t, srv, nil, bearer("u1", now.Add(-time.Minute)))
	old.expectCounts(t, 0, 0)
	fresh := open(t, srv, nil, bearer("u1", now))
	fresh.expectCounts(t, 0, 0)
	other := open(t, srv, nil, bearer("u2", now.Add(-time.Minute)))
	other.expectCounts(t, 0, 0)

	// Nothing is revoked yet: a check runs and every stream stays.
	create(t, pool, "u1", "u2")
	for _, c := range []*client{old, fresh, other} {
		c.expect(t, "inbox.created")
		c.expectCounts(t, 1, 1)
	}

	if _, err := pool.Exec(ctx, `UPDATE notify_recipients SET tokens_valid_after = $1 WHERE id = 'u1'`,
		now.Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	old.expect(t, "reauth")
	expectEnded(t, old)
	ids := create(t, pool, "u1", "u2")
	fresh.expectCreated(t, ids[0])
	other.expectCreated(t, ids[1])
}

// expectEnded waits for c's stream to end with no further event.
func expectEnded(t *testing.T, c *client) {
	t.Helper()
	select {
	case ev, ok := <-c.events:
		if ok {
			t.Fatalf("an event after reauth: %+v", ev)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the stream stayed open after reauth")
	}
}
