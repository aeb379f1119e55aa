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
// Up to slots calls run at once (more than one lets the database work on two
// batches with two connections). A caller that finds a slot free leads: it
// runs the batch it finds queued (itself first), hands each caller its result,
// and passes its slot to the first caller that queued meanwhile, so no caller
// runs other callers' batches for longer than one call.
type group[T, R any] struct {
	// run does the work for a batch, returning one result per item in order,
	// or an error that every item of the batch gets.
	run   func(items []T) ([]R, error)
	max   int // most items per call
	slots int // most calls at once

	mu      sync.Mutex
	queue   []*groupCall[T, R]
	running int // leaders running a batch
}

type groupCall[T, R any] struct {
	item  T
	res   R
	err   error
	wake  chan struct{}      // closed once: the result is in, or batch is set
	batch []*groupCall[T, R] // set when this call is handed a slot: the batch to run, itself first
}

func newGroup[T, R any](max, slots int, run func([]T) ([]R, error)) *group[T, R] {
	return &group[T, R]{run: run, max: max, slots: slots}
}

// do runs item in the next batch and returns its result.
func (g *group[T, R]) do(item T) (R, error) {
	c := &groupCall[T, R]{item: item, wake: make(chan struct{})}
	g.mu.Lock()
	g.queue = append(g.queue, c)
	if g.running < max(g.slots, 1) {
		// A slot is free, so nobody else is waiting: the batch is c alone.
		g.running++
		batch := g.take()
		g.mu.Unlock()
		g.runBatch(batch)
	} else {
		g.mu.Unlock()
		<-c.wake
		if c.batch != nil {
			g.runBatch(c.batch)
		}
	}
	return c.res, c.err
}

// take removes the next batch from the queue: its head and up to max-1
// callers behind it. g.mu must be held.
func (g *group[T, R]) take() []*groupCall[T, R] {
	n := min(len(g.queue), max(g.max, 1))
	batch := make([]*groupCall[T, R], n)
	copy(batch, g.queue)
	g.queue = g.queue[n:]
	return batch
}

// runBatch is a leader's turn (the leader is batch[0]): it runs the batch,
// hands every other caller its result, and passes the slot on with the next
// batch, or frees it when nobody is waiting.
func (g *group[T, R]) runBatch(batch []*groupCall[T, R]) {
	items := make([]T, len(batch))
	for i, c := range batch {
		items[i] = c.item
	}
	res, err := g.safeRun(items)
	if err == nil && len(res) != len(batch) {
		err = fmt.Errorf("group call returned %d results for %d items", len(res), len(batch))
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
		next := g.take()
		next[0].batch = next
		close(next[0].wake)
	} else {
		g.running--
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
