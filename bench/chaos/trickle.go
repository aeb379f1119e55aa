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
	refused   int
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
				t.refused++
				s.logf("send %s refused: %v", k, err)
			}
			t.mu.Unlock()
		}
	}()
	return t
}

// Stop ends the trickle (again is harmless) and returns what was committed
// and how many sends were refused.
func (t *trickle) Stop() ([]small, int) {
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
	return append([]small(nil), t.committed...), t.refused
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
