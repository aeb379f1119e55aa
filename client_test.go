package notifyd_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/internal/testing/notifydtest"
	"github.com/notifyd/notifyd/internal/testing/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func setup(t *testing.T) (*pgxpool.Pool, *notifyd.Client) {
	t.Helper()
	pool := pgtest.NewDB(t)
	client, err := notifyd.NewClient(pool, notifyd.ClientConfig{Config: notifydtest.Config(t, "")})
	if err != nil {
		t.Fatal(err)
	}
	return pool, client
}

var hello = notifyd.Notification{Notifier: "comment.created", Key: "comment-1", Actor: "u1",
	Recipients: []notifyd.Recipient{{ID: "u2", Reason: "author"}},
	Params:     map[string]any{"post_title": "Hello", "author_name": "Ada"}}

func TestSendTxIsAtomicWithTheApplicationsTransaction(t *testing.T) {
	t.Parallel()
	pool, client := setup(t)
	ctx := context.Background()

	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.SendTx(ctx, tx, hello); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n := notifydtest.Count(t, pool, `SELECT count(*) FROM notify_notifications`) + notifydtest.Count(t, pool, `SELECT count(*) FROM river_job`); n != 0 {
		t.Fatalf("after rollback: %d rows (notifications + jobs), want 0", n)
	}

	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := client.SendTx(ctx, tx, hello)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := notifydtest.Count(t, pool, `SELECT count(*) FROM notify_notifications WHERE status = 'pending'`); n != 1 {
		t.Fatalf("after commit: %d notifications, want 1", n)
	}
	if n := notifydtest.Count(t, pool, `SELECT count(*) FROM river_job WHERE kind = 'notify.fanout' AND queue = 'fanout' AND state = 'available'`); n != 1 {
		t.Fatalf("after commit: %d fan-out jobs, want 1", n)
	}
}

func TestSendTxConcurrentDuplicates(t *testing.T) {
	t.Parallel()
	pool, client := setup(t)
	ctx := context.Background()

	// Two transactions send the same (notifier, key); the first holds its
	// transaction open while the second sends, then commits.
	tx1, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	first, err := client.SendTx(ctx, tx1, hello)
	if err != nil {
		t.Fatal(err)
	}
	var second notifyd.SendResult
	var secondErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		secondErr = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			second, err = client.SendTx(ctx, tx, hello)
			return err
		})
	}()
	time.Sleep(100 * time.Millisecond) // the second waits on the first's unique key
	if err := tx1.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if secondErr != nil {
		t.Fatal(secondErr)
	}
	if first.Duplicate || !second.Duplicate || first.ID != second.ID {
		t.Fatalf("first=%+v second=%+v: want one notification, the second a duplicate", first, second)
	}
	if n := notifydtest.Count(t, pool, `SELECT count(*) FROM river_job WHERE kind = 'notify.fanout'`); n != 1 {
		t.Fatalf("fan-out jobs = %d, want 1", n)
	}
	// Later sends are duplicates too: identity is forever.
	res, err := client.Send(ctx, hello)
	if err != nil || !res.Duplicate || res.ID != first.ID {
		t.Fatalf("third send = %+v, %v", res, err)
	}
}

func TestSendTxValidates(t *testing.T) {
	t.Parallel()
	pool, client := setup(t)
	ctx := context.Background()
	tests := []struct {
		name  string
		n     notifyd.Notification
		check func(error) bool
	}{
		{"unknown notifier", notifyd.Notification{Notifier: "nope", Key: "k", Recipients: hello.Recipients},
			func(err error) bool { return errors.Is(err, notifyd.ErrUnknownNotifier) }},
		{"schema violation", notifyd.Notification{Notifier: "comment.created", Key: "k", Recipients: hello.Recipients,
			Params: map[string]any{"post_title": 7}},
			func(err error) bool {
				var pe *config.ParamsError
				return errors.As(err, &pe) && len(pe.Details) >= 2
			}},
		{"no key", notifyd.Notification{Notifier: "comment.created", Recipients: hello.Recipients},
			func(err error) bool {
				var ie *notifyd.InputError
				return errors.As(err, &ie) && ie.Field == "key"
			}},
		{"no audience", notifyd.Notification{Notifier: "comment.created", Key: "k", Params: hello.Params},
			func(err error) bool {
				var ie *notifyd.InputError
				return errors.As(err, &ie) && ie.Field == "recipients"
			}},
		{"invalid utf-8 recipient", notifyd.Notification{Notifier: "comment.created", Key: "k", Params: hello.Params,
			Recipients: []notifyd.Recipient{{ID: "\xff"}}},
			func(err error) bool {
				var ie *notifyd.InputError
				return errors.As(err, &ie) && ie.Field == "recipients[0].id"
			}},
	}
	for _, tt := range tests {
		_, err := client.Send(ctx, tt.n)
		if !tt.check(err) {
			t.Errorf("%s: err = %v", tt.name, err)
		}
	}
	if n := notifydtest.Count(t, pool, `SELECT count(*) FROM notify_notifications`); n != 0 {
		t.Fatalf("invalid sends wrote %d notifications", n)
	}
}

func TestCancelTx(t *testing.T) {
	t.Parallel()
	pool, client := setup(t)
	ctx := context.Background()
	if _, err := client.Send(ctx, hello); err != nil {
		t.Fatal(err)
	}
	n, err := client.Cancel(ctx, hello.Notifier, hello.Key)
	if err != nil || n != 0 {
		t.Fatalf("cancel = %d, %v (nothing fanned out yet, nothing to withdraw)", n, err)
	}
	if c := notifydtest.Count(t, pool, `SELECT count(*) FROM notify_notifications WHERE status = 'cancelled'`); c != 1 {
		t.Fatal("notification not cancelled")
	}
	if _, err := client.Cancel(ctx, "comment.created", "never-sent"); !errors.Is(err, notifyd.ErrNotFound) {
		t.Fatalf("cancel of an unknown notification = %v, want ErrNotFound", err)
	}
}

func TestRecipientToken(t *testing.T) {
	t.Parallel()
	tok, err := notifyd.RecipientToken("s3cret", "u2", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if id, err := notifyd.ParseRecipientToken("s3cret", tok); err != nil || id != "u2" {
		t.Fatalf("parse = %q, %v", id, err)
	}
	if _, err := notifyd.ParseRecipientToken("other", tok); err == nil {
		t.Fatal("a token signed with another secret was accepted")
	}
	if _, err := notifyd.RecipientToken("s3cret", "u2", 0); err == nil {
		t.Fatal("a token without expiry was minted")
	}
	// Expiry by an injected clock: minted a minute ago for 30 s, or checked
	// a minute from now (exp has second precision).
	expired, err := notifyd.RecipientTokenAt("s3cret", "u2", 30*time.Second, time.Now().Add(-time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := notifyd.ParseRecipientToken("s3cret", expired); err == nil {
		t.Fatal("an expired token was accepted")
	}
	if id, err := notifyd.ParseRecipientTokenAt("s3cret", expired, time.Now().Add(-45*time.Second)); err != nil || id != "u2" {
		t.Fatalf("within its lifetime by the given clock: %q, %v", id, err)
	}
	if _, err := notifyd.ParseRecipientTokenAt("s3cret", tok, time.Now().Add(2*time.Hour)); err == nil {
		t.Fatal("a token was accepted after its exp by the given clock")
	}
}

// SendTx writes the inline list sorted by id in byte order, and marks it
// sorted (the fan-out keeps it as written) only when no id is listed twice:
// a repeated id waits for the fan-out to keep its strongest reason.
func TestSendTxSortsTheInlineList(t *testing.T) {
	t.Parallel()
	pool, client := setup(t)
	ctx := context.Background()
	for _, c := range []struct {
		key        string
		recipients []notifyd.Recipient
		ids        []string
		sorted     bool
	}{
		{"distinct", []notifyd.Recipient{{ID: "u3"}, {ID: "U2"}, {ID: "u10"}}, []string{"U2", "u10", "u3"}, true},
		{"repeated", []notifyd.Recipient{{ID: "u3"}, {ID: "u2", Reason: "author"}, {ID: "u3", Reason: "assigned"}},
			[]string{"u2", "u3", "u3"}, false},
	} {
		n := hello
		n.Key, n.Recipients = c.key, c.recipients
		res, err := client.Send(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		var sorted bool
		if err := pool.QueryRow(ctx, `SELECT recipients, inline_sorted FROM notify_notifications WHERE id = $1`, res.ID).
			Scan(&ids, &sorted); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(ids, c.ids) || sorted != c.sorted {
			t.Errorf("%s: stored %v (sorted %v), want %v (sorted %v)", c.key, ids, sorted, c.ids, c.sorted)
		}
	}
}
