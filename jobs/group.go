package jobs

import (
	"fmt"
	"sync"
)

// group coalesces the same statement issued by jobs running at the same time
// into one set-based call: group commit. Each job still claims and settles
// only what is its own — a digest job its recipient's rows — but jobs that
// arrive while a call is in flight wait for it to finish and then go to the
// database together, in one round trip and one transaction, instead of one
// each. Nothing waits on purpose: a job alone is sent at once, and a batch
// forms only from jobs that would otherwise have queued for the database.
//
// The first caller with no call in flight leads: it runs the batch it finds
// queued (itself first), hands each caller its result, and passes the lead to
// the first caller that queued meanwhile, so no caller runs other callers'
// batches for longer than one call.
type group[T, R any] struct {
	// run does the work for a batch, returning one result per item in order,
	// or an error that every item of the batch gets.
	run func(items []T) ([]R, error)
	max int // most items per call

	mu    sync.Mutex
	queue []*groupCall[T, R]
	busy  bool // a leader is running a batch
}

type groupCall[T, R any] struct {
	item T
	res  R
	err  error
	wake chan struct{} // closed once: the result is in, or this call leads
	lead bool
}

func newGroup[T, R any](max int, run func([]T) ([]R, error)) *group[T, R] {
	return &group[T, R]{run: run, max: max}
}

// do runs item in the next batch and returns its result.
func (g *group[T, R]) do(item T) (R, error) {
	c := &groupCall[T, R]{item: item, wake: make(chan struct{})}
	g.mu.Lock()
	g.queue = append(g.queue, c)
	if !g.busy {
		g.busy, c.lead = true, true
		g.mu.Unlock()
	} else {
		g.mu.Unlock()
		<-c.wake
	}
	if c.lead {
		g.runBatch()
	}
	return c.res, c.err
}

// runBatch is the leader's turn: the queue's head (the leader itself) and up
// to max-1 callers behind it.
func (g *group[T, R]) runBatch() {
	g.mu.Lock()
	n := min(len(g.queue), max(g.max, 1))
	batch := make([]*groupCall[T, R], n)
	copy(batch, g.queue)
	g.queue = g.queue[n:]
	g.mu.Unlock()

	items := make([]T, n)
	for i, c := range batch {
		items[i] = c.item
	}
	res, err := g.safeRun(items)
	if err == nil && len(res) != n {
		panic("jobs: group run returned a result count unlike its batch")
	}
	for i, c := range batch {
		if err != nil {
			c.err = err
		} else {
			c.res = res[i]
		}
		if i > 0 {
			close(c.wake)
		}
	}

	g.mu.Lock()
	if len(g.queue) > 0 {
		next := g.queue[0]
		next.lead = true
		close(next.wake)
	} else {
		g.busy = false
	}
	g.mu.Unlock()
}

// safeRun runs the batch, turning a panic into an error for every caller so
// that the lead is always passed on.
func (g *group[T, R]) safeRun(items []T) (res []R, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("group call panicked: %v", p)
		}
	}()
	return g.run(items)
}
