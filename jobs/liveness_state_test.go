package jobs

import (
	"slices"
	"testing"
	"time"
)

// A client's claims are due to be taken back only once it has been seen
// gone at every check for the grace: one that takes its lock back in between
// starts over, and this process's own client is never due.
func TestLivenessStateGrace(t *testing.T) {
	t.Parallel()
	var l livenessState
	l.start("me")
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const grace = 4 * time.Second
	l.observe([]string{"a", "b", "me"}, t0)
	if due := l.due(t0.Add(3*time.Second), grace); len(due) != 0 {
		t.Fatalf("due within the grace: %v", due)
	}
	l.observe([]string{"a"}, t0.Add(2*time.Second)) // b retook its lock (a restart of PostgreSQL)
	l.observe([]string{"a", "b"}, t0.Add(3*time.Second))
	if due := l.due(t0.Add(4*time.Second), grace); !slices.Equal(due, []string{"a"}) {
		t.Fatalf("due after the grace = %v, want [a] (b was back in between, me is this process)", due)
	}
	if due := l.due(t0.Add(7*time.Second), grace); !slices.Equal(due, []string{"a", "b"}) {
		t.Fatalf("due = %v, want [a b]", due)
	}
}

// Every loss of the lock counts once, however long it lasts, so that a send
// run that claimed before it can tell, even after the lock is back.
func TestLivenessStateEpoch(t *testing.T) {
	t.Parallel()
	var l livenessState
	if n, lost := l.epoch(); n != 0 || lost {
		t.Fatalf("zero value: %d losses, lost %v", n, lost)
	}
	l.setLost(true)
	l.setLost(true) // still the same loss
	if n, lost := l.epoch(); n != 1 || !lost {
		t.Fatalf("after a loss: %d losses, lost %v", n, lost)
	}
	l.setLost(false)
	l.setLost(true)
	l.setLost(false)
	if n, lost := l.epoch(); n != 2 || lost {
		t.Fatalf("after two losses, retaken: %d losses, lost %v", n, lost)
	}
}
