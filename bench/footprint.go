package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/internal/smtpcapture"
	"github.com/notifyd/notifyd/server"
)

// runFootprint measures what one recipient of a notification costs the
// database, on a second private cluster with PostgreSQL's default (durable,
// replication-ready) settings, where WAL volume is what a production primary
// writes and ships to its standbys: WAL bytes and table+index bytes per
// recipient for an in-app-only notification and for one with in-app and an
// immediate email (fan-out, sends and settles until every delivery is
// sent), and the most connections one replica held meanwhile. The rows have
// no target: docs/scaling.md reasons from them.
func runFootprint(ctx context.Context, h *harness, n int) []Result {
	dh, err := startDurableHarness(ctx, h)
	if err != nil {
		return []Result{errorResult("footprint", "B", "<=", 0, "info", err)}
	}
	defer dh.close()
	var out []Result
	for _, v := range []struct {
		label, notifier string
		email           bool
	}{
		{"in_app", notifierInApp, false},
		{"in_app + email", notifierBoth, true},
	} {
		f, err := measureFootprint(ctx, dh, v.notifier, v.email, n)
		if err != nil {
			return append(out, errorResult("footprint, "+v.label, "B", "<=", 0, "info", err))
		}
		fmt.Printf("  %s: %s\n", v.label, f.note)
		out = append(out,
			infoResult(fmt.Sprintf("WAL per recipient, %s", v.label), "B", f.walPerRecipient, n, f.note),
			infoResult(fmt.Sprintf("storage per recipient, %s", v.label), "B", f.bytesPerRecipient, n, f.note),
			infoResult(fmt.Sprintf("peak connections of one replica, %s", v.label), "conns", float64(f.peakConns), n, f.note))
	}
	h.quietBudget, h.quietWaited = dh.quietBudget, dh.quietWaited
	return out
}

// infoResult is a row with no target: a figure docs reason from.
func infoResult(name, unit string, v float64, n int, note string) Result {
	return Result{Scenario: "footprint: " + name, Unit: unit, Measured: v, TargetKind: "info", Status: "ok", N: n, Notes: note}
}

type footprint struct {
	walPerRecipient, bytesPerRecipient float64
	peakConns                          int
	note                               string
}

// footprintTables are the tables a notification writes to, with their
// indexes and TOAST (pg_total_relation_size).
const footprintSizeSQL = `
SELECT sum(pg_total_relation_size(c.oid))::bigint
FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace
WHERE s.nspname = current_schema() AND c.relkind IN ('r', 'p', 'm')
  AND (c.relname LIKE 'notify\_%' OR c.relname LIKE 'river\_job%')`

func measureFootprint(ctx context.Context, h *harness, notifier string, email bool, n int) (footprint, error) {
	var sink *smtpcapture.Server
	port := 0
	if email {
		var err error
		if sink, err = smtpcapture.New("127.0.0.1:0", smtpcapture.WithDiscard()); err != nil {
			return footprint{}, err
		}
		defer sink.Close()
		port = sink.Port()
	}
	db, pool, closeDB, err := h.openDB(ctx, "footprint", 4)
	if err != nil {
		return footprint{}, err
	}
	defer closeDB()
	if err := insertRecipients(ctx, pool, n); err != nil {
		return footprint{}, err
	}
	if err := analyze(ctx, pool); err != nil {
		return footprint{}, err
	}
	cfg, err := loadConfig(configOptions{DatabaseURL: db.URL, SMTPPort: port})
	if err != nil {
		return footprint{}, err
	}
	d, err := startDaemon(ctx, cfg, server.Options{NoHTTP: true}, h.logger)
	if err != nil {
		return footprint{}, err
	}
	defer d.stop()
	client, _ := notifyd.NewClient(pool, notifyd.ClientConfig{Config: cfg})

	// Checkpoint first, so the first change of every page after it (a full
	// page image under full_page_writes) is counted as production pays it.
	if _, err := pool.Exec(ctx, `CHECKPOINT`); err != nil {
		return footprint{}, fmt.Errorf("checkpoint: %w", err)
	}
	var wal0 string
	var size0 int64
	if err := pool.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&wal0); err != nil {
		return footprint{}, err
	}
	if err := pool.QueryRow(ctx, footprintSizeSQL).Scan(&size0); err != nil {
		return footprint{}, err
	}
	peak := watchConnections(ctx, pool, db.Name)
	start := time.Now()
	id, _, err := sendCommitted(ctx, pool, client, notifyd.Notification{Notifier: notifier, Key: "footprint-1",
		Recipients: inlineRecipients(n), Params: benchParams}, nil)
	if err != nil {
		peak.stop()
		return footprint{}, err
	}
	if _, err := waitFannedOut(ctx, pool, id, emailTimeout); err != nil {
		peak.stop()
		return footprint{}, err
	}
	if email {
		_, err = waitUntil(ctx, 10*time.Millisecond, emailTimeout, func() (bool, error) {
			var open int
			err := pool.QueryRow(ctx, `SELECT count(*) FROM notify_deliveries WHERE notification_id = $1
  AND status IN ('pending', 'sending', 'failed', 'rate_limited')`, id).Scan(&open)
			return open == 0, err
		})
		if err != nil {
			peak.stop()
			return footprint{}, err
		}
	}
	elapsed := time.Since(start)
	conns := peak.stop()
	var walBytes float64
	var size1 int64
	if err := pool.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), $1::pg_lsn)`, wal0).Scan(&walBytes); err != nil {
		return footprint{}, err
	}
	if err := pool.QueryRow(ctx, footprintSizeSQL).Scan(&size1); err != nil {
		return footprint{}, err
	}
	f := footprint{walPerRecipient: walBytes / float64(n), bytesPerRecipient: float64(size1-size0) / float64(n), peakConns: conns}
	f.note = fmt.Sprintf("%d recipients in %.1fs: %.1f MB WAL (%.0f B each), tables +%.1f MB (%.0f B each), at most %d connections of the daemon's pool",
		n, elapsed.Seconds(), walBytes/1e6, f.walPerRecipient, float64(size1-size0)/1e6, f.bytesPerRecipient, conns)
	return f, nil
}

// connWatch samples how many backends are connected to one database.
type connWatch struct {
	peak atomic.Int64
	done chan struct{}
	wg   sync.WaitGroup
}

func watchConnections(ctx context.Context, pool *pgxpool.Pool, dbName string) *connWatch {
	w := &connWatch{done: make(chan struct{})}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			var c int64
			// The bench's own pool holds one connection for this query.
			if err := pool.QueryRow(ctx, `SELECT count(*) - 1 FROM pg_stat_activity WHERE datname = $1`, dbName).Scan(&c); err == nil && c > w.peak.Load() {
				w.peak.Store(c)
			}
			select {
			case <-w.done:
				return
			case <-t.C:
			}
		}
	}()
	return w
}

func (w *connWatch) stop() int {
	close(w.done)
	w.wg.Wait()
	return int(w.peak.Load())
}
