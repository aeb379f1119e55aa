package stores_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/notifyd/notifyd/internal/testing/pgtest"
	"github.com/notifyd/notifyd/stores"
)

func TestPushSubscriptions(t *testing.T) {
	t.Parallel()
	tx := pgtest.Tx(t)
	ctx := t.Context()

	a, created, err := stores.PutPushSubscription(ctx, tx, "r-push", "", "https://push.test/a", "k1", "a1")
	if err != nil || !created {
		t.Fatalf("put a: %v created %v", err, created)
	}
	b, _, err := stores.PutPushSubscription(ctx, tx, "r-push", "", "https://push.test/b", "k2", "a2")
	if err != nil {
		t.Fatal(err)
	}
	other, _, err := stores.PutPushSubscription(ctx, tx, "r-other", "", "https://push.test/a", "k3", "a3")
	if err != nil || other == a {
		t.Fatalf("the same endpoint for another recipient: %v, id %s", err, other)
	}
	// The same endpoint again replaces its keys and keeps its id.
	if err := stores.PushFailed(ctx, tx, []string{a}); err != nil {
		t.Fatal(err)
	}
	again, created, err := stores.PutPushSubscription(ctx, tx, "r-push", "", "https://push.test/a", "k1b", "a1b")
	if err != nil || created || again != a {
		t.Fatalf("put a again: id %s (want %s), created %v, %v", again, a, created, err)
	}
	subs, err := stores.ListPushSubscriptions(ctx, tx, "r-push", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(subs) != 2 || subs[0].ID != a || subs[0].P256dh != "k1b" || subs[0].Auth != "a1b" || subs[0].Failures != 0 || subs[1].ID != b {
		t.Fatalf("list: %+v", subs)
	}

	// Several recipients' subscriptions in one read, each oldest first.
	of, err := stores.ListPushSubscriptionsOf(ctx, tx, []string{"r-push", "r-other", "r-none"})
	if err != nil {
		t.Fatal(err)
	}
	if len(of) != 2 || len(of["r-push"]) != 2 || of["r-push"][0].ID != a || of["r-push"][1].ID != b ||
		len(of["r-other"]) != 1 || of["r-other"][0].ID != other {
		t.Fatalf("list of three recipients: %+v", of)
	}

	if err := stores.PushSucceeded(ctx, tx, []string{a}); err != nil {
		t.Fatal(err)
	}
	if err := stores.PushFailed(ctx, tx, []string{b}); err != nil {
		t.Fatal(err)
	}
	subs, _ = stores.ListPushSubscriptions(ctx, tx, "r-push", "")
	if subs[0].LastSuccessAt == nil || subs[1].LastSuccessAt != nil || subs[1].Failures != 1 {
		t.Fatalf("after outcomes: %+v", subs)
	}

	// A recipient deletes only their own.
	if err := stores.DeletePushSubscription(ctx, tx, "r-push", "", other); !errors.Is(err, stores.ErrNotFound) {
		t.Fatalf("delete another's: %v", err)
	}
	if err := stores.DeletePushSubscription(ctx, tx, "r-push", "", "not-a-uuid"); !errors.Is(err, stores.ErrNotFound) {
		t.Fatalf("delete bad id: %v", err)
	}
	if err := stores.DeletePushSubscription(ctx, tx, "r-push", "", a); err != nil {
		t.Fatal(err)
	}
	if err := stores.RemovePushSubscriptions(ctx, tx, []string{b}); err != nil {
		t.Fatal(err)
	}
	if subs, _ = stores.ListPushSubscriptions(ctx, tx, "r-push", ""); len(subs) != 0 {
		t.Fatalf("left: %+v", subs)
	}

	// The limit per recipient.
	for i := range stores.MaxPushSubscriptions {
		if _, _, err := stores.PutPushSubscription(ctx, tx, "r-many", "", fmt.Sprintf("https://push.test/%d", i), "k", "a"); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := stores.PutPushSubscription(ctx, tx, "r-many", "", "https://push.test/one-more", "k", "a"); !errors.Is(err, stores.ErrTooManyPushSubscriptions) {
		t.Fatalf("over the limit: %v", err)
	}
	if _, _, err := stores.PutPushSubscription(ctx, tx, "r-many", "", "https://push.test/0", "k2", "a2"); err != nil {
		t.Fatalf("re-registering at the limit: %v", err)
	}

	// Erasing the recipient deletes them.
	if _, err := stores.EraseRecipient(ctx, tx, "r-many"); err != nil && !errors.Is(err, stores.ErrNotFound) {
		t.Fatal(err)
	}
	if subs, _ = stores.ListPushSubscriptions(ctx, tx, "r-many", ""); len(subs) != 0 {
		t.Fatalf("erased recipient keeps %d subscriptions", len(subs))
	}
}

func TestRecipientPhoneStored(t *testing.T) {
	t.Parallel()
	tx := pgtest.Tx(t)
	ctx := t.Context()
	out, err := stores.PutRecipient(ctx, tx, stores.RecipientProfile{ID: "r-phone", Phone: ptr("+14155550123")})
	if err != nil || out.Phone == nil || *out.Phone != "+14155550123" {
		t.Fatalf("put: %+v, %v", out, err)
	}
	got, err := stores.GetRecipient(ctx, tx, "r-phone")
	if err != nil || got.Phone == nil || *got.Phone != "+14155550123" {
		t.Fatalf("get: %+v, %v", got, err)
	}
}
