package main

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// small is a one-recipient notification a trickle sent and the API answered
// 202 for: committed.
type small struct{ id, key string }

// trickle sends one-recipient notifications at 20/s while a scenario breaks
// something, and keeps those the API answered 202 (committed, so they must
// survive whatever the scenario does).
type trickle struct {
	mu        sync.Mutex
	committed []small
	refused   []string // keys whose send answered an error
	stop      chan struct{}
	done      chan struct{}
}

// startTrickle sends notification i (key prefix-i) to recipient i mod n
// through send every 50 ms until Stop.
func (s *stage) startTrickle(ctx context.Context, prefix string, n int,
	send func(ctx context.Context, i int, key, recipient string) (string, error)) *trickle {
	t := &trickle{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(t.done)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-t.stop:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			k := fmt.Sprintf("%s-%d", prefix, i)
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			id, err := send(rctx, i, k, recipientID(i%n))
			cancel()
			t.mu.Lock()
			if err == nil {
				t.committed = append(t.committed, small{id, k})
			} else {
				t.refused = append(t.refused, k)
				s.logf("send %s refused: %v", k, err)
			}
			t.mu.Unlock()
		}
	}()
	return t
}

// Stop ends the trickle (again is harmless) and returns what was committed
// and the keys of the sends that answered an error.
func (t *trickle) Stop() ([]small, []string) {
	t.mu.Lock()
	select {
	case <-t.stop:
	default:
		close(t.stop)
	}
	t.mu.Unlock()
	<-t.done
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]small(nil), t.committed...), append([]string(nil), t.refused...)
}

// committedAnyway finds the refused sends that committed all the same: a
// connection lost while PostgreSQL committed leaves the caller an error
// and the outcome unknown (a retry with the same key answers duplicate).
// Those are notifications like any other and must settle.
func (s *stage) committedAnyway(ctx context.Context, r *result, refused []string) []small {
	var out []small
	for _, k := range refused {
		var id string
		err := s.db.pool.QueryRow(ctx, `SELECT id::text FROM notify_notifications WHERE key = $1`, k).Scan(&id)
		if err != nil {
			continue // not committed (pgx.ErrNoRows), or unknown: checked no further
		}
		r.note("send %s answered an error while its commit was in doubt, and had committed", k)
		out = append(out, small{id, k})
	}
	return out
}

// settleSmalls waits for each committed small notification to settle, and
// adds its snapshot and its one inbox item to the expectation; one that is
// gone or does not settle fails the scenario.
func (s *stage) settleSmalls(ctx context.Context, r *result, smalls []small, snaps map[string]*snapshot, inbox map[string]int) {
	for _, sm := range smalls {
		snap, ok := s.waitFor(ctx, sm.id, sm.key, verifyReserve/2, func(snap *snapshot) bool {
			return snap.final() && snap.nonTerminal == 0 && len(snap.rows) == 1
		})
		switch {
		case !ok && snap == nil:
			r.fail("%s was answered 202 but is not in the database: lost", sm.key)
		case !ok:
			r.fail("%s did not settle: notification=%s %s", sm.key, snap.status, snap.statuses())
		default:
			snaps[sm.key] = snap
			inbox[sm.key] = 1
		}
	}
}
