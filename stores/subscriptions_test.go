package stores_test

import (
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/notifyd/notifyd/internal/testing/pgtest"
	"github.com/notifyd/notifyd/stores"
)

func TestSubscribeUpsertAndUnsubscribe(t *testing.T) {
	t.Parallel()
	tx := pgtest.Tx(t)
	ctx := t.Context()

	s1, err := stores.Subscribe(ctx, tx, "sub-post-1", "sub-u1", "subscribed")
	if err != nil {
		t.Fatal(err)
	}
	if s1.Topic != "sub-post-1" || s1.Recipient != "sub-u1" || s1.Reason != "subscribed" || s1.CreatedAt.IsZero() ||
		s1.CreatedAt.Location() != time.UTC {
		t.Fatalf("subscribe: %+v", s1)
	}
	// Again with another reason: the reason changes, created_at stays.
	s2, err := stores.Subscribe(ctx, tx, "sub-post-1", "sub-u1", "author")
	if err != nil {
		t.Fatal(err)
	}
	if s2.Reason != "author" || !s2.CreatedAt.Equal(s1.CreatedAt) {
		t.Fatalf("re-subscribe: %+v, first %+v", s2, s1)
	}
	var n int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM notify_subscriptions WHERE topic = 'sub-post-1'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d rows (%v), want 1", n, err)
	}
	if ok, err := stores.Unsubscribe(ctx, tx, "sub-post-1", "sub-u1"); err != nil || !ok {
		t.Fatalf("unsubscribe: %v %v, want true", ok, err)
	}
	if ok, err := stores.Unsubscribe(ctx, tx, "sub-post-1", "sub-u1"); err != nil || ok {
		t.Fatalf("unsubscribe again: %v %v, want false", ok, err)
	}
}

func TestListSubscribersKeyset(t *testing.T) {
	t.Parallel()
	tx := pgtest.Tx(t)
	ctx := t.Context()

	// 250 subscribers whose ids sort differently in byte order and in a
	// linguistic collation (upper case, accents), plus a neighbour topic.
	var want []string
	for i := range 250 {
		id := []string{"a", "B", "é", "z", "Z"}[i%5] + fmt.Sprintf("-%03d", i)
		want = append(want, id)
		if _, err := stores.Subscribe(ctx, tx, "sub-big", id, "subscribed"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := stores.Subscribe(ctx, tx, "sub-big-2", "a-000x", "subscribed"); err != nil {
		t.Fatal(err)
	}
	sort.Strings(want) // Go sorts by bytes, like COLLATE "C"

	for _, limit := range []int{1, 7, 100, 249, 250, 1000} {
		var got []string
		after := ""
		for pages := 0; ; pages++ {
			page, err := stores.ListSubscribers(ctx, tx, "sub-big", after, limit)
			if err != nil {
				t.Fatal(err)
			}
			if len(page.Subscriptions) > limit {
				t.Fatalf("limit %d: page of %d", limit, len(page.Subscriptions))
			}
			for _, s := range page.Subscriptions {
				got = append(got, s.Recipient)
			}
			if page.Next == nil {
				break
			}
			after = *page.Next
			if pages > 300 {
				t.Fatalf("limit %d: paging does not end", limit)
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("limit %d: %d subscribers paged out of order, repeated or dropped", limit, len(got))
		}
	}
	page, err := stores.ListSubscribers(ctx, tx, "sub-none", "", 0)
	if err != nil || page.Subscriptions == nil || len(page.Subscriptions) != 0 || page.Next != nil {
		t.Fatalf("empty topic: %+v %v", page, err)
	}
}

func TestListSubscriptionsOfRecipient(t *testing.T) {
	t.Parallel()
	tx := pgtest.Tx(t)
	ctx := t.Context()
	topics := []string{"sub-t-b", "sub-T-a", "sub-t-c"}
	for _, topic := range topics {
		if _, err := stores.Subscribe(ctx, tx, topic, "sub-me", "watching"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := stores.Subscribe(ctx, tx, "sub-t-b", "sub-other", "watching"); err != nil {
		t.Fatal(err)
	}
	p1, err := stores.ListSubscriptions(ctx, tx, "sub-me", "", 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(p1.Subscriptions) != 2 || p1.Subscriptions[0].Topic != "sub-T-a" || p1.Subscriptions[1].Topic != "sub-t-b" ||
		p1.Next == nil || *p1.Next != "sub-t-b" {
		t.Fatalf("page 1: %+v", p1)
	}
	p2, err := stores.ListSubscriptions(ctx, tx, "sub-me", *p1.Next, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(p2.Subscriptions) != 1 || p2.Subscriptions[0].Topic != "sub-t-c" || p2.Next != nil ||
		p2.Subscriptions[0].Recipient != "sub-me" || p2.Subscriptions[0].Reason != "watching" {
		t.Fatalf("page 2: %+v", p2)
	}
}
