package jobs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/stores"
)

// A target is where a delivery goes: the SMTP relay of the email channel, the
// host of a recipient's webhook_url, the host of a notifier's Slack or bulk
// webhook URL. One target never waits on another: a send job sends each
// target's share of its batch in a lane of its own, and every process keeps,
// per target, a gate that bounds how many lanes talk to it at once and a
// circuit breaker that parks its deliveries while it does not answer.
const (
	// breakerThreshold is how many host failures in a row (timeouts,
	// connections refused or dropped, see hostFailure) open a target's
	// breaker.
	breakerThreshold = 3
	// breakerFirstOpen is how long a breaker first stays open; each failed
	// probe doubles it, up to lastRetry.
	breakerFirstOpen = 5 * time.Second
	// DefaultSendPerHost is the most lanes of one process that talk to one
	// target at once when queues.send_per_host is not set. It matches the
	// email channel's SMTP connection pool.
	DefaultSendPerHost = 8
)

// targetOf names the destination of a claimed delivery: what the channel's
// Target says (a webhook's host; for a channels.PreparedTargeter, what it
// says from the batch's prepared value, such as the push services of a
// recipient's subscriptions), or else the channel itself for a per-recipient
// delivery (email's one relay) and the channel and notifier for a bulk one.
func (d *Deps) targetOf(c *stores.Claimed, prepared map[string]any) string {
	var ch any
	if c.Recipient != nil {
		ch = d.Channels[c.Channel]
	} else {
		ch = d.Bulk[c.Channel]
	}
	pt, prep := ch.(channels.PreparedTargeter)
	t, plain := ch.(channels.Targeter)
	if prep || plain {
		msg := channels.Message{DeliveryID: c.ID, NotificationID: c.NotificationID, Notifier: c.Notifier, Key: c.Key}
		if c.Recipient != nil {
			msg.Recipient = &channels.Recipient{ID: *c.Recipient, Email: c.Email, Name: c.Name, Locale: c.Locale,
				Timezone: c.Timezone, WebhookURL: c.Webhook, Phone: c.Phone}
		}
		var name string
		if prep {
			// The prepared registrations a notification reaches depend on
			// its tenant (channels.PushSubscriptionsFor).
			msg.Tenant, _ = decodeTenant(c.Tenant)
			name = pt.TargetPrepared(prepared[c.Channel], msg)
		} else {
			name = t.Target(msg)
		}
		if name != "" {
			return c.Channel + " " + name
		}
	}
	if c.Recipient != nil {
		return c.Channel
	}
	return c.Channel + " " + c.Notifier
}

// hostFailure reports whether a send failed because its target did not
// answer: the call timed out, or the connection could not be made or was
// dropped. Such a failure says nothing about the message and much about the
// target, and it is the kind that holds a worker for a whole timeout. A
// refusal, a rate limit or an answer such as SMTP 451 or HTTP 503 came back
// promptly: the target is alive.
func hostFailure(err error) bool {
	if err == nil {
		return false
	}
	if kind, _ := channels.Classify(err); kind != channels.KindTemporary {
		return false
	}
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// targets holds every target's gate and breaker for one process. It is safe
// for concurrent use.
type targets struct {
	perHost int
	now     func() time.Time

	mu sync.Mutex
	m  map[string]*target
}

// target is one destination's state. Its fields are guarded by targets.mu.
type target struct {
	inflight  int       // lanes holding a slot
	failures  int       // host failures in a row
	openUntil time.Time // the breaker is open until then
	open      time.Duration
	lastErr   string
	waiters   []*waiter // lanes waiting for a slot, oldest first
	// passed is how many slots went to interactive lanes in a row while a
	// bulk lane waited (see grant).
	passed int
}

// waiter is a lane waiting for a slot: it gets exactly one answer.
type waiter struct {
	answer chan *parking // nil: the slot is yours; else: park
	bulk   bool          // a lane of a send_bulk job
}

// bulkShare bounds how a target's slots are shared while both kinds of lane
// wait: a free slot goes to the oldest interactive lane (of a send job on the
// send queue: one-recipient notifications and retries) before any bulk lane
// (of a large fan-out's send_bulk job), except that every bulkShare-th slot
// in a row goes to the oldest bulk lane, so a steady stream of interactive
// sends slows a large notification down but never stops it.
const bulkShare = 4

// parking says a delivery is not attempted now and when it may be tried again.
type parking struct {
	until  time.Time
	reason string
}

func newTargets(perHost int, now func() time.Time) *targets {
	if perHost <= 0 {
		perHost = DefaultSendPerHost
	}
	return &targets{perHost: perHost, now: now, m: map[string]*target{}}
}

func (ts *targets) get(name string) *target {
	t := ts.m[name]
	if t == nil {
		t = &target{open: breakerFirstOpen}
		ts.m[name] = t
	}
	return t
}

// limit is how many lanes may talk to t at once: one (the probe) while its
// breaker is half open, after an open period that has not yet been answered.
func (ts *targets) limit(t *target) int {
	if t.failures >= breakerThreshold {
		return 1
	}
	return ts.perHost
}

// acquire waits for a slot of the named target. It returns nil with the
// slot held (the caller must release it), or the parking of a delivery that
// must not be attempted now: the target's breaker is open, or opened while
// the caller waited. Waiting ends, with ctx's error, when ctx does: pass a
// context that ends at the lane's budget.
//
// A waiter waits at most as long as a slot holder's send, which its channel's
// timeout bounds. acquire is for an interactive lane; see acquireAt.
func (ts *targets) acquire(ctx context.Context, name string) (*parking, error) {
	return ts.acquireAt(ctx, name, false)
}

// acquireAt is acquire for a bulk lane (bulk) or an interactive one: a free
// slot goes to an interactive waiter before a bulk one (see bulkShare).
func (ts *targets) acquireAt(ctx context.Context, name string, bulk bool) (*parking, error) {
	ts.mu.Lock()
	t := ts.get(name)
	if p := ts.parked(name, t); p != nil {
		ts.mu.Unlock()
		return p, nil
	}
	if t.inflight < ts.limit(t) {
		t.inflight++
		ts.mu.Unlock()
		return nil, nil
	}
	w := &waiter{answer: make(chan *parking, 1), bulk: bulk}
	t.waiters = append(t.waiters, w)
	ts.mu.Unlock()

	select {
	case p := <-w.answer:
		return p, nil
	case <-ctx.Done():
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	for i, x := range t.waiters {
		if x == w {
			t.waiters = append(t.waiters[:i], t.waiters[i+1:]...)
			return nil, ctx.Err()
		}
	}
	// Answered meanwhile: hand a granted slot on.
	if p := <-w.answer; p == nil {
		t.inflight--
		ts.grant(t)
	}
	return nil, ctx.Err()
}

// parked is the parking of a delivery to t while its breaker is open, or nil.
// ts.mu must be held.
func (ts *targets) parked(name string, t *target) *parking {
	now := ts.now()
	if !now.Before(t.openUntil) {
		return nil
	}
	return &parking{until: t.openUntil, reason: fmt.Sprintf(
		"not attempted: %s did not answer %d times in a row, so its deliveries wait until %s (last error: %s)",
		name, t.failures, t.openUntil.UTC().Format(time.RFC3339), t.lastErr)}
}

// release gives back a slot of the named target with the outcome of the send
// made with it: a host failure counts towards opening the breaker (which
// parks every lane waiting for the target), an answer closes it, and any
// other temporary failure leaves it as it is. One host failure alone parks
// nobody else: a single hung SMTP conversation says little about the relay.
func (ts *targets) release(name string, err error) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	t := ts.get(name)
	t.inflight--
	switch {
	case hostFailure(err):
		t.failures++
		t.lastErr = err.Error()
		if t.failures >= breakerThreshold {
			t.openUntil = ts.now().Add(jitter(t.open))
			t.open = min(2*t.open, lastRetry)
			p := ts.parked(name, t)
			for _, w := range t.waiters {
				w.answer <- p
			}
			t.waiters = nil
			return
		}
	case err == nil:
		t.failures, t.open, t.openUntil = 0, breakerFirstOpen, time.Time{}
	default:
		if kind, _ := channels.Classify(err); kind != channels.KindTemporary {
			t.failures, t.open, t.openUntil = 0, breakerFirstOpen, time.Time{}
		}
	}
	ts.grant(t)
	if t.inflight == 0 && t.failures == 0 {
		delete(ts.m, name) // an idle, healthy target needs no memory
	}
}

// parkedNow is the parking of a delivery to the named target while its
// breaker is open, or nil.
func (ts *targets) parkedNow(name string) *parking {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.parked(name, ts.get(name))
}

// grant hands free slots to the waiters: the oldest interactive one first,
// the oldest bulk one when no interactive lane waits or when bulkShare-1
// interactive ones went ahead of it in a row. ts.mu must be held.
func (ts *targets) grant(t *target) {
	for len(t.waiters) > 0 && t.inflight < ts.limit(t) {
		firstBulk, firstInteractive := -1, -1
		for i, w := range t.waiters {
			if w.bulk && firstBulk < 0 {
				firstBulk = i
			}
			if !w.bulk && firstInteractive < 0 {
				firstInteractive = i
			}
			if firstBulk >= 0 && firstInteractive >= 0 {
				break
			}
		}
		i := firstInteractive
		switch {
		case firstBulk < 0:
			t.passed = 0
		case firstInteractive < 0 || t.passed >= bulkShare-1:
			i, t.passed = firstBulk, 0
		default:
			t.passed++
		}
		w := t.waiters[i]
		t.waiters = append(t.waiters[:i], t.waiters[i+1:]...)
		t.inflight++
		w.answer <- nil
	}
}
