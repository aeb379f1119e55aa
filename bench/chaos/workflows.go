package main

import (
	"context"
	"fmt"
	"time"
)

// The workflow notifiers of the workflows scenario: email delayed unless the
// in-app item was read, and a batch of every notification of one recipient
// within a window (its key renders the same for all: params are {"n": 1}).
const (
	delayedNotifier = "chaos.delayed"
	batchedNotifier = "chaos.batched"
)

func (c daemonConfig) workflowNotifiers() string {
	if !c.workflows {
		return ""
	}
	return fmt.Sprintf(`  %s:
    max_recipients: 1000000
    channels:
      in_app: {title: "delayed {{.n}}"}
      email: {subject: "delayed {{.n}}", text: "delayed for {{recipient.ID}}", delay: 2s, unless: read}
  %s:
    max_recipients: 1000000
    batch: {key: "{{.n}}", window: 3s}
    channels:
      in_app: {title: "{{.Count}} pings"}
      email: {subject: "{{.Count}} pings", text: "{{.Count}} pings for {{recipient.ID}}"}
`, delayedNotifier, batchedNotifier)
}

// runWorkflows: two daemons on one database, SIGKILLed alternately while
// notifications keep opening and joining batches (and some are cancelled
// again, in the application's transaction, whether their batch is still
// open or already sent) and delayed emails wait for their due time. At the
// end every delivery is final, every batch member is counted once in
// exactly one batch and every notification that was not cancelled is a
// member for each recipient, every batch's in-app item belongs to its first
// member, every batch's email arrived (duplicates only within the kills'
// crash window), every batched delivery names a sent one, and a skipped
// delayed email's item was read.
func runWorkflows(ctx context.Context, e *env, r *result, seed uint64) error {
	s, err := newStage(ctx, e, r, "workflows", e.shared, seed)
	if err != nil {
		return err
	}
	defer s.close()
	n := scaled(e, 200)
	cfg := daemonConfig{fanoutChunk: 100, send: chaosSend, sendBatch: chaosSendBatch, workflows: true}
	a, err := s.addSlot(ctx, "a", cfg)
	if err != nil {
		return err
	}
	b, err := s.addSlot(ctx, "b", cfg)
	if err != nil {
		return err
	}
	if err := s.profiles(ctx, n, func(int) string { return "" }); err != nil {
		return err
	}
	for _, sl := range []*slot{a, b} {
		if err := s.start(ctx, sl); err != nil {
			return err
		}
	}

	maxKills := max(4, int(8*e.opts.scale+0.5))
	batched, delayed, cancels := 0, 0, 0
	for kills := 0; kills < maxKills; kills++ {
		live, victim := a, b
		if kills%2 == 1 {
			live, victim = b, a
		}
		// A burst through the live daemon while the other is up too.
		until := time.Now().Add(s.jitter(time.Second, 3*time.Second))
		for time.Now().Before(until) && ctx.Err() == nil {
			if _, err := s.sendAs(ctx, live, batchedNotifier, fmt.Sprintf("batched-%d", batched), ids(0, n)); err != nil {
				return err
			}
			batched++
			if batched%3 == 0 {
				// An unlike: mostly of a recent one (its batch open), now
				// and then of an older one (its email sent).
				back := 1 + s.rng.IntN(4)
				if s.rng.IntN(4) == 0 {
					back = 1 + s.rng.IntN(batched)
				}
				if _, err := s.db.pool.Exec(ctx, `SELECT notify_cancel($1, $2)`, batchedNotifier,
					fmt.Sprintf("batched-%d", max(0, batched-back))); err != nil {
					return err
				}
				cancels++
			}
			if batched%5 == 0 {
				if _, err := s.sendAs(ctx, live, delayedNotifier, fmt.Sprintf("delayed-%d", delayed), ids(0, n)); err != nil {
					return err
				}
				delayed++
				// Half of the recipients read the newest delayed item at once.
				if _, err := s.db.pool.Exec(ctx, `UPDATE notify_inbox SET read_at = now(), seen_at = now()
WHERE notifier = $1 AND read_at IS NULL AND right(recipient, 1)::int % 2 = 0`, delayedNotifier); err != nil {
					return err
				}
			}
			if !sleep(ctx, 50*time.Millisecond) {
				break
			}
		}
		s.kill(victim)
		s.logf("SIGKILL #%d (%s): %d batched and %d delayed notifications sent; mail=%d", kills+1, victim.name,
			batched, delayed, s.mail.Count())
		if err := s.start(ctx, victim); err != nil {
			return err
		}
	}
	r.note("%d SIGKILLs alternating between 2 daemons while %d batched (%d cancels of them) and %d delayed notifications to %d recipients were sent",
		maxKills, batched, cancels, delayed, n)

	final := `status IN ('sent', 'batched', 'skipped', 'cancelled', 'refused', 'expired', 'unavailable', 'throttled')`
	settled := func() (bool, error) {
		var left, fanning int
		err := s.db.pool.QueryRow(ctx, `SELECT
  (SELECT count(*) FROM notify_deliveries WHERE NOT (`+final+`)),
  (SELECT count(*) FROM notify_notifications WHERE status NOT IN ('fanned_out', 'cancelled', 'rejected'))`).Scan(&left, &fanning)
		return left == 0 && fanning == 0, err
	}
	deadline := time.Now().Add(3 * time.Minute) // the last kill's jobs are rescued when its daemon restarts
	for {
		ok, err := settled()
		if err != nil {
			return err
		}
		if ok {
			break
		}
		if time.Now().After(deadline) || !sleep(ctx, 500*time.Millisecond) {
			r.fail("not settled within the time budget")
			break
		}
	}
	s.report(ctx)
	s.stopAll()
	bg := context.WithoutCancel(ctx)
	db := s.db.pool

	var deliveries, nonTerminal int
	if err := db.QueryRow(bg, `SELECT count(*), count(*) FILTER (WHERE NOT (`+final+`)) FROM notify_deliveries`).Scan(
		&deliveries, &nonTerminal); err != nil {
		return err
	}
	r.deliveries, r.nonTerminal = deliveries, nonTerminal

	// Every member in exactly one batch, counted once; every notification
	// that was not cancelled a member for each recipient (a cancelled one
	// stays only in batches whose message went, and not as their first).
	var members, distinctMembers, counted, recipients, live int
	if err := db.QueryRow(bg, `SELECT count(*), count(DISTINCT (b.recipient, m)),
  (SELECT coalesce(sum(count), 0) FROM notify_batches), (SELECT count(DISTINCT recipient) FROM notify_batches),
  count(*) FILTER (WHERE n.status = 'fanned_out')
FROM notify_batches b, unnest(b.members) m JOIN notify_notifications n ON n.id = m`).Scan(
		&members, &distinctMembers, &counted, &recipients, &live); err != nil {
		return err
	}
	var batchedIDs, cancelled int
	if err := db.QueryRow(bg, `SELECT count(*) FILTER (WHERE status = 'fanned_out'), count(*) FILTER (WHERE status = 'cancelled')
FROM notify_notifications WHERE notifier = $1`, batchedNotifier).Scan(&batchedIDs, &cancelled); err != nil {
		return err
	}
	if members != distinctMembers || members != counted || live != batchedIDs*n {
		r.fail("batch members: %d listed, %d distinct, %d counted, %d not cancelled; want %d (%d notifications × %d recipients)",
			members, distinctMembers, counted, live, batchedIDs*n, batchedIDs, n)
	}
	var badItems int
	if err := db.QueryRow(bg, `SELECT count(*) FROM notify_batches b
WHERE b.inbox_id IS NOT NULL AND b.count > 0
  AND NOT EXISTS (SELECT 1 FROM notify_inbox i WHERE i.id = b.inbox_id AND i.notification_id = b.members[1])`).Scan(&badItems); err != nil {
		return err
	}
	if badItems > 0 {
		r.fail("%d batches whose in-app item is gone or not their first member's", badItems)
	}
	var cancelledFirst int
	if err := db.QueryRow(bg, `SELECT count(*) FROM notify_batches b JOIN notify_notifications n ON n.id = b.members[1]
WHERE n.status = 'cancelled'`).Scan(&cancelledFirst); err != nil {
		return err
	}
	if cancelledFirst > 0 {
		r.fail("%d batches still led by a cancelled notification", cancelledFirst)
	}
	var lostInto int
	if err := db.QueryRow(bg, `SELECT count(*) FROM notify_deliveries d WHERE d.status = 'batched'
  AND NOT EXISTS (SELECT 1 FROM notify_deliveries l WHERE l.id = d.batched_into AND l.status = 'sent')`).Scan(&lostInto); err != nil {
		return err
	}
	if lostInto > 0 {
		// What the named deliveries are, for the report: a checker or a
		// product bug reads differently.
		var why string
		_ = db.QueryRow(bg, `SELECT string_agg(x, '; ') FROM (
  SELECT coalesce(l.status, 'missing') || '/' || coalesce(n.status, '-') || ': ' || count(*) ||
         ' (e.g. ' || min(coalesce(l.last_error, '')) || ')' AS x
  FROM notify_deliveries d LEFT JOIN notify_deliveries l ON l.id = d.batched_into
  LEFT JOIN notify_notifications n ON n.id = l.notification_id
  WHERE d.status = 'batched' AND (l.id IS NULL OR l.status <> 'sent')
  GROUP BY 1, l.status, n.status) t`).Scan(&why)
		r.fail("%d batched deliveries name a delivery that was not sent (named delivery status/its notification's: %s)", lostInto, why)
	}
	var readSkipped int
	if err := db.QueryRow(bg, `SELECT count(*) FROM notify_deliveries d WHERE d.status = 'skipped' AND d.notifier = $1
  AND NOT EXISTS (SELECT 1 FROM notify_inbox i WHERE i.notification_id = d.notification_id AND i.recipient = d.recipient
                  AND i.read_at IS NOT NULL)`, delayedNotifier).Scan(&readSkipped); err != nil {
		return err
	}
	if readSkipped > 0 {
		r.fail("%d delayed emails skipped although their item was not read", readSkipped)
	}

	// Every email that was sent arrived; none twice beyond the kills' window.
	rows, err := db.Query(bg, `SELECT id::text, batch_id IS NOT NULL FROM notify_deliveries WHERE channel = 'email' AND status = 'sent'`)
	if err != nil {
		return err
	}
	counts := s.mail.receipts().counts()
	var sent, leads, lost, dups int
	for rows.Next() {
		var id string
		var lead bool
		if err := rows.Scan(&id, &lead); err != nil {
			rows.Close()
			return err
		}
		sent++
		if lead {
			leads++
		}
		switch c := counts[id]; {
		case c == 0:
			lost++
		case c > 1:
			dups += c - 1
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	r.received, r.lost, r.duplicates = len(counts), lost, dups
	if lost > 0 {
		r.fail("%d sent emails never arrived", lost)
	}
	if bound := maxKills * lanesBound(1); dups > bound {
		r.fail("%d duplicate emails, more than %d kills × %d lanes", dups, maxKills, lanesBound(1))
	}
	var batches int
	if err := db.QueryRow(bg, `SELECT count(*) FROM notify_batches`).Scan(&batches); err != nil {
		return err
	}
	r.note("%d batches for %d recipients, %d members; %d of %d batched notifications cancelled; %d emails sent (%d carrying a batch), %d duplicates",
		batches, recipients, members, cancelled, batchedIDs+cancelled, sent, leads, dups)
	// Joins, closing claims, cancels and item re-renders lock batches and
	// items in one order (docs/architecture.md): a deadlock in the daemons'
	// logs means one of them no longer does. River retries the job, so it
	// is reported, not failed.
	if n := s.logCount("deadlock detected"); n > 0 {
		r.note("%d deadlocks (40P01) in the daemons' logs: a lock order was broken (docs/architecture.md, batches and their items)", n)
	}
	return nil
}
