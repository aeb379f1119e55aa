package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/notifyd/notifyd"
)

// verifyDigests checks the digest guarantees for the email rows of the given
// notifications, all of them digest rows: every row digest_sent, exactly one
// digest per recipient per due instant, every digest received at least once
// (more only in the crash window). It returns the digests column.
func verifyDigests(ctx context.Context, r *result, db *database, ids []string, digestReceipts []string, dupBound int) string {
	rows, err := db.pool.Query(ctx, digestRowsSQL, ids)
	if err != nil {
		r.fail("read digest rows: %v", err)
		return "error"
	}
	type instant struct {
		recipient string
		due       time.Time
	}
	byInstant := map[instant]map[string]bool{} // -> digest ids
	digestOf := map[string]bool{}
	statuses := map[string]int{}
	var n int
	for rows.Next() {
		var recipient, status, digestID string
		var due time.Time
		if err := rows.Scan(&recipient, &status, &digestID, &due); err != nil {
			rows.Close()
			r.fail("read digest rows: %v", err)
			return "error"
		}
		n++
		statuses[status]++
		if status != string(notifyd.StatusDigestSent) {
			continue
		}
		k := instant{recipient, due.UTC()}
		if byInstant[k] == nil {
			byInstant[k] = map[string]bool{}
		}
		byInstant[k][digestID] = true
		digestOf[digestID] = true
	}
	rows.Close()
	if n == 0 {
		r.fail("no digest rows")
		return "none"
	}
	if statuses[string(notifyd.StatusDigestSent)] != n {
		r.fail("digest rows ended %v, want all digest_sent", statuses)
	}
	var split int
	for k, ds := range byInstant {
		if len(ds) > 1 {
			split++
			if split == 1 {
				r.fail("%s got %d digests for the due instant %s", k.recipient, len(ds), k.due.Format(time.RFC3339))
			}
		}
	}
	if split > 1 {
		r.fail("%d (recipient, due instant) pairs got more than one digest", split)
	}
	got := map[string]int{}
	for _, id := range digestReceipts {
		got[id]++
	}
	var lost, dups, unknown int
	for id := range digestOf {
		if got[id] == 0 {
			lost++
		}
	}
	for id, c := range got {
		dups += c - 1
		if !digestOf[id] {
			unknown++
		}
	}
	r.lost += lost
	r.duplicates += dups
	if lost > 0 {
		r.fail("%d digests recorded digest_sent were never received", lost)
	}
	if unknown > 0 {
		r.fail("%d digests received that no row records", unknown)
	}
	if dups > dupBound {
		r.fail("%d duplicate digests, more than the crash window allows (%d)", dups, dupBound)
	}
	r.note("digests: %d rows in %d digests for %d (recipient, due instant) pairs, %d received, %d duplicates",
		n, len(digestOf), len(byInstant), len(got), dups)
	return fmt.Sprintf("%d/%d", len(got), len(byInstant))
}

// The harness's reads of the ledger. They are written against the tables
// (docs/architecture.md, "Tables"), not through stores, so that they check what is stored rather
// than what the code under test believes it stored.
const (
	ledgerSQL = `
SELECT id::text, coalesce(recipient, ''), channel, status, attempts, coalesce(last_error, '')
FROM notify_deliveries
WHERE notification_id = $1`

	inboxCountSQL = `
SELECT count(*), count(DISTINCT i.recipient)
FROM notify_inbox i
WHERE i.notification_id = $1`

	notificationStatusSQL = `
SELECT status, coalesce(error, '') FROM notify_notifications WHERE id = $1`

	// progressSQL is a notification's status and how many delivery rows its
	// fan-out has written (a count: the ledger of a large fan-out is polled).
	progressSQL = `
SELECT n.status, coalesce(n.error, ''), (SELECT count(*) FROM notify_deliveries d WHERE d.notification_id = n.id)
FROM notify_notifications n WHERE n.id = $1`

	// fanoutJobsSQL lists a notification's River fan-out jobs: lane, state,
	// attempt, when it is due and its last error.
	fanoutJobsSQL = `
SELECT coalesce(args->>'lane', '0'), state::text, attempt, scheduled_at,
       coalesce(errors[array_length(errors, 1)]->>'error', '')
FROM river_job
WHERE kind = 'notify.fanout' AND args->>'notification_id' = $1
ORDER BY id`

	// jobStatesSQL counts River jobs by kind and state; stale counts running
	// jobs attempted before $1 (by a process that is gone).
	jobStatesSQL = `
SELECT kind, state::text, count(*), count(*) FILTER (WHERE state = 'running' AND attempted_at < $1)
FROM river_job
GROUP BY 1, 2
ORDER BY 1, 2`

	// digestRowsSQL reads the digest rows of some notifications: which
	// digest took each row, for which due instant.
	digestRowsSQL = `
SELECT coalesce(recipient, ''), status, coalesce(digest_id::text, ''), coalesce(digest_due_at, 'epoch'::timestamptz)
FROM notify_deliveries
WHERE notification_id = ANY($1::uuid[]) AND channel = 'email'`
)

// ledgerRow is one notify_deliveries row.
type ledgerRow struct {
	id, recipient, channel, status, lastError string
	attempts                                  int
}

// redriven reports whether the row's claim was taken back (a process died
// between claim and settle): by the retry sweep after the lease ("claim
// expired") or, the claimant's liveness lock free, by any replica at once
// ("claim released"). That is the only crash window in which a duplicate is
// allowed (the README's guarantee 4). Both write this last_error and a
// successful settle keeps it.
func (r ledgerRow) redriven() bool {
	return strings.HasPrefix(r.lastError, "claim expired") || strings.HasPrefix(r.lastError, "claim released")
}

// snapshot is one notification's state.
type snapshot struct {
	status, err     string
	rows            []ledgerRow
	byStatus        map[string]int
	nonTerminal     int
	inbox, inboxIDs int // inbox items, distinct recipients among them
}

// final reports whether the notification's fan-out is over.
func (s *snapshot) final() bool {
	switch notifyd.NotificationStatus(s.status) {
	case notifyd.NotificationFannedOut, notifyd.NotificationCancelled, notifyd.NotificationRejected:
		return true
	}
	return false
}

func (s *snapshot) statuses() string {
	keys := slices.Sorted(maps.Keys(s.byStatus))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, s.byStatus[k])
	}
	return strings.Join(parts, " ")
}

func (db *database) snapshot(ctx context.Context, id, key string) (*snapshot, error) {
	s := &snapshot{byStatus: map[string]int{}}
	if err := db.pool.QueryRow(ctx, notificationStatusSQL, id).Scan(&s.status, &s.err); err != nil {
		return nil, fmt.Errorf("read notification %s: %w", id, err)
	}
	rows, err := db.pool.Query(ctx, ledgerSQL, id)
	if err != nil {
		return nil, fmt.Errorf("read ledger of %s: %w", id, err)
	}
	for rows.Next() {
		var r ledgerRow
		if err := rows.Scan(&r.id, &r.recipient, &r.channel, &r.status, &r.attempts, &r.lastError); err != nil {
			rows.Close()
			return nil, err
		}
		s.rows = append(s.rows, r)
		s.byStatus[r.status]++
		if !notifyd.DeliveryStatus(r.status).Terminal() {
			s.nonTerminal++
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read ledger of %s: %w", id, err)
	}
	if err := db.pool.QueryRow(ctx, inboxCountSQL, id).Scan(&s.inbox, &s.inboxIDs); err != nil {
		return nil, fmt.Errorf("count inbox of %s: %w", key, err)
	}
	return s, nil
}

// progress is what waitFanout polls.
type progress struct {
	status, err string
	rows        int
}

func (db *database) progress(ctx context.Context, id string) (progress, error) {
	var p progress
	err := db.pool.QueryRow(ctx, progressSQL, id).Scan(&p.status, &p.err, &p.rows)
	return p, err
}

// fanoutJobs describes the notification's River fan-out jobs, for a
// failure message.
func (db *database) fanoutJobs(ctx context.Context, id string) string {
	rows, err := db.pool.Query(ctx, fanoutJobsSQL, id)
	if err != nil {
		return err.Error()
	}
	defer rows.Close()
	var parts []string
	for rows.Next() {
		var lane, state, last string
		var attempt int
		var due time.Time
		if err := rows.Scan(&lane, &state, &attempt, &due, &last); err != nil {
			return err.Error()
		}
		part := fmt.Sprintf("lane %s %s attempt %d", lane, state, attempt)
		if state == "scheduled" || state == "retryable" {
			part += fmt.Sprintf(" due in %s", time.Until(due).Round(time.Second))
		}
		if last != "" {
			part += " last error: " + last
		}
		parts = append(parts, part)
	}
	if err := rows.Err(); err != nil {
		return err.Error()
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "; ")
}

// jobStates summarises river_job; stale counts running jobs attempted before
// the given time (their process is gone).
func (db *database) jobStates(ctx context.Context, before time.Time) (summary string, stale map[string]int, err error) {
	rows, err := db.pool.Query(ctx, jobStatesSQL, before)
	if err != nil {
		return "", nil, err
	}
	defer rows.Close()
	stale = map[string]int{}
	var parts []string
	for rows.Next() {
		var kind, state string
		var n, old int
		if err := rows.Scan(&kind, &state, &n, &old); err != nil {
			return "", nil, err
		}
		parts = append(parts, fmt.Sprintf("%s/%s=%d", kind, state, n))
		if old > 0 {
			stale[kind] += old
		}
	}
	return strings.Join(parts, " "), stale, rows.Err()
}

// expectation says what the end state of a scenario's notifications must be.
type expectation struct {
	// inbox is the number of inbox items each notification must have (one per
	// recipient), or -1 not to check.
	inbox map[string]int // by key
	// mustArrive reports whether a delivery must end sent with its message
	// received at least once.
	mustArrive func(r ledgerRow) bool
	// arrivals is how many deliveries must arrive in all (mustArrive rows
	// the fan-out never wrote are lost too); 0 counts only the rows written.
	arrivals int
	// strictWindow fails duplicates on deliveries the retry sweep never
	// re-drove: with no injected failure other than crashes, a duplicate can
	// only come from a claim taken back after a crash.
	strictWindow bool
	// dupBound is the most duplicates the crash window allows (-1: no bound).
	dupBound int
	// boundWhy explains dupBound in the failure message.
	boundWhy string
}

// verify checks the end state of a scenario's notifications against the
// messages the sinks accepted, and fills in r.
func verify(r *result, snaps map[string]*snapshot, rec receipts, exp expectation) {
	rows := map[string]ledgerRow{}
	for _, s := range snaps {
		r.nonTerminal += s.nonTerminal
		for _, row := range s.rows {
			rows[row.id] = row
			if row.channel != "in_app" {
				r.deliveries++
			}
		}
		if s.nonTerminal > 0 {
			r.fail("%d deliveries not terminal: %s", s.nonTerminal, s.statuses())
		}
	}
	counts := rec.counts()
	r.received = len(counts)
	var unknown, wrongStatus int
	var dupOutside []string
	wrong := map[string]int{}
	for id, n := range counts {
		r.duplicates += n - 1
		row, ok := rows[id]
		if !ok {
			unknown++
			continue
		}
		if row.status != string(notifyd.StatusSent) {
			wrongStatus++
			wrong[row.status]++
		}
		if n > 1 && exp.strictWindow && !row.redriven() {
			dupOutside = append(dupOutside, id)
		}
	}
	if rec.foreign > 0 {
		r.fail("%d accepted messages carry no delivery id", rec.foreign)
	}
	if unknown > 0 {
		r.fail("%d delivery ids received that the ledger does not have", unknown)
	}
	if wrongStatus > 0 {
		r.fail("%d messages were accepted for deliveries the ledger does not record as sent (%v)", wrongStatus, wrong)
	}
	var lostRows, sentUnseen, expected int
	badEnd := map[string]int{}
	for _, row := range rows {
		arrived := counts[row.id] > 0
		if row.status == string(notifyd.StatusSent) && !arrived {
			sentUnseen++
		}
		if exp.mustArrive != nil && exp.mustArrive(row) {
			expected++
			if !arrived {
				lostRows++
			}
			if row.status != string(notifyd.StatusSent) {
				badEnd[row.status]++
			}
		}
	}
	unwritten := max(0, exp.arrivals-expected)
	r.lost += max(lostRows+unwritten, sentUnseen)
	if lostRows > 0 {
		r.fail("%d deliveries that must arrive never did", lostRows)
	}
	if unwritten > 0 {
		r.fail("%d of %d deliveries that must arrive were never even written to the ledger", unwritten, exp.arrivals)
	}
	if sentUnseen > 0 {
		r.fail("%d deliveries are recorded sent but no sink ever accepted them", sentUnseen)
	}
	if len(badEnd) > 0 {
		r.fail("deliveries that must be sent ended otherwise: %v", badEnd)
	}
	for key, want := range exp.inbox {
		s := snaps[key]
		if s == nil || want < 0 {
			continue
		}
		if s.inbox != s.inboxIDs {
			r.fail("%s: %d inbox items for %d recipients (duplicates in the inbox)", key, s.inbox, s.inboxIDs)
		}
		if s.inboxIDs != want {
			r.fail("%s: %d recipients have an inbox item, want %d", key, s.inboxIDs, want)
			r.lost += max(0, want-s.inboxIDs)
		}
	}
	if len(dupOutside) > 0 {
		sort.Strings(dupOutside)
		r.fail("%d duplicated deliveries were never re-driven by the sweep (a duplicate outside the crash window), e.g. %s",
			len(dupOutside), dupOutside[0])
	}
	if exp.dupBound >= 0 && r.duplicates > exp.dupBound {
		r.fail("%d duplicates, more than the crash window allows (%d = %s)", r.duplicates, exp.dupBound, exp.boundWhy)
	}
}
