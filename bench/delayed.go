package main

import (
	"context"
	"fmt"
	"time"

	"github.com/notifyd/notifyd"
)

// delayedTarget is the bar for delayed email with `unless: read`: the
// deliveries/s once they are due, at least this fraction of immediate email.
const delayedTarget = 0.8

// delayedBy is the delay of the delayed scenario's emails: long enough for
// the fan-out of every recipient and the reads to commit before the first
// is due.
const delayedBy = 20 * time.Second

// runDelayed is the workflow scenario: n emails with `delay` and `unless:
// read`, half of whose in-app items are read before they are due, against
// immediate email (scenario 2's rate, or measured here when it did not run).
// The rate counts every delivery settled (sent or skipped) from the first
// claim to the last settle: the wait for River's scheduler to make the due
// jobs available is not the daemon's throughput, and is reported apart.
func runDelayed(ctx context.Context, h *harness, n int, immediate *measurement) []Result {
	return vsImmediate(ctx, h, "email.delayed unless read vs immediate email", "delayed email, half read", delayedTarget, n,
		immediate, func() (measurement, error) { return measureDelayed(ctx, h, n) })
}

func measureDelayed(ctx context.Context, h *harness, n int) (measurement, error) {
	sc, err := startEmailScenario(ctx, h, "delayed", n)
	if err != nil {
		return measurement{}, err
	}
	defer sc.close()
	sink, pool, client := sc.sink, sc.pool, sc.client
	time.Sleep(300 * time.Millisecond)
	nf := notifyd.Notification{Notifier: notifierDelayed, Key: "delayed-1", Recipients: inlineRecipients(n), Params: benchParams}
	id, _, err := sendCommitted(ctx, pool, client, nf, nil)
	if err != nil {
		return measurement{}, err
	}
	if _, err := waitUntil(ctx, 10*time.Millisecond, delayedBy, func() (bool, error) {
		var scheduled int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM notify_deliveries WHERE notification_id = $1 AND status = 'scheduled'`, id).Scan(&scheduled)
		return scheduled >= n, err
	}); err != nil {
		return measurement{}, fmt.Errorf("fan-out of %d delayed emails: %w", n, err)
	}
	// Half of the recipients read their in-app item before it is due.
	if _, err := pool.Exec(ctx, `UPDATE notify_inbox SET read_at = now(), seen_at = now()
WHERE notifier = $1 AND key = 'delayed-1' AND right(recipient, 1)::int % 2 = 0`, notifierDelayed); err != nil {
		return measurement{}, err
	}
	var due time.Time
	if err := pool.QueryRow(ctx, `SELECT max(next_attempt_at) FROM notify_deliveries WHERE notification_id = $1`, id).Scan(&due); err != nil {
		return measurement{}, err
	}
	if time.Now().After(due) {
		return measurement{}, fmt.Errorf("the emails were due before the reads committed: raise delayedBy (%s)", delayedBy)
	}
	h.waitQuiet(ctx)
	var cpu0 cpuTimes
	var first time.Time
	done, err := waitUntil(ctx, 5*time.Millisecond, delayedBy+emailTimeout, func() (bool, error) {
		var scheduled, settled int
		err := pool.QueryRow(ctx, `
SELECT count(*) FILTER (WHERE status = 'scheduled'), count(*) FILTER (WHERE status IN ('sent', 'skipped'))
FROM notify_deliveries WHERE notification_id = $1`, id).Scan(&scheduled, &settled)
		if first.IsZero() && scheduled < n {
			first, cpu0 = time.Now(), h.cpu()
		}
		return settled >= n, err
	})
	if err != nil {
		return measurement{}, err
	}
	cpu := h.cpu().sub(cpu0)
	var sent, skipped int
	if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = 'sent'), count(*) FILTER (WHERE status = 'skipped')
FROM notify_deliveries WHERE notification_id = $1`, id).Scan(&sent, &skipped); err != nil {
		return measurement{}, err
	}
	if skipped != n/2 || sent != n-n/2 || sink.Count() != sent {
		return measurement{}, fmt.Errorf("%d sent (%d received), %d skipped; want %d each", sent, sink.Count(), skipped, n/2)
	}
	elapsed := done.Sub(first)
	return measurement{rate: float64(n) / elapsed.Seconds(), seconds: elapsed.Seconds(), cpu: cpu,
		note: fmt.Sprintf("%d delayed emails, %d sent and %d skipped in %.2fs from the first claim; River's scheduler made them available %.2fs after they were due; %s",
			n, sent, skipped, elapsed.Seconds(), first.Sub(due).Seconds(), cpu)}, nil
}
