package jobs

import (
	"fmt"
	"sync"
	"time"
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
// runs itself and the batch it finds queued behind it, hands each caller its
// result, and passes its slot to the first caller that queued meanwhile, which
// leads the next batch, so no caller runs other callers' batches for longer
// than one call.
//
// A group may linger (newLingeringGroup): its leader waits, before it runs,
// until want() callers are in the batch or its oldest caller has waited
// linger. That trades a few milliseconds per call for far fewer calls when
// many callers arrive close together but not at once (each send lane of a
// process settles one message at a time); with want() callers or fewer
// around there is nothing to wait for, and a caller alone runs at once.
type group[T, R any] struct {
	// run does the work for a batch, returning one result per item in order,
	// or an error that every item of the batch gets.
	run    func(items []T) ([]R, error)
	max    int // most items per call
	slots  int // most calls at once
	linger time.Duration
	want   func() int // how many callers a lingering leader waits for

	mu      sync.Mutex
	queue   []*groupCall[T, R]
	running int           // leaders running (or gathering) a batch
	arrived chan struct{} // a lingering leader's wake-up: a caller queued
}

type groupCall[T, R any] struct {
	item   T
	queued time.Time
	res    R
	err    error
	wake   chan struct{} // closed once: the result is in, or this call leads
	lead   bool          // set before wake is closed: run the next batch
}

func newGroup[T, R any](max, slots int, run func([]T) ([]R, error)) *group[T, R] {
	return &group[T, R]{run: run, max: max, slots: slots}
}

// newLingeringGroup is newGroup with a leader that waits up to linger for
// want() callers before it runs.
func newLingeringGroup[T, R any](max, slots int, linger time.Duration, want func() int, run func([]T) ([]R, error)) *group[T, R] {
	return &group[T, R]{run: run, max: max, slots: slots, linger: linger, want: want, arrived: make(chan struct{}, 1)}
}

// do runs item in the next batch and returns its result.
func (g *group[T, R]) do(item T) (R, error) {
	c := &groupCall[T, R]{item: item, wake: make(chan struct{})}
	if g.linger > 0 {
		c.queued = time.Now()
	}
	g.mu.Lock()
	if g.running < max(g.slots, 1) {
		g.running++
		g.lead(c) // unlocks g.mu
	} else {
		g.queue = append(g.queue, c)
		if g.arrived != nil {
			select {
			case g.arrived <- struct{}{}:
			default:
			}
		}
		g.mu.Unlock()
		<-c.wake
		if c.lead {
			g.mu.Lock()
			g.lead(c)
		}
	}
	return c.res, c.err
}

// lead runs c's batch: c and up to max-1 callers queued behind it, gathered
// for up to linger in a lingering group. g.mu must be held; lead unlocks it.
func (g *group[T, R]) lead(c *groupCall[T, R]) {
	g.gather(c)
	n := min(len(g.queue), max(g.max, 1)-1)
	batch := make([]*groupCall[T, R], 1, n+1)
	batch[0] = c
	batch = append(batch, g.queue[:n]...)
	g.queue = g.queue[n:]
	g.mu.Unlock()
	g.runBatch(batch)
}

// gather waits, in a lingering group, until the batch led by c would hold
// want() callers, or c has waited linger. g.mu must be held; it is released
// while waiting.
func (g *group[T, R]) gather(c *groupCall[T, R]) {
	if g.linger <= 0 || g.want == nil {
		return
	}
	var t *time.Timer
	for 1+len(g.queue) < min(g.want(), max(g.max, 1)) {
		wait := time.Until(c.queued.Add(g.linger))
		if wait <= 0 {
			break
		}
		if t == nil {
			t = time.NewTimer(wait)
		} else {
			t.Reset(wait)
		}
		g.mu.Unlock()
		select {
		case <-g.arrived:
		case <-t.C:
		}
		g.mu.Lock()
	}
	if t != nil {
		t.Stop()
	}
}

// runBatch is a leader's turn (the leader is batch[0]): it runs the batch,
// hands every other caller its result, and passes the slot on to the first
// caller queued meanwhile, or frees it when nobody is waiting.
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
		next := g.queue[0]
		g.queue = g.queue[1:]
		next.lead = true
		close(next.wake)
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
