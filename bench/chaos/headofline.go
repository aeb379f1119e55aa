package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// runHeadOfLine: while a 1M-recipient in_app + email fan-out runs, one-
// recipient notifications arrive at 50/s for 30 s. Each must be emailed
// within 1 s of its commit at the 99th percentile: a large notification
// never holds up a small one. The large one is cancelled once the small
// ones are measured, which ends the scenario in minutes.
//
// -scale shrinks the large fan-out (-scale 0.1: 100,000 recipients, a
// quick try; the rate and the 30 s of small ones stay): the measurement
// starts once a fiftieth of its delivery rows (at most 20,000) are
// written, and the notes say whether it was still fanning out when the
// measurement ended, without which the run proved nothing.
func runHeadOfLine(ctx context.Context, e *env, r *result, seed uint64) error {
	c, err := e.startCluster(ctx, "pg-headofline")
	if err != nil {
		return err
	}
	s, err := newStage(ctx, e, r, "headofline", c, seed)
	if err != nil {
		return err
	}
	defer s.close()
	big := scaled(e, 1_000_000)
	const rate, measure = 50, 30 * time.Second
	smallN := rate * int(measure/time.Second)
	sl, err := s.addSlot(ctx, "a", daemonConfig{fanoutChunk: 1000, send: chaosSend, sendBatch: chaosSendBatch})
	if err != nil {
		return err
	}
	// A million profiles and topic subscriptions, written set-based: the
	// fixture, not what is measured.
	t := time.Now()
	for _, q := range []string{
		`INSERT INTO notify_recipients (id, email)
		 SELECT 'r' || lpad(i::text, greatest(6, length(i::text)), '0'), 'r' || lpad(i::text, greatest(6, length(i::text)), '0') || '@` + mailDomain + `'
		 FROM generate_series(0, $1 - 1) i`,
		`INSERT INTO notify_subscriptions (topic, recipient)
		 SELECT 'everyone', 'r' || lpad(i::text, greatest(6, length(i::text)), '0') FROM generate_series(0, $1 - 1) i`,
	} {
		if _, err := s.db.pool.Exec(ctx, q, big+smallN); err != nil {
			return fmt.Errorf("fixture: %w", err)
		}
	}
	// The small notifications' recipients are not subscribed.
	if _, err := s.db.pool.Exec(ctx, `DELETE FROM notify_subscriptions WHERE topic = 'everyone' AND recipient >= $1`,
		recipientID(big)); err != nil {
		return err
	}
	r.note("wrote %d profiles and %d subscriptions in %s", big+smallN, big, time.Since(t).Round(time.Millisecond))
	if err := s.start(ctx, sl); err != nil {
		return err
	}

	const key = "headofline-big"
	body, _ := json.Marshal(map[string]any{"notifier": notifierName, "key": key, "topics": []string{"everyone"},
		"params": map[string]any{"n": 1}})
	status, resp, err := call(ctx, http.MethodPost, "http://"+sl.addr+"/v1/notifications", adminToken, body)
	if err != nil || status != http.StatusAccepted {
		return fmt.Errorf("POST the large notification: %d %s %v", status, resp, err)
	}
	var bigOut struct{ ID string }
	_ = json.Unmarshal(resp, &bigOut)
	// Wait until it is well under way.
	underWay := min(20000, max(1, big/50))
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var rows int
		if err := s.db.pool.QueryRow(ctx, `SELECT count(*) FROM notify_deliveries WHERE notification_id = $1`, bigOut.ID).Scan(&rows); err == nil && rows >= underWay {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the large fan-out never reached %d deliveries", underWay)
		}
		if !sleep(ctx, 100*time.Millisecond) {
			return ctx.Err()
		}
	}

	type small struct {
		id, key, email string
		committed      time.Time
	}
	var (
		mu     sync.Mutex
		smalls []small
		failed int
	)
	var wg sync.WaitGroup
	tick := time.NewTicker(time.Second / rate)
	for i := range smallN {
		<-tick.C
		wg.Go(func() {
			rcpt := recipientID(big + i)
			k := fmt.Sprintf("headofline-small-%d", i)
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			id, err := s.send(rctx, sl, k, []string{rcpt})
			at := time.Now()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed++
				return
			}
			smalls = append(smalls, small{id, k, rcpt + "@" + mailDomain, at})
		})
	}
	tick.Stop()
	wg.Wait()
	if failed > 0 {
		r.fail("%d of %d one-recipient sends failed", failed, smallN)
	}
	// Each small email arrives within the budget or counts as late.
	byEmail := map[string]time.Time{}
	deadline = time.Now().Add(30 * time.Second)
	for {
		for _, m := range s.mail.Messages() {
			for _, to := range m.To {
				if strings.HasPrefix(to, "r") && to >= recipientID(big) {
					if _, ok := byEmail[to]; !ok {
						byEmail[to] = m.Accepted
					}
				}
			}
		}
		if len(byEmail) >= len(smalls) || time.Now().After(deadline) {
			break
		}
		if !sleep(ctx, 500*time.Millisecond) {
			return ctx.Err()
		}
	}
	var lat []time.Duration
	missing := 0
	for _, sm := range smalls {
		at, ok := byEmail[sm.email]
		if !ok {
			missing++
			continue
		}
		lat = append(lat, max(0, at.Sub(sm.committed)))
	}
	slices.Sort(lat)
	pct := func(p float64) time.Duration {
		if len(lat) == 0 {
			return 0
		}
		return lat[min(len(lat)-1, int(float64(len(lat))*p))]
	}
	var bigRows int
	_ = s.db.pool.QueryRow(ctx, `SELECT count(*) FROM notify_deliveries WHERE notification_id = $1`, bigOut.ID).Scan(&bigRows)
	var bigSent int
	_ = s.db.pool.QueryRow(ctx, `SELECT count(*) FROM notify_deliveries WHERE notification_id = $1 AND channel = 'email' AND status = 'sent'`,
		bigOut.ID).Scan(&bigSent)
	if bigSent >= big {
		r.note("the large notification's emails were all sent before the measurement ended: the small ones were not measured beside it throughout (raise -scale)")
	}
	r.note("%d one-recipient notifications at %d/s beside a %d-recipient fan-out (%d delivery rows written by then, %d emails accepted): commit → email p50 %s, p99 %s, max %s",
		len(smalls), rate, big, bigRows, s.mail.Count(), pct(0.5).Round(time.Millisecond), pct(0.99).Round(time.Millisecond),
		pct(1).Round(time.Millisecond))
	noteSmallStages(ctx, s, r, recipientID(big))
	if missing > 0 {
		r.fail("%d one-recipient emails never arrived within 30 s of the last send", missing)
	}
	if p99 := pct(0.99); p99 > time.Second {
		r.fail("commit → email p99 %s beside the large fan-out, want ≤ 1 s", p99.Round(time.Millisecond))
	}
	// End the large one; what it already sent stays sent.
	if n, err := s.cancel(ctx, sl, key); err != nil {
		r.fail("cancel the large notification: %v", err)
	} else {
		r.note("the large notification cancelled afterwards (%d withdrawn)", n)
	}
	s.report(ctx)
	s.stopAll()
	return nil
}

// noteSmallStages notes where the one-recipient notifications' email
// deliveries spent their time, from the ledger's and River's timestamps:
// commit → fanned out (the delivery row written), the send job's wait for a
// worker (River's created → attempted, over the send queue's priority-1
// jobs), its run (attempted → finalized: the target's gate, the SMTP
// transaction and the settle), and fanned out → settled.
func noteSmallStages(ctx context.Context, s *stage, r *result, first string) {
	var f50, f99, x50, x99, q50, q99, j50, j99 float64
	err := s.db.pool.QueryRow(ctx, `
		WITH t AS (
			SELECT extract(epoch FROM d.created_at - n.created_at) * 1000 AS fan,
			       extract(epoch FROM coalesce(d.settled_at, d.updated_at) - d.created_at) * 1000 AS send
			FROM notify_deliveries d JOIN notify_notifications n ON n.id = d.notification_id
			WHERE d.channel = 'email' AND d.recipient >= $1 AND d.status = 'sent'),
		j AS (
			SELECT extract(epoch FROM attempted_at - created_at) * 1000 AS queue,
			       extract(epoch FROM finalized_at - attempted_at) * 1000 AS run
			FROM river_job WHERE kind = 'notify.send' AND queue = 'send' AND priority = 1
			  AND attempted_at IS NOT NULL AND finalized_at IS NOT NULL)
		SELECT coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY fan), -1), coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY fan), -1),
		       coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY send), -1), coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY send), -1),
		       (SELECT coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY queue), -1) FROM j),
		       (SELECT coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY queue), -1) FROM j),
		       (SELECT coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY run), -1) FROM j),
		       (SELECT coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY run), -1) FROM j)
		FROM t`, first).Scan(&f50, &f99, &x50, &x99, &q50, &q99, &j50, &j99)
	if err != nil {
		r.note("stages of the one-recipient emails: %v", err)
		return
	}
	r.note("stages of the one-recipient emails (p50/p99, ms): commit → fanned out %.0f/%.0f, fanned out → settled %.0f/%.0f; "+
		"their send jobs waited for a worker %.0f/%.0f and ran %.0f/%.0f", f50, f99, x50, x99, q50, q99, j50, j99)
}
