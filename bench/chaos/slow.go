package main

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// slowHookTimeout is channels.webhook.timeout in the slow-targets scenario:
// longer than the whole email run takes even on a loaded machine, so an email
// that waited on a hung webhook shows.
const slowHookTimeout = 30 * time.Second

// slowLease is retry.lease in the slow-targets scenario: longer than the hung
// calls, which are claims a live worker still holds (at the other scenarios'
// 5 s the retry sweep took them back mid-call and sent them again, and the
// hung host held eight requests for three deliveries).
const slowLease = 2 * time.Minute

// runSlowTargets: one notification to 1k recipients with email, every tenth
// with a webhook on a healthy host, and three with a webhook_url on a host
// that takes requests and never answers. One target never waits on another:
// every email and every healthy webhook arrives well within one webhook
// timeout; the hung deliveries fail at their timeout and are retried or
// parked by their host's breaker, no send job holds its worker much past the
// timeout, and once the host answers again they are sent, once each.
func runSlowTargets(ctx context.Context, e *env, r *result, seed uint64) error {
	s, err := newStage(ctx, e, r, "slow", e.shared, seed)
	if err != nil {
		return err
	}
	defer s.close()
	n := scaled(e, 1000)
	s.hooks = newHookbox(nil)
	tarpit := newTarpit()
	defer tarpit.close()
	sl, err := s.addSlot(ctx, "a", daemonConfig{fanoutChunk: 500, send: chaosSend, sendBatch: chaosSendBatch,
		webhook: true, webhookTimeout: slowHookTimeout, lease: slowLease})
	if err != nil {
		return err
	}
	hung := map[string]bool{}
	for k := range 3 {
		hung[recipientID(k*n/3+n/6)] = true
	}
	var healthy int
	withHook := func(i int) string {
		id := recipientID(i)
		switch {
		case hung[id]:
			return tarpit.srv.URL + "/hooks/" + id
		case i%10 == 0:
			return s.hooks.srv.URL + "/hooks/" + id
		}
		return ""
	}
	for i := range n {
		if !hung[recipientID(i)] && i%10 == 0 {
			healthy++
		}
	}
	if err := s.profiles(ctx, n, withHook); err != nil {
		return err
	}
	if err := s.start(ctx, sl); err != nil {
		return err
	}
	const key = "slow-1"
	start := time.Now()
	id, err := s.send(ctx, sl, key, ids(0, n))
	if err != nil {
		return err
	}

	// Every email and healthy webhook, while the hung ones are still hung:
	// before the first hung request has reached its timeout. (An absolute
	// bound would measure the machine: this scenario runs beside the others.)
	var took time.Duration
	for {
		mails, hooks := s.mail.Count(), len(s.hooks.receipts().order)
		if mails >= n && hooks >= healthy {
			took = time.Since(start)
			break
		}
		if time.Since(start) > 2*slowHookTimeout {
			r.fail("after %s only %d of %d emails and %d of %d healthy webhooks had arrived", time.Since(start).Round(time.Second),
				mails, n, hooks, healthy)
			break
		}
		if !sleep(ctx, 50*time.Millisecond) {
			return ctx.Err()
		}
	}
	if took > 0 {
		r.note("%d emails and %d webhooks to a healthy host all arrived %s after the send, while 3 webhook URLs never answered (channels.webhook.timeout %s)",
			n, healthy, took.Round(10*time.Millisecond), slowHookTimeout)
		if first := tarpit.firstGaveUp(); !first.IsZero() && first.Before(start.Add(took)) {
			r.fail("the other targets' messages took %s, past the first hung request's timeout (%s after the send): they waited on the hung host",
				took.Round(time.Second), first.Sub(start).Round(time.Second))
		}
	}

	// The hung deliveries: attempted, failed at the timeout, then retried or
	// parked, never recorded sent.
	var seenFailed bool
	waitUntil := time.Now().Add(3 * slowHookTimeout)
	for !seenFailed && time.Now().Before(waitUntil) {
		snap, err := s.db.snapshot(ctx, id, key)
		if err != nil {
			return err
		}
		failed, parked := 0, 0
		for _, row := range snap.rows {
			if row.channel != "webhook" || !hung[row.recipient] {
				continue
			}
			if row.status == "sent" {
				r.fail("the hung webhook to %s is recorded sent", row.recipient)
			}
			if row.status == "failed" && row.lastError != "" {
				failed++
				if strings.HasPrefix(row.lastError, "not attempted") {
					parked++
				}
			}
		}
		if failed == len(hung) {
			seenFailed = true
			r.note("the 3 hung webhooks: failed at the timeout and due again (%d of them parked by their host's breaker or lane, not attempted); %d requests held by the host now",
				parked, tarpit.held())
			break
		}
		if !sleep(ctx, 200*time.Millisecond) {
			return ctx.Err()
		}
	}
	if !seenFailed {
		r.fail("the hung webhooks were not all failed and due again within %s", 3*slowHookTimeout)
	}
	var nanos int64
	if err := s.db.pool.QueryRow(ctx, longestSendJobSQL).Scan(&nanos); err != nil {
		return err
	}
	longest := time.Duration(nanos)
	r.note("the longest notify.send job ran %s", longest.Round(10*time.Millisecond))
	if longest > slowHookTimeout+5*time.Second {
		r.fail("a send job held its worker for %s, past the webhook timeout of %s", longest.Round(time.Second), slowHookTimeout)
	}

	// The host answers again: the hung deliveries go out, once each.
	tarpit.heal()
	healed := time.Now()
	done := func(snap *snapshot) bool {
		return snap.final() && snap.nonTerminal == 0 && len(snap.rows) == 2*n && snap.inboxIDs == n
	}
	snap, ok := s.waitFor(ctx, id, key, verifyReserve, done)
	if !ok {
		r.fail("not settled within the time budget after the host recovered")
	} else {
		r.note("every delivery settled %s after the hung host recovered", time.Since(healed).Round(time.Second))
	}
	s.report(ctx)
	s.stopAll()
	if snap == nil {
		return fmt.Errorf("no snapshot of %s", id)
	}
	if snap, err = s.db.snapshot(context.WithoutCancel(ctx), id, key); err != nil {
		return err
	}
	rec := s.mail.receipts()
	for _, h := range []*hookbox{s.hooks, tarpit} {
		hr := h.receipts()
		rec.order = append(rec.order, hr.order...)
		rec.foreign += hr.foreign
		if bad := h.badSignatures(); bad > 0 {
			r.fail("%d webhooks failed signature verification", bad)
		}
	}
	verify(r, map[string]*snapshot{key: snap}, rec, expectation{
		inbox: map[string]int{key: n},
		mustArrive: func(row ledgerRow) bool {
			if row.channel == "webhook" {
				var i int
				_, _ = fmt.Sscanf(row.recipient, "r%06d", &i)
				return hung[row.recipient] || i%10 == 0
			}
			return row.channel == "email"
		},
		arrivals:     n + healthy + len(hung),
		strictWindow: true,
		dupBound:     0,
		boundWhy:     "no crash in this scenario",
	})
	return nil
}

// longestSendJobSQL is the longest last run of a notify.send job so far (one
// still running counts until now), in nanoseconds.
const longestSendJobSQL = `
SELECT (coalesce(max(extract(epoch FROM coalesce(finalized_at, now()) - attempted_at)), 0) * 1e9)::bigint
FROM river_job
WHERE kind = 'notify.send' AND attempted_at IS NOT NULL AND (state = 'running' OR finalized_at IS NOT NULL)`
