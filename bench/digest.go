package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/notifyd/notifyd/internal/smtpcapture"
	"github.com/notifyd/notifyd/jobs"
	"github.com/notifyd/notifyd/server"
	"github.com/notifyd/notifyd/stores/uuidv7"
)

// The digest job kinds. The bench does not import their args types
// (they may not exist in this tree yet): it asks the daemon's River client at
// run time whether workers for these kinds are registered, and enqueues the
// sweep under its kind with empty args.
const (
	kindDigestSweep = "notify.digest_sweep"
	kindDigest      = "notify.digest"
)

type digestSweepProbe struct{}

func (digestSweepProbe) Kind() string { return kindDigestSweep }

type digestProbe struct{}

func (digestProbe) Kind() string { return kindDigest }

// errDigestNotBuilt says the jobs package has no digest workers.
var errDigestNotBuilt = errors.New("digest job not built")

// digestTimeout bounds one digest measurement.
const digestTimeout = 10 * time.Minute

// digestTarget is the digest row's target: digest emails/s at least this
// fraction of the email channel's own rate for the same digests.
const digestTarget = 0.4

// runDigest is scenario 5: recipients × perRecipient pending digest rows, all
// digests sent, as emails/s, against the email channel sending the same
// digests alone (measureDigestChannel), and, as information, against the
// immediate email rate when scenario 2 ran.
func runDigest(ctx context.Context, h *harness, recipients, perRecipient int, immediate *measurement) []Result {
	const name, unit = "digest vs channel limit", "emails/s"
	limit, limitErr := measureDigestChannel(ctx, h, recipients, perRecipient)
	if limitErr == nil {
		fmt.Printf("  digest channel alone: %s emails/s (%s)\n", formatNumber(limit.rate), limit.note)
	}
	m, err := measureDigest(ctx, h, recipients, perRecipient)
	if errors.Is(err, errDigestNotBuilt) {
		fmt.Printf("  digest: n/a (%v)\n", err)
		return []Result{naResult(name, unit, ">=", digestTarget, "ratio", errDigestNotBuilt.Error())}
	}
	if err != nil {
		return []Result{errorResult(name, unit, ">=", digestTarget, "ratio", err)}
	}
	fmt.Printf("  digest: %s emails/s (%s)\n", formatNumber(m.rate), m.note)
	var out []Result
	if limitErr != nil {
		out = append(out, errorResult(name, unit, ">=", digestTarget, "ratio", fmt.Errorf("baseline: %w", limitErr)))
	} else {
		r := ratioResult(name, unit, m.rate, limit.rate, "digest channel alone", "emails/s", ">=", digestTarget)
		out = append(out, annotate(r, recipients, m, &limit))
	}
	if immediate == nil { // the email scenario did not run: no information row
		return out
	}
	r := ratioResult("digest vs immediate email", unit, m.rate, immediate.rate, "immediate email", "deliveries/s", ">=", 0)
	r.TargetKind, r.Pass = "info", nil
	return append(out, annotate(r, recipients, m, immediate))
}

// digestKindsBuilt reports whether the daemon's workers include the digest
// kinds: River refuses to insert a kind no worker is registered for.
func digestKindsBuilt(ctx context.Context, d *server.Server) (bool, error) {
	tx, err := d.Pool().Begin(ctx)
	if err != nil {
		return false, err
	}
	defer tx.Rollback(ctx)
	for _, args := range []river.JobArgs{digestSweepProbe{}, digestProbe{}} {
		_, err := d.River().InsertTx(ctx, tx, args, &river.InsertOpts{Queue: jobs.QueueDigest})
		var unknown *river.UnknownJobKindError
		if errors.As(err, &unknown) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
	}
	return true, nil
}

// digestSetupSQL writes perRecipient notifications (created two days ago),
// their inbox items, and one digest_pending email delivery per recipient and
// notification: the state fan-out leaves for recipients in digest mode.
const digestSetupSQL = `
WITH n AS (
    INSERT INTO notify_notifications (id, notifier, key, params, status, normalized, created_at, updated_at)
    SELECT u.id, 'bench.digest', 'digest-' || u.ord, $3::jsonb, 'fanned_out', true,
           now() - interval '2 days', now() - interval '2 days'
    FROM unnest($2::uuid[]) WITH ORDINALITY AS u(id, ord)
    RETURNING id, key
), inbox AS (
    INSERT INTO notify_inbox (id, notification_id, recipient, notifier, key, category, reason, title, body, url, params, created_at)
    SELECT gen_random_uuid(), n.id, ` + recipientSQL + `, 'bench.digest', n.key, 'bench', 'direct', $4, $5, $6, $3::jsonb,
           now() - interval '2 days'
    FROM n, generate_series(1, $1) g
)
INSERT INTO notify_deliveries (id, notification_id, notifier, key, recipient, channel, reason, mode, status,
                               created_at, updated_at)
SELECT gen_random_uuid(), n.id, 'bench.digest', n.key, ` + recipientSQL + `, 'email', 'direct', 'digest',
       'digest_pending', now() - interval '2 days', now() - interval '2 days'
FROM n, generate_series(1, $1) g`

func measureDigest(ctx context.Context, h *harness, recipients, perRecipient int) (measurement, error) {
	sink, err := smtpcapture.New("127.0.0.1:0", smtpcapture.WithDiscard())
	if err != nil {
		return measurement{}, err
	}
	defer sink.Close()
	db, pool, closeDB, err := h.openDB(ctx, "digest", 4)
	if err != nil {
		return measurement{}, err
	}
	defer closeDB()
	cfg, err := loadConfig(configOptions{DatabaseURL: db.URL, SMTPPort: sink.Port()})
	if err != nil {
		return measurement{}, err
	}
	// A clock a day ahead: every recipient's digest (schedule 08:00 in their
	// zone, rows two days old) is past due when the sweep looks.
	clock := func() time.Time { return time.Now().Add(24 * time.Hour) }
	d, err := server.New(ctx, server.Options{Config: cfg, NoHTTP: true, Clock: clock, Logger: h.logger, DrainTimeout: 5 * time.Second})
	if err != nil {
		return measurement{}, err
	}
	built, err := digestKindsBuilt(ctx, d)
	if err != nil || !built {
		d.Close()
		if err == nil {
			err = fmt.Errorf("%w: no worker for %s / %s in jobs", errDigestNotBuilt, kindDigestSweep, kindDigest)
		}
		return measurement{}, err
	}
	if err := insertRecipients(ctx, pool, recipients); err != nil {
		d.Close()
		return measurement{}, err
	}
	ids := make([]string, perRecipient)
	for i := range ids {
		ids[i] = uuidv7.String()
	}
	if _, err := pool.Exec(ctx, digestSetupSQL, recipients, ids, benchJSON, benchTitle, benchBody, benchURL); err != nil {
		d.Close()
		return measurement{}, fmt.Errorf("digest setup: %w", err)
	}
	if err := analyze(ctx, pool); err != nil {
		d.Close()
		return measurement{}, err
	}
	pending := recipients * perRecipient
	// The sweep waits in the queue; the daemon starts with it (a periodic
	// sweep with RunOnStart would race it to the same work, which is fine:
	// the clock starts when the daemon does).
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		// The maintenance queue, where the periodic sweep runs.
		_, err := d.River().InsertTx(ctx, tx, digestSweepProbe{}, &river.InsertOpts{Queue: jobs.QueueMaintenance})
		return err
	}); err != nil {
		d.Close()
		return measurement{}, fmt.Errorf("enqueue %s: %w", kindDigestSweep, err)
	}
	h.waitQuiet(ctx)
	stopProf := h.prof.start(ctx, "digest", db.Name, recipients, "digest email")
	cpu0 := h.cpu()
	start := time.Now()
	rd := runDaemon(d)
	defer rd.stop()
	if _, err := waitUntil(ctx, 5*time.Millisecond, digestTimeout, func() (bool, error) {
		return sink.Count() >= recipients, nil
	}); err != nil {
		stopProf()
		return measurement{}, fmt.Errorf("%d of %d digest emails received: %w", sink.Count(), recipients, err)
	}
	var left int
	done, err := waitUntil(ctx, 5*time.Millisecond, time.Minute, func() (bool, error) {
		var err error
		left, err = count(ctx, pool, `SELECT count(*) FROM notify_deliveries WHERE status = 'digest_pending'`)
		return left == 0, err
	})
	cpu := h.cpu().sub(cpu0)
	stopProf()
	if err != nil {
		return measurement{}, fmt.Errorf("all emails received, %d rows still digest_pending: %w", left, err)
	}
	sent, err := count(ctx, pool, `SELECT count(*) FROM notify_deliveries WHERE status = 'digest_sent'`)
	if err != nil {
		return measurement{}, err
	}
	if sent != pending {
		return measurement{}, fmt.Errorf("%d of %d pending rows digest_sent", sent, pending)
	}
	if got := sink.Count(); got != recipients {
		return measurement{}, fmt.Errorf("%d digest emails for %d recipients", got, recipients)
	}
	elapsed := done.Sub(start)
	return measurement{rate: float64(recipients) / elapsed.Seconds(), seconds: elapsed.Seconds(), cpu: cpu,
		note: fmt.Sprintf("%d recipients × %d rows, %.2fs, %s", recipients, perRecipient, elapsed.Seconds(), cpu)}, nil
}
