package stores_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/notifyd/notifyd/internal/testing/pgtest"
	"github.com/notifyd/notifyd/stores"
)

func TestPutListUnmute(t *testing.T) {
	t.Parallel()
	tx := pgtest.Tx(t)
	ctx := t.Context()

	later := time.Now().Add(time.Hour).UTC().Truncate(time.Microsecond)
	m, err := stores.PutMute(ctx, tx, "mute-a", "topic:post-9", &later, 10)
	if err != nil {
		t.Fatal(err)
	}
	if m.Target != "topic:post-9" || m.Until == nil || !m.Until.Equal(later) || m.Until.Location() != time.UTC {
		t.Fatalf("put: %+v", m)
	}
	// The same target again replaces the end: here, forever.
	if m, err = stores.PutMute(ctx, tx, "mute-a", "topic:post-9", nil, 10); err != nil || m.Until != nil {
		t.Fatalf("put forever: %+v %v", m, err)
	}
	if _, err := stores.PutMute(ctx, tx, "mute-a", "notifier:comment.created", &later, 10); err != nil {
		t.Fatal(err)
	}
	// Past ends are refused and write nothing.
	past := time.Now().Add(-time.Minute)
	if _, err := stores.PutMute(ctx, tx, "mute-a", "topic:old", &past, 10); !errors.Is(err, stores.ErrMuteExpired) {
		t.Fatalf("past until: %v, want ErrMuteExpired", err)
	}
	// An expired row (written before it expired) is invisible to readers.
	if _, err := tx.Exec(ctx, `INSERT INTO notify_mutes (recipient, target, until) VALUES ('mute-a', 'topic:expired', now() - interval '1 second')`); err != nil {
		t.Fatal(err)
	}
	if _, err := stores.PutMute(ctx, tx, "mute-b", "topic:post-9", nil, 10); err != nil {
		t.Fatal(err)
	}

	mutes, err := stores.ListMutes(ctx, tx, "mute-a")
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(targets(mutes)); got != "[notifier:comment.created topic:post-9]" {
		t.Fatalf("mutes %s", got)
	}
	if mutes[1].Until != nil || mutes[0].Until == nil {
		t.Fatalf("until: %+v", mutes)
	}

	if ok, err := stores.Unmute(ctx, tx, "mute-a", "topic:post-9"); err != nil || !ok {
		t.Fatalf("unmute: %v %v", ok, err)
	}
	if ok, err := stores.Unmute(ctx, tx, "mute-a", "topic:post-9"); err != nil || ok {
		t.Fatalf("unmute again: %v %v", ok, err)
	}
	if ok, err := stores.Unmute(ctx, tx, "mute-a", "topic:expired"); err != nil || ok {
		t.Fatalf("unmute of an expired mute: %v %v, want false", ok, err)
	}
	if mutes, err := stores.ListMutes(ctx, tx, "mute-b"); err != nil || len(mutes) != 1 {
		t.Fatalf("mute-b's mutes: %v %v", mutes, err)
	}
}

func TestPutMuteLimit(t *testing.T) {
	t.Parallel()
	tx := pgtest.Tx(t)
	ctx := t.Context()
	for i := range 3 {
		if _, err := stores.PutMute(ctx, tx, "mute-lim", fmt.Sprintf("topic:%d", i), nil, 3); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := stores.PutMute(ctx, tx, "mute-lim", "topic:3", nil, 3); !errors.Is(err, stores.ErrTooManyMutes) {
		t.Fatalf("fourth mute: %v, want ErrTooManyMutes", err)
	}
	// Changing an existing mute is not a new one.
	later := time.Now().Add(time.Hour)
	if _, err := stores.PutMute(ctx, tx, "mute-lim", "topic:1", &later, 3); err != nil {
		t.Fatalf("update at the limit: %v", err)
	}
	// Expired mutes do not count (and are cleaned up on the way).
	if _, err := tx.Exec(ctx, `UPDATE notify_mutes SET until = now() - interval '1 hour' WHERE recipient = 'mute-lim' AND target = 'topic:0'`); err != nil {
		t.Fatal(err)
	}
	if _, err := stores.PutMute(ctx, tx, "mute-lim", "topic:3", nil, 3); err != nil {
		t.Fatalf("after one expired: %v", err)
	}
	var n int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM notify_mutes WHERE recipient = 'mute-lim'`).Scan(&n); err != nil || n != 3 {
		t.Fatalf("%d rows (%v), want 3: the expired one deleted", n, err)
	}
}

func targets(ms []stores.Mute) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Target
	}
	return out
}
