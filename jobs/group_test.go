package jobs

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Callers that arrive while a call is in flight go together in the next one;
// each gets its own result.
func TestGroupBatchesConcurrentCallers(t *testing.T) {
	release := make(chan struct{})
	var calls atomic.Int64
	var sizes []int
	var mu sync.Mutex
	g := newGroup(64, 1, func(items []int) ([]int, error) {
		if calls.Add(1) == 1 {
			<-release // hold the first call until everyone else has queued
		}
		mu.Lock()
		sizes = append(sizes, len(items))
		mu.Unlock()
		out := make([]int, len(items))
		for i, v := range items {
			out[i] = v * 10
		}
		return out, nil
	})

	first := make(chan int)
	go func() {
		r, _ := g.do(1)
		first <- r
	}()
	waitQueued(t, g, 0) // the first call leads and is in flight

	const n = 20
	var wg sync.WaitGroup
	results := make([]int, n)
	for i := range n {
		wg.Go(func() {
			r, err := g.do(100 + i)
			if err != nil {
				t.Error(err)
			}
			results[i] = r
		})
	}
	waitQueued(t, g, n)
	close(release)
	if r := <-first; r != 10 {
		t.Fatalf("first caller got %d, want 10", r)
	}
	wg.Wait()
	for i, r := range results {
		if r != (100+i)*10 {
			t.Fatalf("caller %d got %d, want %d", i, r, (100+i)*10)
		}
	}
	if calls.Load() != 2 || sizes[0] != 1 || sizes[1] != n {
		t.Fatalf("%d calls of sizes %v, want 2: [1 %d]", calls.Load(), sizes, n)
	}
}

// A batch never exceeds max; the rest go in the following calls.
func TestGroupRespectsMax(t *testing.T) {
	release := make(chan struct{})
	var largest atomic.Int64
	var calls atomic.Int64
	g := newGroup(3, 1, func(items []int) ([]int, error) {
		if calls.Add(1) == 1 {
			<-release
		}
		if int64(len(items)) > largest.Load() {
			largest.Store(int64(len(items)))
		}
		return items, nil
	})
	go g.do(0)
	waitQueued(t, g, 0)
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Go(func() {
			if r, err := g.do(i); err != nil || r != i {
				t.Errorf("do(%d) = %d, %v", i, r, err)
			}
		})
	}
	waitQueued(t, g, 10)
	close(release)
	wg.Wait()
	if largest.Load() != 3 || calls.Load() != 5 {
		t.Fatalf("largest batch %d over %d calls, want 3 over 5 (1 + 3+3+3+1)", largest.Load(), calls.Load())
	}
}

// An error or a panic reaches every caller of that batch, and the group goes
// on working afterwards.
func TestGroupErrorAndPanicReachEveryCaller(t *testing.T) {
	boom := errors.New("boom")
	var mode atomic.Int64
	g := newGroup(8, 1, func(items []int) ([]int, error) {
		switch mode.Load() {
		case 1:
			return nil, boom
		case 2:
			panic("kaput")
		}
		return items, nil
	})
	mode.Store(1)
	if _, err := g.do(1); !errors.Is(err, boom) {
		t.Fatalf("err %v, want boom", err)
	}
	mode.Store(2)
	if _, err := g.do(2); err == nil {
		t.Fatal("a panicking run returned no error")
	}
	mode.Store(0)
	if r, err := g.do(3); err != nil || r != 3 {
		t.Fatalf("after errors: %d, %v", r, err)
	}
}

// waitQueued waits until n callers wait behind a call in flight.
func waitQueued[T, R any](t *testing.T, g *group[T, R], n int) {
	t.Helper()
	var q int
	var busy bool
	if !wait(5*time.Second, func() bool {
		g.mu.Lock()
		q, busy = len(g.queue), g.running == g.slots
		g.mu.Unlock()
		return busy && q == n
	}) {
		t.Fatalf("%d callers queued (busy %v), want %d", q, busy, n)
	}
}

// With two slots, two callers run at once; a third waits and goes next.
func TestGroupSlotsRunConcurrently(t *testing.T) {
	var inFlight, peak atomic.Int64
	both := make(chan struct{})
	var once sync.Once
	g := newGroup(8, 2, func(items []int) ([]int, error) {
		if n := inFlight.Add(1); n > peak.Load() {
			peak.Store(n)
		}
		if inFlight.Load() == 2 {
			once.Do(func() { close(both) })
		}
		select {
		case <-both:
		case <-time.After(5 * time.Second):
		}
		inFlight.Add(-1)
		return items, nil
	})
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Go(func() {
			if r, err := g.do(i); err != nil || r != i {
				t.Errorf("do(%d) = %d, %v", i, r, err)
			}
		})
	}
	wg.Wait()
	if peak.Load() != 2 {
		t.Fatalf("at most %d calls ran at once, want 2", peak.Load())
	}
	if g.running != 0 || len(g.queue) != 0 {
		t.Fatalf("after all calls: %d running, %d queued", g.running, len(g.queue))
	}
}

// A lingering leader waits for want() callers, or for linger, before it runs.
func TestGroupLingersForTheCallersItExpects(t *testing.T) {
	var mu sync.Mutex
	var sizes []int
	var want atomic.Int64
	g := newLingeringGroup(64, 1, time.Minute, func() int { return int(want.Load()) }, func(items []int) ([]int, error) {
		mu.Lock()
		sizes = append(sizes, len(items))
		mu.Unlock()
		return items, nil
	})
	// Three callers expected: the first waits for the other two, however
	// late they come within the linger.
	want.Store(3)
	var wg sync.WaitGroup
	wg.Go(func() { g.do(1) })
	waitQueued(t, g, 0) // it leads, gathering
	wg.Go(func() { g.do(2) })
	waitQueued(t, g, 1)
	wg.Go(func() { g.do(3) })
	wg.Wait()
	// A caller alone, with nobody else expected, runs at once.
	want.Store(1)
	if r, err := g.do(4); err != nil || r != 4 {
		t.Fatalf("do(4) = %d, %v", r, err)
	}
	if fmt.Sprint(sizes) != "[3 1]" {
		t.Fatalf("batches of %v, want [3 1]", sizes)
	}

	// Fewer callers than expected: the leader stops waiting after linger.
	short := newLingeringGroup(64, 1, 20*time.Millisecond, func() int { return 10 }, func(items []int) ([]int, error) {
		return items, nil
	})
	start := time.Now()
	if r, err := short.do(5); err != nil || r != 5 {
		t.Fatalf("do(5) = %d, %v", r, err)
	}
	if took := time.Since(start); took < 20*time.Millisecond || took > 5*time.Second {
		t.Fatalf("a leader expecting callers that never come ran after %s, want its linger of 20ms", took)
	}
}
