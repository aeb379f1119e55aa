package jobs

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/notifyd/notifyd/channels"
)

func TestHostFailure(t *testing.T) {
	t.Parallel()
	timeout := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"read timeout", channels.Temporary(fmt.Errorf("POST http://h: %w", timeout), 0), true},
		{"unclassified dial error", &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}, true},
		{"context deadline", channels.Temporary(fmt.Errorf("POST http://h: %w", context.DeadlineExceeded), 0), true},
		{"HTTP 503", channels.Temporary(errors.New("POST http://h: HTTP 503 Service Unavailable"), 0), false},
		{"SMTP 451", errors.New("smtp data: 451 4.7.1 try again later"), false},
		{"refused", channels.Permanent(fmt.Errorf("wrapped: %w", timeout)), false},
		{"rate limited", channels.RateLimited(timeout, time.Second), false},
	} {
		if got := hostFailure(tc.err); got != tc.want {
			t.Errorf("%s: hostFailure = %t, want %t", tc.name, got, tc.want)
		}
	}
}

var errHung = channels.Temporary(&net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}, 0)

type gateClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *gateClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *gateClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// acquireAsync starts an acquire and returns where its answer arrives.
func acquireAsync(ctx context.Context, ts *targets, name string) <-chan *parking {
	out := make(chan *parking, 1)
	go func() {
		p, err := ts.acquire(ctx, name)
		if err != nil {
			p = &parking{reason: "error: " + err.Error()}
		}
		out <- p
	}()
	return out
}

func waitWaiters(t *testing.T, ts *targets, name string, n int) {
	t.Helper()
	var got int
	if !wait(5*time.Second, func() bool {
		ts.mu.Lock()
		defer ts.mu.Unlock()
		got = 0
		if tg := ts.m[name]; tg != nil {
			got = len(tg.waiters)
		}
		return got == n
	}) {
		t.Fatalf("%d lanes wait for %s, want %d", got, name, n)
	}
}

// The gate lets perHost lanes talk to a target at once; the next waits and
// gets the slot of a lane that got an answer.
func TestGateBoundsLanesPerTarget(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ts := newTargets(2, time.Now)
	for range 2 {
		if p, err := ts.acquire(ctx, "h"); p != nil || err != nil {
			t.Fatalf("acquire = %v, %v; want a slot", p, err)
		}
	}
	if p, err := ts.acquire(ctx, "other"); p != nil || err != nil {
		t.Fatalf("another target waited on h: %v, %v", p, err)
	}
	third := acquireAsync(ctx, ts, "h")
	waitWaiters(t, ts, "h", 1)
	ts.release("h", nil)
	if p := <-third; p != nil {
		t.Fatalf("the waiting lane got %+v, want the freed slot", p)
	}

	// A lane that stops waiting (its budget ended) gives up its place.
	wctx, cancel := context.WithCancel(ctx)
	fourth := acquireAsync(wctx, ts, "h")
	waitWaiters(t, ts, "h", 1)
	cancel()
	if p := <-fourth; p == nil || !strings.HasPrefix(p.reason, "error:") {
		t.Fatalf("a cancelled wait returned %+v, want its context's error", p)
	}
	waitWaiters(t, ts, "h", 0)
	ts.release("h", nil)
	ts.release("h", nil)
	if p, err := ts.acquire(ctx, "h"); p != nil || err != nil {
		t.Fatalf("after the releases acquire = %v, %v", p, err)
	}
}

// Host failures in a row open the breaker: lanes waiting for the target are
// parked at once, later ones too until the open period ends; then one probe
// goes through, and its success closes the breaker.
func TestBreakerParksAFailingTarget(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := &gateClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	ts := newTargets(breakerThreshold, clock.now)
	for range breakerThreshold {
		if p, _ := ts.acquire(ctx, "h"); p != nil {
			t.Fatalf("parked before any failure: %+v", p)
		}
	}
	waiting := acquireAsync(ctx, ts, "h")
	waitWaiters(t, ts, "h", 1)
	ts.release("h", errHung) // one failure: the waiter gets the slot
	if p := <-waiting; p != nil {
		t.Fatalf("after one host failure the waiting lane got %+v, want the slot", p)
	}
	// A plain temporary failure (an SMTP 451) neither counts nor resets.
	ts.release("h", channels.Temporary(errors.New("451 busy"), 0))
	ts.release("h", errHung) // two in a row; one slot still held
	for range breakerThreshold - 1 {
		if p, _ := ts.acquire(ctx, "h"); p != nil {
			t.Fatalf("parked after two failures: %+v", p)
		}
	}
	waiting = acquireAsync(ctx, ts, "h")
	waitWaiters(t, ts, "h", 1)
	ts.release("h", errHung) // three: open; the waiting lane is parked at once
	p := <-waiting
	if p == nil || !strings.Contains(p.reason, "did not answer 3 times in a row") || !p.until.After(clock.now()) {
		t.Fatalf("after %d host failures the waiting lane got %+v, want parked until later", breakerThreshold, p)
	}
	if p2, _ := ts.acquire(ctx, "h"); p2 == nil || p2.until != p.until {
		t.Fatalf("while open acquire = %+v, want parked until %s", p2, p.until)
	}
	if p2 := ts.parkedNow("h"); p2 == nil || p2.until != p.until {
		t.Fatalf("parkedNow = %+v, want parked until %s", p2, p.until)
	}
	opened := p.until
	// The two lanes still in a call get plain answers (SMTP 451): no change.
	ts.release("h", channels.Temporary(errors.New("451 busy"), 0))
	ts.release("h", channels.Temporary(errors.New("451 busy"), 0))

	// The open period ends: one probe, the next lane waits for its answer.
	clock.add(opened.Sub(clock.now()))
	if p, _ := ts.acquire(ctx, "h"); p != nil {
		t.Fatalf("no probe after the open period: %+v", p)
	}
	second := acquireAsync(ctx, ts, "h")
	waitWaiters(t, ts, "h", 1)
	ts.release("h", errHung) // the probe failed: open again, for longer
	p = <-second
	if p == nil || p.until.Sub(clock.now()) < breakerFirstOpen {
		t.Fatalf("after a failed probe the waiting lane got %+v, want parked for at least %s", p, breakerFirstOpen)
	}
	clock.add(p.until.Sub(clock.now()))
	if p, _ := ts.acquire(ctx, "h"); p != nil {
		t.Fatalf("no second probe: %+v", p)
	}
	ts.release("h", nil) // the target answered: closed
	for range breakerThreshold {
		if p, _ := ts.acquire(ctx, "h"); p != nil {
			t.Fatalf("parked after the target recovered: %+v", p)
		}
	}
}

// acquireAtAsync is acquireAsync for a bulk lane (bulk) or an interactive
// one, reporting on granted which of the lanes (id) got its slot.
func acquireAtAsync(ctx context.Context, ts *targets, name string, bulk bool, id int, granted chan<- int) {
	go func() {
		if p, err := ts.acquireAt(ctx, name, bulk); p == nil && err == nil {
			granted <- id
		}
	}()
}

// While a large notification's lanes hold every slot of a target and more
// of them wait, a freed slot goes to a one-recipient notification's lane
// (interactive) ahead of the older bulk lanes; a steady stream of
// interactive lanes still lets one bulk lane in every bulkShare slots.
func TestGateServesInteractiveLanesBeforeBulk(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ts := newTargets(2, time.Now)
	for range 2 {
		if p, err := ts.acquireAt(ctx, "email", true); p != nil || err != nil {
			t.Fatalf("acquire = %v, %v; want a slot", p, err)
		}
	}
	granted := make(chan int, 32)
	// Three bulk lanes (ids 100..102) queue first, then an interactive one (0).
	for i := range 3 {
		acquireAtAsync(ctx, ts, "email", true, 100+i, granted)
		waitWaiters(t, ts, "email", i+1)
	}
	acquireAtAsync(ctx, ts, "email", false, 0, granted)
	waitWaiters(t, ts, "email", 4)
	ts.release("email", nil)
	if got := <-granted; got != 0 {
		t.Fatalf("the freed slot went to lane %d, want the interactive lane 0 ahead of the older bulk lanes", got)
	}

	// Interactive lanes keep coming (ids 1..): out of every bulkShare slots
	// freed, one goes to the oldest bulk lane, in the bulk lanes' order.
	next := 1
	order := []int{0}
	for len(order) < 3*bulkShare {
		for {
			ts.mu.Lock()
			interactive := 0
			for _, w := range ts.m["email"].waiters {
				if !w.bulk {
					interactive++
				}
			}
			n := len(ts.m["email"].waiters)
			ts.mu.Unlock()
			if interactive >= 2 {
				break
			}
			acquireAtAsync(ctx, ts, "email", false, next, granted)
			next++
			waitWaiters(t, ts, "email", n+1)
		}
		ts.release("email", nil)
		order = append(order, <-granted)
	}
	var bulk []int
	for i, id := range order {
		if id >= 100 {
			bulk = append(bulk, id)
			if (i+1)%bulkShare != 0 {
				t.Errorf("slot %d went to bulk lane %d; want bulk lanes only every %d slots (order %v)", i+1, id, bulkShare, order)
			}
		}
	}
	if want := []int{100, 101, 102}; !slices.Equal(bulk, want) {
		t.Errorf("bulk lanes got slots %v, want %v in their order (order %v)", bulk, want, order)
	}
}
