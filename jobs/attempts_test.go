package jobs_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/server/servertest"
	"github.com/notifyd/notifyd/stores"
)

// reportingChannel is the email channel naming a relay of its own after each
// send (overriding the SMTP server the email channel names), the way a
// channel with several providers reports through channels.SetProvider.
type reportingChannel struct {
	channels.Channel
	provider string
}

func (c reportingChannel) Send(ctx context.Context, msg channels.Message) error {
	err := c.Channel.Send(ctx, msg)
	channels.SetProvider(ctx, fmt.Sprintf("%s#%d", c.provider, msg.Attempt))
	return err
}

// TestFailedAttemptsAreKeptWithTheirProvider: a delivery that fails twice and
// then goes out leaves two attempt rows (time, error, provider) and the
// provider of the send that worked on the ledger row; the API's reading of
// the delivery returns them in order.
func TestFailedAttemptsAreKeptWithTheirProvider(t *testing.T) {
	t.Parallel()
	b := setupEmail(t, "")
	b.deps.Channels["email"] = reportingChannel{Channel: b.deps.Channels["email"], provider: "relay.test:25"}
	b.profile(t, "u1", "u1@example.test")
	b.smtp.FailNext(2, 451, "4.7.1 try again later")
	id := b.send(t, "inv-attempts", "u1")
	servertest.StartWorkers(t, b.deps)
	d := b.waitDelivery(t, id, "u1", "sent")

	got, err := stores.GetDelivery(context.Background(), b.pool, d.id)
	if err != nil {
		t.Fatal(err)
	}
	if got.Provider == nil || *got.Provider != "relay.test:25#3" {
		t.Fatalf("delivery provider = %v, want the third attempt's relay.test:25#3", got.Provider)
	}
	if got.Attempts != 3 || len(got.FailedAttempts) != 2 {
		t.Fatalf("attempts = %d with %d failed attempts recorded, want 3 and 2: %+v", got.Attempts, len(got.FailedAttempts), got.FailedAttempts)
	}
	for i, a := range got.FailedAttempts {
		if a.Attempt != i+1 || !strings.Contains(a.Error, "451") || a.Provider == nil ||
			*a.Provider != fmt.Sprintf("relay.test:25#%d", i+1) || a.At.IsZero() {
			t.Fatalf("failed attempt %d = %+v, want attempt %d, the 451 and its relay", i, a, i+1)
		}
	}
	if !got.FailedAttempts[0].At.Before(got.FailedAttempts[1].At) {
		t.Fatalf("attempts out of order: %+v", got.FailedAttempts)
	}
}

// TestSuccessfulSendWritesNoAttemptRow: the hot path records the provider on
// the delivery (the SMTP server that took the email, as the email channel
// names it) and nothing else.
func TestSuccessfulSendWritesNoAttemptRow(t *testing.T) {
	t.Parallel()
	b := setupEmail(t, "")
	b.profile(t, "u1", "u1@example.test")
	id := b.send(t, "inv-ok", "u1")
	servertest.StartWorkers(t, b.deps)
	d := b.waitDelivery(t, id, "u1", "sent")
	var n int
	var provider, messageID string
	if err := b.pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM notify_delivery_attempts WHERE delivery_id = $1),
		(SELECT provider FROM notify_deliveries WHERE id = $1), (SELECT provider_message_id FROM notify_deliveries WHERE id = $1)`,
		d.id).Scan(&n, &provider, &messageID); err != nil {
		t.Fatal(err)
	}
	if n != 0 || provider != b.smtp.Addr() {
		t.Fatalf("after a first-time send: %d attempt rows, provider %q; want 0 and %s", n, provider, b.smtp.Addr())
	}
	// The provider's message id: over SMTP, the message's own Message-ID.
	if !strings.HasPrefix(messageID, d.id+"@") {
		t.Fatalf("provider_message_id = %q, want the Message-ID %s@…", messageID, d.id)
	}
	got, err := stores.GetDelivery(context.Background(), b.pool, d.id)
	if err != nil || got.ProviderMessageID == nil || *got.ProviderMessageID != messageID {
		t.Fatalf("GetDelivery: %v, provider message id %v", err, got)
	}
}

// TestDigestFailedAttemptIsKeptOnEachRow: a digest that fails once and then
// goes out leaves one failed attempt on each of its rows, and the provider of
// the send that worked on every row (the SMTP server, as the email channel
// names it).
func TestDigestFailedAttemptIsKeptOnEachRow(t *testing.T) {
	t.Parallel()
	b := setupDigest(t, fmt.Sprintf("digest: {schedule: %q, sweep: \"0 0 1 1 *\"}\n", soonSchedule()))
	b.profile(t, "u1", "u1@example.test")
	client := servertest.StartWorkers(t, b.deps)
	b.report(t, "a", "u1")
	b.report(t, "b", "u1")
	b.waitRows(t, "digest_pending", 2)
	b.smtp.FailNext(1, 451, "4.7.1 try again later")
	b.ahead(13 * time.Hour)
	if n := b.sweep(t, client); n != 1 {
		t.Fatalf("sweep enqueued %d digests, want 1", n)
	}
	b.waitRows(t, "digest_sent", 2)
	rows, err := b.pool.Query(context.Background(), `SELECT d.key, coalesce(d.provider, ''), a.attempt, a.error, coalesce(a.provider, '')
		FROM notify_deliveries d JOIN notify_delivery_attempts a ON a.delivery_id = d.id
		WHERE d.recipient = 'u1' AND d.channel = 'email' ORDER BY d.key, a.attempt`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var key, provider, errText, attemptProvider string
		var attempt int
		if err := rows.Scan(&key, &provider, &attempt, &errText, &attemptProvider); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(errText, "451") {
			t.Errorf("%s attempt %d: error %q, want the 451", key, attempt, errText)
		}
		got = append(got, fmt.Sprintf("%s %s %d %s", key, provider, attempt, attemptProvider))
	}
	addr := b.smtp.Addr()
	want := []string{"a " + addr + " 1 " + addr, "b " + addr + " 1 " + addr}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("digest rows and attempts:\n got %q\nwant %q", got, want)
	}
}

// preparingChannel is the email channel as a channels.Preparer: it counts
// its Prepare calls and checks that every Send carries their result.
type preparingChannel struct {
	channels.Channel
	mu         sync.Mutex
	prepares   [][]string
	unprepared int
}

type preparedMarker struct{ recipients []string }

func (c *preparingChannel) Prepare(_ context.Context, recipients []string) (any, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.prepares = append(c.prepares, slices.Sorted(slices.Values(recipients)))
	return &preparedMarker{recipients: recipients}, nil
}

func (c *preparingChannel) Send(ctx context.Context, msg channels.Message) error {
	m, ok := channels.Prepared(ctx).(*preparedMarker)
	if !ok || !slices.Contains(m.recipients, msg.Recipient.ID) {
		c.mu.Lock()
		c.unprepared++
		c.mu.Unlock()
	}
	return c.Channel.Send(ctx, msg)
}

// TestSendBatchIsPreparedOnce: a channel that reads per recipient at send
// time is asked once for the whole claimed batch, and each send carries
// what it read.
func TestSendBatchIsPreparedOnce(t *testing.T) {
	t.Parallel()
	b := setupEmail(t, "")
	ch := &preparingChannel{Channel: b.deps.Channels["email"]}
	b.deps.Channels["email"] = ch
	for _, id := range []string{"p1", "p2", "p3"} {
		b.profile(t, id, id+"@example.test")
	}
	id := b.send(t, "prep-1", "p1", "p2", "p3")
	servertest.StartWorkers(t, b.deps)
	for _, r := range []string{"p1", "p2", "p3"} {
		b.waitDelivery(t, id, r, "sent")
	}
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if fmt.Sprint(ch.prepares) != "[[p1 p2 p3]]" || ch.unprepared != 0 {
		t.Fatalf("prepares %v, %d sends without the prepared value; want one Prepare of [p1 p2 p3] and none", ch.prepares, ch.unprepared)
	}
}
