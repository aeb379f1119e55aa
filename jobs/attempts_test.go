package jobs_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/internal/testing/notifydtest"
	"github.com/notifyd/notifyd/stores"
)

// reportingChannel is the email channel naming the relay it used, the way a
// channel with several providers reports through channels.SetProvider.
type reportingChannel struct {
	channels.Channel
	provider string
}

func (c reportingChannel) Send(ctx context.Context, msg channels.Message) error {
	channels.SetProvider(ctx, fmt.Sprintf("%s#%d", c.provider, msg.Attempt))
	return c.Channel.Send(ctx, msg)
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
	notifydtest.StartWorkers(t, b.deps)
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
// the delivery and nothing else.
func TestSuccessfulSendWritesNoAttemptRow(t *testing.T) {
	t.Parallel()
	b := setupEmail(t, "")
	b.deps.Channels["email"] = reportingChannel{Channel: b.deps.Channels["email"], provider: "relay.test:25"}
	b.profile(t, "u1", "u1@example.test")
	id := b.send(t, "inv-ok", "u1")
	notifydtest.StartWorkers(t, b.deps)
	d := b.waitDelivery(t, id, "u1", "sent")
	var n int
	var provider string
	if err := b.pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM notify_delivery_attempts WHERE delivery_id = $1),
		(SELECT provider FROM notify_deliveries WHERE id = $1)`, d.id).Scan(&n, &provider); err != nil {
		t.Fatal(err)
	}
	if n != 0 || provider != "relay.test:25#1" {
		t.Fatalf("after a first-time send: %d attempt rows, provider %q; want 0 and relay.test:25#1", n, provider)
	}
}
