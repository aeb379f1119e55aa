package stores

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Digest rows move through digest_pending (fresh), digest_sending
// (claimed by a digest job), digest_pending again with a digest_id (waiting for
// a retry) and a terminal status; sql/migrations/00001_init.sql lays out the
// whole life cycle. Every transition below is one statement guarded by the
// status it leaves (and, for a claimed digest, by the claim token claimed_at),
// so two jobs, two sweeps or two replicas racing for the same rows cannot both
// win: the row lock serialises them and the loser's WHERE no longer matches.

// DigestCandidate is a recipient with fresh digest rows (digest_pending and not
// yet part of a digest).
type DigestCandidate struct {
	Recipient string
	// Oldest and OldestID identify the recipient's oldest fresh row, in
	// (created_at, id) order: the digest is due at the first schedule instant
	// after Oldest.
	Oldest   time.Time
	OldestID string
	// Timezone is the profile's time zone as stored ("" without a profile or
	// zone); the caller validates it.
	Timezone string
}

// digestCandidatesSQL reads the next page of recipients with fresh digest rows,
// in recipient order after $1, at most $2 of them, each with its oldest row.
// DISTINCT ON over notify_deliveries_digest_idx (recipient, created_at, id)
// takes the first index entry of each recipient: an index-only scan, one pass.
// The zone is a per-row primary-key lookup, so a page costs the same however
// many recipients have a profile (a join may hash the whole table per page).
const digestCandidatesSQL = `
SELECT c.recipient, c.created_at, c.id::text,
       coalesce((SELECT p.timezone FROM notify_recipients p WHERE p.id = c.recipient), '')
FROM (
    SELECT DISTINCT ON (d.recipient) d.recipient, d.created_at, d.id
    FROM notify_deliveries d
    WHERE d.status = 'digest_pending' AND d.digest_id IS NULL AND d.recipient > $1
    ORDER BY d.recipient, d.created_at, d.id
    LIMIT $2
) c
ORDER BY c.recipient`

// DigestCandidates returns up to limit recipients with fresh digest rows whose
// id sorts after after (byte order; "" starts at the beginning). A page shorter
// than limit is the last one.
func DigestCandidates(ctx context.Context, db DB, after string, limit int) ([]DigestCandidate, error) {
	rows, err := db.Query(ctx, digestCandidatesSQL, after, limit)
	if err != nil {
		return nil, fmt.Errorf("read digest candidates: %w", err)
	}
	defer rows.Close()
	var out []DigestCandidate
	for rows.Next() {
		var c DigestCandidate
		if err := rows.Scan(&c.Recipient, &c.Oldest, &c.OldestID, &c.Timezone); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read digest candidates: %w", err)
	}
	return out, nil
}

// DigestSweepLock is the session advisory lock a digest sweep holds for its
// whole run (LockDigestSweep). Two sweeps at once (a doubled periodic run
// after a leader change, or an operator's) then take turns, and the second
// finds the first's jobs (EnqueuedDigests). A killed sweep's session ends and
// releases it.
const DigestSweepLock = 7345

const (
	lockDigestSweepSQL   = `SELECT pg_advisory_lock($1)`
	unlockDigestSweepSQL = `SELECT pg_advisory_unlock($1)`
)

// LockDigestSweep waits for DigestSweepLock on conn and returns the function
// that releases it. The unlock runs even when ctx has ended; if it fails, it
// closes conn, so that a pool never hands out a connection that still holds
// the lock.
func LockDigestSweep(ctx context.Context, conn *pgx.Conn) (unlock func(), err error) {
	if _, err := conn.Exec(ctx, lockDigestSweepSQL, int64(DigestSweepLock)); err != nil {
		return nil, fmt.Errorf("lock digest sweep: %w", err)
	}
	return func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if _, err := conn.Exec(uctx, unlockDigestSweepSQL, int64(DigestSweepLock)); err != nil {
			_ = conn.Close(uctx)
		}
	}, nil
}

// enqueuedDigestsSQL reads the new digests (no digest_id: recipient and oldest
// fresh row) that notify.digest jobs on queue $1 carry and have not finished:
// available, pending, retryable, running or scheduled, reached through
// River's fetching index on (state, queue). A job carries its digests in its
// "digests" list (jobs.DigestArgs) or, written before jobs carried batches,
// as its top-level recipient and oldest_id. Finished jobs are left out: a
// completed job's claims took its digests' rows, so they are no longer
// fresh, and a discarded or cancelled job's digests must be enqueued again.
const enqueuedDigestsSQL = `
SELECT e->>'recipient', e->>'oldest_id'
FROM river_job j
CROSS JOIN LATERAL jsonb_array_elements(
    coalesce(j.args->'digests', '[]'::jsonb)
    || CASE WHEN j.args ? 'recipient' THEN jsonb_build_array(j.args) ELSE '[]'::jsonb END) e
WHERE j.state IN ('available', 'pending', 'retryable', 'running', 'scheduled')
  AND j.queue = $1
  AND j.kind = 'notify.digest'
  AND coalesce(e->>'digest_id', '') = ''
  AND coalesce(e->>'oldest_id', '') <> ''`

// EnqueuedDigests calls fn with the recipient and oldest fresh row id of
// every new digest that an unfinished notify.digest job on queue carries, as
// the rows stream in. The digest sweep skips those.
func EnqueuedDigests(ctx context.Context, db DB, queue string, fn func(recipient, oldestID string)) error {
	rows, err := db.Query(ctx, enqueuedDigestsSQL, queue)
	if err != nil {
		return fmt.Errorf("read enqueued digests: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var r, o string
		if err := rows.Scan(&r, &o); err != nil {
			return fmt.Errorf("read enqueued digests: %w", err)
		}
		fn(r, o)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read enqueued digests: %w", err)
	}
	return nil
}

// DigestClaimRequest says which rows a digest job claims.
type DigestClaimRequest struct {
	Recipient string
	// DigestID names the digest. For a new digest (Resend false) the claim
	// takes the recipient's fresh rows created before DueAt under this new id;
	// with Resend it takes the rows of the existing digest DigestID again (a
	// retry after a temporary failure, or a claim the sweep re-drove), whatever
	// their age, so the resend covers what the first attempt covered.
	DigestID string
	Resend   bool
	// DueAt bounds a new digest's rows and is stored on them; a resend keeps
	// the due instant its rows carry.
	DueAt time.Time
	// Now is the claim's time, stored as claimed_at: the claim token.
	Now time.Time
	// By is the River client making the claim (claimed_by; see
	// ClaimDeliveriesSuppressing); like Now, the first request's is used for
	// the whole batch. Empty: no claimant, the claim waits for the lease.
	By string
	// MaxItems bounds Items (values below 1 read as 1).
	MaxItems int
	// Suppress, when it names the digest channel and its profile field,
	// has the claim report (ClaimedDigest.Suppressed) recipients whose
	// address is on the suppression list. Like Now, the first request's is
	// used for the whole batch.
	Suppress AddressFields
}

// ClaimedDigest is a claimed digest, as its email needs it. A zero Count means
// there was nothing to claim (or every row was dropped): no email.
type ClaimedDigest struct {
	// Count is the number of rows the claim holds: everything the email covers.
	Count int
	// ClaimedAt is the claim token as stored: only this claim may settle the rows.
	ClaimedAt time.Time
	// DueAt is the digest's due instant as stored on its rows.
	DueAt time.Time
	// Attempts is the number of the attempt being made (1 for a new digest).
	Attempts int
	// Items are the first MaxItems rows, oldest first (created_at, id).
	Items []DigestItem
	// Profile is the recipient's profile, nil when they have none.
	Profile *RecipientProfile
	// Suppressed is the reason the recipient's address is on the
	// suppression list ("" when it is not): the digest must not be sent,
	// and settles `suppressed`.
	Suppressed string
}

// DigestItem is one claimed row as the digest email lists it. Title, Body, URL
// and Category come from the recipient's inbox item for (notifier, key) when it
// exists (what the inbox showed); HasInbox is false otherwise, and the caller
// renders them from the notifier's in_app templates over Params.
type DigestItem struct {
	DeliveryID string
	Notifier   string
	Key        string
	Reason     string
	CreatedAt  time.Time
	Params     json.RawMessage
	HasInbox   bool
	Category   string
	Title      string
	Body       string
	URL        string
}

// claimDigestRowsSQL is the claim of digest rows locked as l (with
// l.cancelled) at time $4, shared by the claim of new digests and the
// re-claim of existing ones: a row of a cancelled notification becomes
// digest_dropped, any other digest_sending with the claim token, one attempt
// more. The new-digest claim also stamps the digest id and due instant.
//
// A row with an `unless` condition (l.unless_met: the recipient has read, or
// seen, the notification's inbox item; see digestUnlessMetSQL) is settled
// `skipped` instead: the digest leaves it out.
const claimDigestRowsSQL = `
    SET status = CASE WHEN l.cancelled THEN 'digest_dropped' WHEN l.unless_met THEN 'skipped' ELSE 'digest_sending' END,
        attempts = d.attempts + CASE WHEN l.cancelled OR l.unless_met THEN 0 ELSE 1 END,
        last_error = CASE WHEN l.cancelled THEN 'notification cancelled'
                          WHEN l.unless_met THEN 'unless ' || d.unless || ': the recipient had ' || d.unless || ' the in-app item when the digest was rendered'
                          ELSE d.last_error END,
        claimed_at = CASE WHEN l.cancelled OR l.unless_met THEN NULL ELSE $4::timestamptz END,
        claimed_by = nullif($6::text, ''),
        settled_at = CASE WHEN l.cancelled OR l.unless_met THEN $4::timestamptz END,
        next_attempt_at = NULL,
        updated_at = $4`

// digestUnlessMetSQL is whether digest row d has an `unless` condition its
// recipient's inbox item of the notification meets (workflows).
const digestUnlessMetSQL = `(d.unless IS NOT NULL AND EXISTS (
               SELECT 1 FROM notify_inbox i
               WHERE i.notification_id = d.notification_id AND i.recipient = d.recipient
                 AND CASE d.unless WHEN 'seen' THEN coalesce(i.seen_at, i.read_at) ELSE i.read_at END IS NOT NULL))`

// reclaimDigestsSQL claims existing digests again, one per request: request
// $3[k] re-claims the rows of digest $2[k] of recipient $1[k] at time $4 and
// gets the first $5 of them back, each tagged with $3[k] and its digest's
// total: all of that digest's rows still digest_pending, whatever their age,
// keeping their digest_id and digest_due_at. Rows are locked in (recipient,
// created_at, id) order like the claim of new digests.
const reclaimDigestsSQL = `
WITH req AS (
    SELECT r.recipient, r.digest_id::uuid AS digest_id, r.ord
    FROM unnest($1::text[], $2::text[], $3::int[]) AS r(recipient, digest_id, ord)
), cand AS (
    SELECT DISTINCT ON (d.id) d.id, d.notification_id, r.ord
    FROM req r
    JOIN notify_deliveries d ON d.digest_id = r.digest_id AND d.recipient = r.recipient
                            AND d.status = 'digest_pending'
    ORDER BY d.id, r.ord
), locked AS (
    SELECT d.id, d.notification_id, c.ord, n.status = 'cancelled' AS cancelled, n.params, ` + digestUnlessMetSQL + ` AS unless_met
    FROM cand c
    JOIN notify_deliveries d ON d.id = c.id AND d.notification_id = c.notification_id
    JOIN notify_notifications n ON n.id = d.notification_id
    WHERE d.status = 'digest_pending'
    ORDER BY d.recipient, d.created_at, d.id
    FOR UPDATE OF d
), claimed AS (
    UPDATE notify_deliveries d` + claimDigestRowsSQL + `
    FROM locked l
    WHERE d.id = l.id AND d.notification_id = l.notification_id
    RETURNING l.ord, d.id, d.notification_id, d.notifier, d.key, d.recipient, d.reason, d.created_at, d.status, d.claimed_at,
              d.digest_due_at, d.attempts, l.params
), held AS (
    SELECT c.*, count(*) OVER (PARTITION BY c.ord) AS total,
           row_number() OVER (PARTITION BY c.ord ORDER BY c.created_at, c.id) AS rn
    FROM claimed c
    WHERE c.status = 'digest_sending'
)
SELECT h.ord, h.total, h.claimed_at, coalesce(h.digest_due_at, h.created_at), h.attempts,
       h.id::text, h.notifier, h.key, h.reason, h.created_at, h.params,
       i.id IS NOT NULL, coalesce(i.category, ''), coalesce(i.title, ''), coalesce(i.body, ''), coalesce(i.url, '')
FROM held h
LEFT JOIN notify_inbox i ON i.notification_id = h.notification_id AND i.recipient = h.recipient
WHERE h.rn <= $5
ORDER BY h.ord, h.created_at, h.id`

// ClaimDigest claims the rows req names and reads what the email needs: a
// batch of one (ClaimDigests).
func ClaimDigest(ctx context.Context, db DB, req DigestClaimRequest) (*ClaimedDigest, error) {
	out, err := ClaimDigests(ctx, db, []DigestClaimRequest{req})
	if err != nil {
		return nil, err
	}
	return out[0], nil
}

// claimDigestsSQL claims new digests, one per request: request k (1-based,
// in $1..$3 order) claims recipient $1[k]'s fresh rows created before $2[k]
// under the new digest id $3[k], at time $4, and gets the first $5 of them
// back (for the email), each row tagged with k and its digest's total.
//
// A row is offered to one request only (the first that asks for its
// recipient): two jobs of one recipient in the same batch split the rows as
// they would one after the other. Rows are locked in (recipient, created_at,
// id) order, so concurrent claims of one recipient queue up on its first row
// instead of deadlocking; a claim that waited re-checks each row on its new
// version and skips it, because the winner moved it out of digest_pending.
// Rows whose notification is cancelled become digest_dropped here: a cancel
// reads the delivery rows its own statement's snapshot sees and can miss one
// that a concurrent fan-out chunk committed meanwhile.
const claimDigestsSQL = `
WITH req AS (
    SELECT r.recipient, r.due_at, r.digest_id::uuid AS digest_id, r.ord
    FROM unnest($1::text[], $2::timestamptz[], $3::text[]) WITH ORDINALITY AS r(recipient, due_at, digest_id, ord)
), cand AS (
    SELECT DISTINCT ON (d.id) d.id, d.notification_id, r.ord, r.digest_id, r.due_at
    FROM req r
    JOIN notify_deliveries d ON d.recipient = r.recipient AND d.status = 'digest_pending'
                            AND d.digest_id IS NULL AND d.created_at < r.due_at
    ORDER BY d.id, r.ord
), locked AS (
    SELECT d.id, d.notification_id, c.ord, c.digest_id, c.due_at, n.status = 'cancelled' AS cancelled, n.params,
           ` + digestUnlessMetSQL + ` AS unless_met
    FROM cand c
    JOIN notify_deliveries d ON d.id = c.id AND d.notification_id = c.notification_id
    JOIN notify_notifications n ON n.id = d.notification_id
    WHERE d.status = 'digest_pending' AND d.digest_id IS NULL
    ORDER BY d.recipient, d.created_at, d.id
    FOR UPDATE OF d
), claimed AS (
    UPDATE notify_deliveries d` + claimDigestRowsSQL + `,
        digest_id = CASE WHEN l.cancelled THEN NULL ELSE l.digest_id END,
        digest_due_at = CASE WHEN l.cancelled THEN NULL ELSE l.due_at END
    FROM locked l
    WHERE d.id = l.id AND d.notification_id = l.notification_id
    RETURNING l.ord, d.id, d.notification_id, d.notifier, d.key, d.recipient, d.reason, d.created_at, d.status, d.claimed_at,
              d.digest_due_at, d.attempts, l.params
), held AS (
    SELECT c.*, count(*) OVER (PARTITION BY c.ord) AS total,
           row_number() OVER (PARTITION BY c.ord ORDER BY c.created_at, c.id) AS rn
    FROM claimed c
    WHERE c.status = 'digest_sending'
)
SELECT h.ord, h.total, h.claimed_at, h.digest_due_at, h.attempts,
       h.id::text, h.notifier, h.key, h.reason, h.created_at, h.params,
       i.id IS NOT NULL, coalesce(i.category, ''), coalesce(i.title, ''), coalesce(i.body, ''), coalesce(i.url, '')
FROM held h
LEFT JOIN notify_inbox i ON i.notification_id = h.notification_id AND i.recipient = h.recipient
WHERE h.rn <= $5
ORDER BY h.ord, h.created_at, h.id`

// digestSuppressedSQL reads which of recipients $1 have their address (the
// profile field $3[k] of the channel $2[k]) on the suppression list, with
// the reason.
const digestSuppressedSQL = `
SELECT x.id, 'address is suppressed: ' || s.reason
FROM (
    SELECT p.id, a.channel,
           lower(btrim(CASE a.field WHEN 'email' THEN p.email WHEN 'webhook_url' THEN p.webhook_url WHEN 'phone' THEN p.phone END)) AS address
    FROM notify_recipients p, unnest($2::text[], $3::text[]) AS a(channel, field)
    WHERE p.id = ANY($1::text[])
    OFFSET 0 -- planned on its own: the probe below is by the whole primary key
) x
JOIN notify_suppressions s ON s.channel = x.channel AND s.address = x.address`

const getRecipientsSQL = `
SELECT id, email, name, locale, timezone, webhook_url, data, webhook_gone_at, tokens_valid_after, created_at, updated_at,
       phone, quiet_hours
FROM notify_recipients
WHERE id = ANY($1::text[])`

// ClaimDigests claims the rows of many digests at once and reads what their
// emails need, in one round trip and one transaction: one statement claims
// every new digest (claimDigestsSQL), one every resend (reclaimDigestsSQL),
// and one reads the recipients' profiles; a pipelined batch ends in a single
// Sync, so on a pool or a connection the three run as one implicit
// transaction (inside a pgx.Tx, as part of it). It returns one ClaimedDigest
// per request, in order; all requests must share Now and MaxItems (the first
// request's are used).
func ClaimDigests(ctx context.Context, db DB, reqs []DigestClaimRequest) ([]*ClaimedDigest, error) {
	out := make([]*ClaimedDigest, len(reqs))
	if len(reqs) == 0 {
		return out, nil
	}
	recipients := make([]string, len(reqs))
	var fresh, resent []int // indexes into reqs
	for i, r := range reqs {
		recipients[i] = r.Recipient
		out[i] = &ClaimedDigest{}
		if r.Resend {
			resent = append(resent, i)
		} else {
			fresh = append(fresh, i)
		}
	}
	now, maxItems, by := reqs[0].Now, max(reqs[0].MaxItems, 1), reqs[0].By
	b := &pgx.Batch{}
	if len(fresh) > 0 {
		dueAts := make([]time.Time, len(fresh))
		ids := make([]string, len(fresh))
		rs := make([]string, len(fresh))
		for k, i := range fresh {
			rs[k], dueAts[k], ids[k] = reqs[i].Recipient, reqs[i].DueAt, reqs[i].DigestID
		}
		// The fresh claim tags its rows with their 1-based place in fresh.
		b.Queue(claimDigestsSQL, rs, dueAts, ids, now, maxItems, by).Query(scanClaimedDigests(out, func(ord int) int {
			if ord < 1 || ord > len(fresh) {
				return -1
			}
			return fresh[ord-1]
		}))
	}
	if len(resent) > 0 {
		ids := make([]string, len(resent))
		rs := make([]string, len(resent))
		ords := make([]int32, len(resent))
		for k, i := range resent {
			rs[k], ids[k], ords[k] = reqs[i].Recipient, reqs[i].DigestID, int32(i+1)
		}
		// The reclaim tags its rows with their 1-based place in reqs.
		b.Queue(reclaimDigestsSQL, rs, ids, ords, now, maxItems, by).Query(scanClaimedDigests(out, func(ord int) int {
			if ord < 1 || ord > len(reqs) || !reqs[ord-1].Resend {
				return -1
			}
			return ord - 1
		}))
	}
	b.Queue(getRecipientsSQL, recipients).Query(scanDigestProfiles(reqs, out))
	if sup := reqs[0].Suppress; len(sup.Channels) > 0 {
		b.Queue(digestSuppressedSQL, recipients, sup.Channels, sup.Fields).Query(scanDigestSuppressed(reqs, out))
	}
	if err := db.SendBatch(ctx, b).Close(); err != nil {
		return nil, fmt.Errorf("claim %d digests: %w", len(reqs), err)
	}
	return out, nil
}

// scanClaimedDigests reads claimed rows, each tagged with an ord that
// index maps to its place in out (-1: a row no request asked for), into
// out's items in order.
func scanClaimedDigests(out []*ClaimedDigest, index func(ord int) int) func(pgx.Rows) error {
	return func(rows pgx.Rows) error {
		for rows.Next() {
			var ord int
			var c ClaimedDigest
			var it DigestItem
			if err := rows.Scan(&ord, &c.Count, &c.ClaimedAt, &c.DueAt, &c.Attempts,
				&it.DeliveryID, &it.Notifier, &it.Key, &it.Reason, &it.CreatedAt, (*[]byte)(&it.Params),
				&it.HasInbox, &it.Category, &it.Title, &it.Body, &it.URL); err != nil {
				return err
			}
			i := index(ord)
			if i < 0 {
				return fmt.Errorf("claim digests: row for request %d of %d", ord, len(out))
			}
			o := out[i]
			o.Count, o.ClaimedAt, o.DueAt, o.Attempts = c.Count, c.ClaimedAt, c.DueAt, c.Attempts
			o.Items = append(o.Items, it)
		}
		return rows.Err()
	}
}

// scanDigestProfiles gives each claimed digest its recipient's profile.
func scanDigestProfiles(reqs []DigestClaimRequest, out []*ClaimedDigest) func(pgx.Rows) error {
	return func(rows pgx.Rows) error {
		profiles := map[string]*RecipientProfile{}
		for rows.Next() {
			p, err := scanRecipient(rows)
			if err != nil {
				return err
			}
			profiles[p.ID] = p
		}
		if err := rows.Err(); err != nil {
			return err
		}
		for i, r := range reqs {
			out[i].Profile = profiles[r.Recipient]
		}
		return nil
	}
}

// scanDigestSuppressed gives each claimed digest why its recipient's address
// is suppressed ("" when it is not).
func scanDigestSuppressed(reqs []DigestClaimRequest, out []*ClaimedDigest) func(pgx.Rows) error {
	return func(rows pgx.Rows) error {
		reasons := map[string]string{}
		for rows.Next() {
			var id, reason string
			if err := rows.Scan(&id, &reason); err != nil {
				return err
			}
			reasons[id] = reason
		}
		if err := rows.Err(); err != nil {
			return err
		}
		for i, r := range reqs {
			out[i].Suppressed = reasons[r.Recipient]
		}
		return nil
	}
}

// DigestSettlement is the outcome of one claimed digest.
type DigestSettlement struct {
	DigestID  string
	ClaimedAt time.Time
	// Status is digest_sent or digest_failed (terminal), or digest_pending for
	// a retry at NextAttemptAt.
	Status        string
	Error         string // "" keeps the rows' last_error
	NextAttemptAt *time.Time
	// Refund gives the attempt back (rate limited, or never attempted).
	Refund bool
	// Provider is who answered the send (channels.Report), recorded on every
	// row of the digest; "" keeps what they had.
	Provider string
	// Failed records the send as a failed attempt of every row of the digest
	// (notify_delivery_attempts), as Settlement.Failed does for a delivery.
	Failed bool
}

// settleDigestSQL records a digest's outcome on all its rows in one statement,
// only while they are still held by the same claim: a claim the sweep took back
// after its lease, and re-drove, is not overwritten by a late worker.
const settleDigestSQL = `
WITH settled AS (
    UPDATE notify_deliveries
    SET status = $3,
        last_error = CASE WHEN $4 = '' THEN last_error ELSE $4 END,
        provider = coalesce(nullif($8::text, ''), provider),
        attempts = attempts - CASE WHEN $6 THEN 1 ELSE 0 END,
        next_attempt_at = $5,
        settled_at = CASE WHEN $3 = 'digest_pending' THEN NULL ELSE $7::timestamptz END,
        claimed_at = NULL,
        updated_at = $7
    WHERE digest_id = $1::uuid AND status = 'digest_sending' AND claimed_at = $2
    RETURNING id, notification_id, attempts
), attempts AS (
    INSERT INTO notify_delivery_attempts (delivery_id, notification_id, attempt, at, error, provider)
    SELECT id, notification_id, attempts, $7, $4, nullif($8::text, '') FROM settled WHERE $9
)
SELECT count(*) FROM settled`

// SettleDigest records s at time now and reports how many rows were still held
// by the claim (0: the claim was lost, record nothing else).
func SettleDigest(ctx context.Context, db DB, s DigestSettlement, now time.Time) (int64, error) {
	var n int64
	err := db.QueryRow(ctx, settleDigestSQL, s.DigestID, s.ClaimedAt, s.Status, s.Error, s.NextAttemptAt, s.Refund, now,
		s.Provider, s.Failed).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("settle digest %s: %w", s.DigestID, err)
	}
	return n, nil
}

// settleDigestsSQL is settleDigestSQL for many terminal outcomes at once
// ($3: digest_sent or digest_failed), at time $5; it returns, per settlement
// (1-based, in $1 order), how many rows the claim still held.
//
// There is no join: a row finds its settlement by the position of its digest
// id in $1, cast to uuid[] once (a). Joining the rows to an unnest of the
// settlements ran as a nested loop that rescanned the unnest for every row and
// compared each row with every settlement, in the executor: a third of the
// statement's time.
const settleDigestsSQL = `
WITH a AS MATERIALIZED (
    SELECT $1::text[]::uuid[] AS ids
), settled AS (
    UPDATE notify_deliveries d
    SET status = ($3::text[])[array_position(a.ids, d.digest_id)],
        last_error = coalesce(nullif(($4::text[])[array_position(a.ids, d.digest_id)], ''), d.last_error),
        provider = coalesce(nullif(($6::text[])[array_position(a.ids, d.digest_id)], ''), d.provider),
        next_attempt_at = NULL,
        settled_at = $5::timestamptz,
        claimed_at = NULL,
        updated_at = $5
    FROM a
    WHERE d.digest_id = ANY($1::text[]::uuid[]) -- the index condition (a.ids would be a filter over every digest in flight)
      AND d.status = 'digest_sending'
      AND d.claimed_at = ($2::timestamptz[])[array_position(a.ids, d.digest_id)]
    RETURNING array_position(a.ids, d.digest_id) AS ord, d.id, d.notification_id, d.attempts
), attempts AS (
    -- A failed digest is a failed attempt of each of its rows.
    INSERT INTO notify_delivery_attempts (delivery_id, notification_id, attempt, at, error, provider)
    SELECT id, notification_id, attempts, $5, ($4::text[])[ord], nullif(($6::text[])[ord], '')
    FROM settled WHERE ($7::boolean[])[ord]
)
SELECT ord, count(*) FROM settled GROUP BY ord`

// SettleDigests records terminal outcomes (digest_sent, digest_failed) of
// many digests in one statement and reports, per settlement, how many rows
// were still held by its claim. Retries (digest_pending) go through
// SettleDigestRetries, with their jobs in the same transaction.
func SettleDigests(ctx context.Context, db DB, ss []DigestSettlement, now time.Time) ([]int64, error) {
	held := make([]int64, len(ss))
	if len(ss) == 0 {
		return held, nil
	}
	ids := make([]string, len(ss))
	claimedAts := make([]time.Time, len(ss))
	statuses := make([]string, len(ss))
	errs := make([]string, len(ss))
	providers := make([]string, len(ss))
	failed := make([]bool, len(ss))
	for i, s := range ss {
		if s.Status == "digest_pending" || s.Refund || s.NextAttemptAt != nil {
			return nil, fmt.Errorf("settle digests: digest %s is a retry; settle it with SettleDigest", s.DigestID)
		}
		ids[i], claimedAts[i], statuses[i], errs[i], providers[i], failed[i] = s.DigestID, s.ClaimedAt, s.Status, s.Error, s.Provider, s.Failed
	}
	rows, err := db.Query(ctx, settleDigestsSQL, ids, claimedAts, statuses, errs, now, providers, failed)
	if err != nil {
		return nil, fmt.Errorf("settle %d digests: %w", len(ss), err)
	}
	return heldPerSettlement(rows, len(ss), "digests")
}

// heldPerSettlement reads the (ord, count) rows of a grouped digest settle:
// how many rows each settlement's claim still held, in settlement order.
func heldPerSettlement(rows pgx.Rows, n int, what string) ([]int64, error) {
	defer rows.Close()
	held := make([]int64, n)
	for rows.Next() {
		var ord int
		var c int64
		if err := rows.Scan(&ord, &c); err != nil {
			return nil, err
		}
		if ord >= 1 && ord <= n {
			held[ord-1] = c
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("settle %d %s: %w", n, what, err)
	}
	return held, nil
}

// settleDigestRetriesSQL is settleDigestSQL for many retries at once: the
// rows of each digest in $1 still held by its claim ($2) go back to
// digest_pending under the same id, with last_error $3 ("" keeps it), the
// next attempt at $4 and the attempt given back where $5 says so, at time $6;
// it returns, per settlement (1-based, in $1 order), how many rows the claim
// still held. Like settleDigestsSQL it finds each row's settlement by
// array_position rather than by a join.
const settleDigestRetriesSQL = `
WITH a AS MATERIALIZED (
    SELECT $1::text[]::uuid[] AS ids
), settled AS (
    UPDATE notify_deliveries d
    SET status = 'digest_pending',
        last_error = coalesce(nullif(($3::text[])[array_position(a.ids, d.digest_id)], ''), d.last_error),
        attempts = d.attempts - CASE WHEN ($5::bool[])[array_position(a.ids, d.digest_id)] THEN 1 ELSE 0 END,
        provider = coalesce(nullif(($7::text[])[array_position(a.ids, d.digest_id)], ''), d.provider),
        next_attempt_at = ($4::timestamptz[])[array_position(a.ids, d.digest_id)],
        settled_at = NULL,
        claimed_at = NULL,
        updated_at = $6
    FROM a
    WHERE d.digest_id = ANY($1::text[]::uuid[]) -- the index condition, as in settleDigestsSQL
      AND d.status = 'digest_sending'
      AND d.claimed_at = ($2::timestamptz[])[array_position(a.ids, d.digest_id)]
    RETURNING array_position(a.ids, d.digest_id) AS ord, d.id, d.notification_id, d.attempts
), attempts AS (
    INSERT INTO notify_delivery_attempts (delivery_id, notification_id, attempt, at, error, provider)
    SELECT id, notification_id, attempts, $6, ($3::text[])[ord], nullif(($7::text[])[ord], '')
    FROM settled WHERE ($8::boolean[])[ord]
)
SELECT ord, count(*) FROM settled GROUP BY ord`

// SettleDigestRetries records retries (digest_pending with NextAttemptAt) of
// many digests in one statement, at time now, and reports, per settlement,
// how many rows were still held by its claim. Call it in the transaction that
// enqueues the jobs that will resend them.
func SettleDigestRetries(ctx context.Context, db DB, ss []DigestSettlement, now time.Time) ([]int64, error) {
	held := make([]int64, len(ss))
	if len(ss) == 0 {
		return held, nil
	}
	ids := make([]string, len(ss))
	claimedAts := make([]time.Time, len(ss))
	errs := make([]string, len(ss))
	nexts := make([]time.Time, len(ss))
	refunds := make([]bool, len(ss))
	providers := make([]string, len(ss))
	failed := make([]bool, len(ss))
	for i, s := range ss {
		if s.Status != "digest_pending" || s.NextAttemptAt == nil {
			return nil, fmt.Errorf("settle digest retries: digest %s is not a retry (status %s)", s.DigestID, s.Status)
		}
		ids[i], claimedAts[i], errs[i], nexts[i], refunds[i], providers[i], failed[i] =
			s.DigestID, s.ClaimedAt, s.Error, *s.NextAttemptAt, s.Refund, s.Provider, s.Failed
	}
	rows, err := db.Query(ctx, settleDigestRetriesSQL, ids, claimedAts, errs, nexts, refunds, now, providers, failed)
	if err != nil {
		return nil, fmt.Errorf("settle %d digest retries: %w", len(ss), err)
	}
	return heldPerSettlement(rows, len(ss), "digest retries")
}

// RedrivenDigest is a digest the sweep took back: its rows are digest_pending
// again, under the same id, and need a job.
type RedrivenDigest struct {
	Recipient string
	DigestID  string
	DueAt     time.Time
}

// redriveDigestsSQL is the digest sweep's recovery statement. It takes back,
// whole, up to $4 digests whose claim is older than the lease $2 (a worker
// killed between claim and settle: the email may or may not have gone — the
// crash window of guarantee 4 — and the resend carries the same id), and
// digests waiting for a retry that is overdue by the grace period $3 (their
// job was lost). Their rows become digest_pending again, due now. Two sweeps
// racing: the second waits on the row locks, re-checks, and takes nothing.
const redriveDigestsSQL = `
WITH due AS (
    SELECT digest_id FROM notify_deliveries
    WHERE digest_id IS NOT NULL
      AND ((status = 'digest_sending' AND claimed_at < $1::timestamptz - $2::interval)
           OR (status = 'digest_pending' AND next_attempt_at < $1::timestamptz - $3::interval))
    GROUP BY digest_id
    ORDER BY min(created_at)
    LIMIT $4
), taken AS (
    UPDATE notify_deliveries d
    SET status = 'digest_pending',
        last_error = CASE WHEN d.status = 'digest_sending'
                          THEN 'claim expired after ' || $2::interval::text || ' (worker stopped mid-send); re-driven'
                          ELSE d.last_error END,
        claimed_at = NULL, next_attempt_at = $1, updated_at = $1
    FROM due
    WHERE d.digest_id = due.digest_id
      AND ((d.status = 'digest_sending' AND d.claimed_at < $1::timestamptz - $2::interval)
           OR (d.status = 'digest_pending' AND d.next_attempt_at < $1::timestamptz - $3::interval))
    RETURNING d.recipient, d.digest_id, coalesce(d.digest_due_at, d.created_at) AS digest_due_at
)
SELECT DISTINCT recipient, digest_id::text, digest_due_at
FROM taken
ORDER BY 1, 2`

// RedriveDigests runs the recovery statement at time now and returns the
// digests to enqueue a job for.
func RedriveDigests(ctx context.Context, db DB, now time.Time, lease, grace time.Duration, limit int) ([]RedrivenDigest, error) {
	rows, err := db.Query(ctx, redriveDigestsSQL, now, lease, grace, limit)
	if err != nil {
		return nil, fmt.Errorf("re-drive digests: %w", err)
	}
	defer rows.Close()
	var out []RedrivenDigest
	for rows.Next() {
		var r RedrivenDigest
		if err := rows.Scan(&r.Recipient, &r.DigestID, &r.DueAt); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("re-drive digests: %w", err)
	}
	return out, nil
}
