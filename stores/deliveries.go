package stores

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Claimed is a delivery claimed by a send job, with what the channel needs.
type Claimed struct {
	ID             string
	NotificationID string
	Notifier       string
	Key            string
	Recipient      *string // nil for bulk
	Channel        string
	Reason         string
	Mode           string
	Attempts       int // including this attempt
	CreatedAt      time.Time
	ClaimedAt      time.Time // the claim token: settle only matches this claim
	LastError      *string

	Params   json.RawMessage
	Actor    string
	Email    string
	Name     string
	Locale   string
	Timezone string
	Webhook  string
	Phone    string
	Data     json.RawMessage
	// Tenant is the notification's tenant as {"id", "name", "branding"}
	// (nil for none, or a tenant deleted since).
	Tenant json.RawMessage
}

// claimSQL claims deliveries atomically in the ledger: only rows that are not
// sent, not terminal and not claimed by someone else (see protectedStatuses —
// an unknown status is claimable), and whose retry time has come. Two workers
// racing for the same row: one UPDATE wins, the other sees it `sending` and
// skips it (the UPDATE re-checks status and retry time on the row version
// it locks). attempts counts the attempt being made. A row whose notification
// was cancelled (a retry scheduled before the cancel committed) is settled
// `cancelled` instead of being claimed — except a carrier of a batch that
// still has members: the cancel could not hand it to the next member while
// it was in flight, and the members' message must still go.
//
// Suppression: a row whose recipient's address for its channel (the pairs
// $4 channel, $5 profile field: AddressFields) is on the suppression list is
// settled `suppressed` here, with the suppression's reason, and not
// returned, so its channel is never called. The check is one probe of the
// list's primary key (channel, address) per row, skipped whole while the
// list is empty.
//
// Workflows: a delivery with an `unless` condition whose recipient has read
// (or seen) the notification's inbox item is settled `skipped` by this same
// statement (t.met reads the item at the statement's snapshot), so a mark
// that committed before the claim always wins over the send.
//
// The shape is for the planner as much as for the executor. The ledger is
// partitioned, and every reference to it is planned over every partition
// with all of its indexes, so the statement names it twice only: t reads
// each row once with everything the claim decides by and everything the
// send needs (notification, profile, tenant), and the UPDATE writes it. Its
// generic plan (genericBatch) is made once per connection and again after
// an ANALYZE of a table it reads; with the ledger named four times (one CTE
// each for suppression, unless and batch carriers) that cost 10–15 ms a
// connection on a loaded two-core machine, a third of it now.
const claimSQL = `
WITH t AS MATERIALIZED (
    SELECT d.id, d.notification_id,
           n.status = 'cancelled' AND NOT (d.batch_id IS NOT NULL AND EXISTS (
               SELECT 1 FROM notify_batches b WHERE b.id = d.batch_id AND cardinality(b.members) > 0)) AS cancelled,
           CASE WHEN d.recipient IS NOT NULL AND EXISTS (SELECT 1 FROM notify_suppressions) THEN (
               SELECT 'address is suppressed: ' || s.reason
               FROM unnest($4::text[], $5::text[]) AS a(channel, field)
               JOIN notify_suppressions s ON s.channel = a.channel
                AND s.address = lower(btrim(CASE a.field WHEN 'email' THEN p.email WHEN 'webhook_url' THEN p.webhook_url
                                                         WHEN 'phone' THEN p.phone END))
               WHERE a.channel = d.channel
               LIMIT 1) END AS suppressed,
           CASE WHEN d.unless IS NOT NULL AND d.recipient IS NOT NULL THEN EXISTS (
               SELECT 1 FROM notify_inbox i
               WHERE i.notification_id = d.notification_id AND i.recipient = d.recipient
                 AND CASE d.unless WHEN 'seen' THEN coalesce(i.seen_at, i.read_at) ELSE i.read_at END IS NOT NULL)
                ELSE false END AS met,
           n.params, coalesce(n.actor, '') AS actor,
           coalesce(p.email, '') AS email, coalesce(p.name, '') AS name, coalesce(p.locale, '') AS locale,
           coalesce(p.timezone, '') AS timezone,
           CASE WHEN p.webhook_gone_at IS NULL THEN coalesce(p.webhook_url, '') ELSE '' END AS webhook,
           coalesce(p.data, '{}') AS data, coalesce(p.phone, '') AS phone,
           (SELECT jsonb_build_object('id', tn.id, 'name', tn.name, 'branding', tn.branding)
            FROM notify_tenants tn WHERE tn.id = n.tenant) AS tenant
    FROM notify_deliveries d
    JOIN notify_notifications n ON n.id = d.notification_id
    LEFT JOIN notify_recipients p ON p.id = d.recipient
    WHERE d.id = ANY($1::text[]::uuid[])
      AND d.status <> ALL($2::text[])
      AND (d.next_attempt_at IS NULL OR d.next_attempt_at <= $3)
), claimed AS (
    UPDATE notify_deliveries d
    SET status = CASE WHEN t.cancelled THEN 'cancelled' WHEN t.suppressed IS NOT NULL THEN 'suppressed'
                      WHEN t.met THEN 'skipped' ELSE 'sending' END,
        claimed_at = CASE WHEN t.cancelled OR t.suppressed IS NOT NULL OR t.met THEN NULL ELSE $3::timestamptz END,
        claimed_by = nullif($6::text, ''),
        attempts = d.attempts + CASE WHEN t.cancelled OR t.suppressed IS NOT NULL OR t.met THEN 0 ELSE 1 END,
        settled_at = CASE WHEN t.cancelled OR t.suppressed IS NOT NULL OR t.met THEN $3::timestamptz END,
        last_error = CASE WHEN t.cancelled THEN 'notification cancelled'
                          WHEN t.suppressed IS NOT NULL THEN t.suppressed
                          WHEN t.met
                          THEN 'unless ' || d.unless || ': the recipient had ' || d.unless || ' the in-app item when the delivery was due'
                          ELSE d.last_error END,
        next_attempt_at = CASE WHEN t.suppressed IS NOT NULL OR t.met THEN NULL ELSE d.next_attempt_at END,
        updated_at = $3
    FROM t
    WHERE d.id = ANY($1::text[]::uuid[])
      AND d.id = t.id AND d.notification_id = t.notification_id
      AND d.status <> ALL($2::text[])
      AND (d.next_attempt_at IS NULL OR d.next_attempt_at <= $3)
    RETURNING d.id, d.notification_id, d.notifier, d.key, d.recipient, d.channel, d.reason, d.mode, d.attempts,
              d.created_at, d.claimed_at, d.last_error, d.status
)
SELECT c.id::text, c.notification_id::text, c.notifier, c.key, c.recipient, c.channel, c.reason, c.mode,
       c.attempts, c.created_at, c.claimed_at, c.last_error,
       t.params, t.actor, t.email, t.name, t.locale, t.timezone, t.webhook, t.data, t.phone, t.tenant
FROM claimed c
JOIN t ON t.id = c.id
WHERE c.status = 'sending'
ORDER BY c.id`

// ClaimDeliveries claims whichever of ids can be sent now, at time now,
// without a suppression check and without a claimant (ClaimDeliveriesSuppressing).
func ClaimDeliveries(ctx context.Context, db DB, ids []string, now time.Time) ([]Claimed, error) {
	return ClaimDeliveriesSuppressing(ctx, db, ids, now, AddressFields{}, "")
}

// ClaimDeliveriesSuppressing is ClaimDeliveries that also settles, in the
// same statement, the rows whose recipient's address (per fields) is on the
// suppression list as `suppressed`; they are not returned. by is the River
// client making the claim (claimed_by): once that client's process is gone
// (RescueDeadClients) its claims are taken back at once. An empty by claims
// without a claimant, and such a claim waits for retry.lease.
func ClaimDeliveriesSuppressing(ctx context.Context, db DB, ids []string, now time.Time, fields AddressFields, by string) ([]Claimed, error) {
	// On its generic plan (see genericBatch): planned for its ids, the claim
	// took 14 ms to plan, against well under one to run.
	var out []Claimed
	b := genericBatch()
	b.Queue(claimSQL, ids, protectedStatuses, now, fields.Channels, fields.Fields, by).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var c Claimed
			if err := rows.Scan(&c.ID, &c.NotificationID, &c.Notifier, &c.Key, &c.Recipient, &c.Channel, &c.Reason,
				&c.Mode, &c.Attempts, &c.CreatedAt, &c.ClaimedAt, &c.LastError, &c.Params, &c.Actor, &c.Email, &c.Name,
				&c.Locale, &c.Timezone, &c.Webhook, &c.Data, &c.Phone, &c.Tenant); err != nil {
				return err
			}
			out = append(out, c)
		}
		return rows.Err()
	})
	if err := sendGeneric(ctx, db, b); err != nil {
		return nil, fmt.Errorf("claim deliveries: %w", err)
	}
	return out, nil
}

// Settlement is the outcome of one claimed delivery.
type Settlement struct {
	ID        string
	ClaimedAt time.Time
	Status    string
	Error     string
	// NextAttemptAt is when a failed or rate-limited delivery may be tried again.
	NextAttemptAt *time.Time
	// Refund gives the attempt back (rate limiting, or never attempted).
	Refund   bool
	Terminal bool
	// Provider is who answered the attempt (channels.Report): recorded on
	// the row; "" keeps what it had.
	Provider string
	// ProviderMessageID is the id the provider gave the message it
	// accepted (channels.Report): recorded on the row; "" keeps what it had.
	ProviderMessageID string
	// Failed records the outcome as a failed attempt (time, Error, Provider)
	// in notify_delivery_attempts: set for a provider call that failed, not
	// for a delivery given back, parked or rate-limited without an attempt.
	Failed bool
}

// settleSQL records outcomes in one statement. It only touches rows still held
// by the same claim (status sending and the same claimed_at), so a claim the
// retry sweep took back after its lease is not overwritten by a late worker.
// A temporary failure of a notification cancelled while the send was in
// flight settles `cancelled`: it is not retried after the cancel — unless
// the delivery carries a batch (batch_id): the batch's other members ride on
// it (notify_cancel hands a carrier that is not in flight to the next
// member, but cannot take one from a send), so it fails as usual and the
// claim of its retry decides (claimSQL's carried).
//
// A batch with a temporary failure settles with settleRetrySQL, which reads
// the notifications FOR SHARE: a cancel in progress holds its notification
// row, so the settle waits for it and then reads the row as the cancel left
// it. Read at the statement's snapshot instead, a settle that started just
// before a cancel committed recorded `failed`, and the cancel, which leaves
// `sending` rows alone, returned with the row claimable. Terminal outcomes do
// not depend on the notification, so an all-terminal batch (the common case)
// takes no lock: share-locking one notification row from every settle cost
// immediate email about 3%.
//
// The rows are found by primary key, through `d.id = ANY(...)`, and only so:
// the status check is written `(…) IS TRUE`, which no index can serve. As a
// plain `d.status = 'sending'` the generic plan, estimating from statistics
// taken when few rows were in flight, read every row in flight through
// notify_deliveries_retry_idx and matched them against the batch: 2,000–4,000
// heap rows for a settle of 50 while an email burst was running.
//
// The ids are cast to uuid once, in unnest: cast in the join, the cast ran for
// every (row, outcome) pair whenever the planner chose a nested loop.
//
// The lock-free statement joins the notifications directly: as an inlined CTE
// they became a semi-join that probed the batch's ids again for every row
// (immediate email fell from 10,000 to 1,500 deliveries/s).
//
// A batch with a failed attempt in it (see Settlement.Failed) settles with
// the same statement wrapped in a CTE whose RETURNING feeds one INSERT into
// notify_delivery_attempts: still one statement, no round trip per row, and
// the batches of the common case (every send accepted) write nothing more
// than the delivery rows. The provider of every outcome lands on the row.
const (
	settleSQL      = settleSetSQL + ` notify_notifications n` + settleWhereSQL
	settleRetrySQL = settleLockSQL + settleSetSQL + ` n` + settleWhereSQL

	settleAttemptsSQL      = `WITH settled AS (` + settleSQL + settleReturningSQL + `)` + insertAttemptsSQL
	settleRetryAttemptsSQL = settleLockSQL + `, settled AS (` + settleSetSQL + ` n` + settleWhereSQL +
		settleReturningSQL + `)` + insertAttemptsSQL
)

const settleLockSQL = `WITH n AS (
    SELECT id, status FROM notify_notifications
    WHERE id IN (SELECT notification_id FROM notify_deliveries WHERE id = ANY($1::text[]::uuid[]))
    FOR SHARE
)`

const settleSetSQL = `
UPDATE notify_deliveries d
SET status = CASE WHEN u.status IN ('failed', 'rate_limited') AND n.status = 'cancelled' AND d.batch_id IS NULL
                  THEN 'cancelled' ELSE u.status END,
    last_error = CASE WHEN u.err = '' THEN d.last_error ELSE u.err END,
    provider = CASE WHEN u.provider = '' THEN d.provider ELSE u.provider END,
    provider_message_id = CASE WHEN u.message_id = '' THEN d.provider_message_id ELSE u.message_id END,
    attempts = d.attempts - CASE WHEN u.refund THEN 1 ELSE 0 END,
    next_attempt_at = u.next_at,
    settled_at = CASE WHEN u.terminal OR (n.status = 'cancelled' AND d.batch_id IS NULL) THEN $7::timestamptz END,
    claimed_at = NULL,
    updated_at = $7
FROM unnest($1::text[]::uuid[], $2::timestamptz[], $3::text[], $4::text[], $5::timestamptz[], $6::boolean[], $8::boolean[],
            $9::text[], $10::boolean[], $11::text[])
     AS u(id, claimed_at, status, err, next_at, refund, terminal, provider, failed, message_id),`

const settleWhereSQL = `
WHERE d.id = ANY($1::text[]::uuid[]) -- the only index condition: see above
  AND d.id = u.id AND (d.status = 'sending') IS TRUE AND d.claimed_at = u.claimed_at AND n.id = d.notification_id`

// settleReturningSQL and insertAttemptsSQL record the failed attempts of the
// rows the settle matched (a late settle of a claim taken back records
// nothing, like the update). attempts already counts the attempt that failed
// (the claim added it; a failed attempt is never refunded).
const settleReturningSQL = `
RETURNING d.id, d.notification_id, d.attempts, u.err, u.provider, u.failed`

const insertAttemptsSQL = `, attempts AS (
    INSERT INTO notify_delivery_attempts (delivery_id, notification_id, attempt, at, error, provider)
    SELECT id, notification_id, attempts, $7, err, nullif(provider, '') FROM settled WHERE failed
)
SELECT count(*) FROM settled`

// SettleDeliveries records outcomes at time now and reports how many rows were
// still held by their claim.
func SettleDeliveries(ctx context.Context, db DB, s []Settlement, now time.Time) (int64, error) {
	if len(s) == 0 {
		return 0, nil
	}
	ids := make([]string, len(s))
	claimed := make([]time.Time, len(s))
	statuses := make([]string, len(s))
	errs := make([]string, len(s))
	next := make([]*time.Time, len(s))
	refund := make([]bool, len(s))
	terminal := make([]bool, len(s))
	providers := make([]string, len(s))
	failed := make([]bool, len(s))
	messageIDs := make([]string, len(s))
	retry, attempts := false, false
	for i, x := range s {
		ids[i], claimed[i], statuses[i], errs[i], next[i], refund[i], terminal[i], providers[i], failed[i] =
			x.ID, x.ClaimedAt, x.Status, x.Error, x.NextAttemptAt, x.Refund, x.Terminal, x.Provider, x.Failed
		messageIDs[i] = x.ProviderMessageID
		retry = retry || !x.Terminal
		attempts = attempts || x.Failed
	}
	args := []any{ids, claimed, statuses, errs, next, refund, now, terminal, providers, failed, messageIDs}
	var sql string
	switch {
	case attempts && retry:
		sql = settleRetryAttemptsSQL
	case attempts:
		sql = settleAttemptsSQL
	case retry:
		sql = settleRetrySQL
	default:
		sql = settleSQL
	}
	// On its generic plan (see genericBatch): a settle of one or two
	// outcomes was planned again on every call.
	var n int64
	b := genericBatch()
	if attempts {
		b.Queue(sql, args...).QueryRow(func(row pgx.Row) error { return row.Scan(&n) })
	} else {
		b.Queue(sql, args...).Exec(func(tag pgconn.CommandTag) error {
			n = tag.RowsAffected()
			return nil
		})
	}
	if err := sendGeneric(ctx, db, b); err != nil {
		return 0, fmt.Errorf("settle %d deliveries: %w", len(s), err)
	}
	return n, nil
}

const markWebhookGoneSQL = `
UPDATE notify_recipients SET webhook_gone_at = $2, updated_at = $2
WHERE id = ANY($1::text[]) AND webhook_gone_at IS NULL`

// MarkWebhookGone marks the recipients' webhook_url unusable (it answered 410).
func MarkWebhookGone(ctx context.Context, db DB, recipients []string, now time.Time) error {
	if len(recipients) == 0 {
		return nil
	}
	_, err := db.Exec(ctx, markWebhookGoneSQL, recipients, now)
	return err
}

// redriveSQL is the retry sweep's statement. It takes back claims older than
// the lease (a worker killed between claim and settle: the send may or may not
// have happened — this is the crash window of guarantee 4) and picks up
// failed, rate-limited or pending rows that are overdue by the grace period
// (their job was lost), oldest first, at most $4 rows, skipping rows another
// replica's sweep holds. Each comes back due now, for a fresh send job —
// except a dead claim on a delivery older than retry.max_age ($5), which is
// expired instead: a channel that keeps killing its worker must not be
// retried (and perhaps re-sent) forever.
const redriveSQL = `
WITH due AS (
    SELECT id FROM notify_deliveries
    WHERE (status = 'sending' AND claimed_at < $1::timestamptz - $2::interval)
       OR (status IN ('failed', 'rate_limited', 'pending')
           AND coalesce(next_attempt_at, updated_at) < $1::timestamptz - $3::interval)
       OR (status = 'scheduled' AND next_attempt_at < $1::timestamptz - $3::interval) -- its job was lost
    ORDER BY coalesce(next_attempt_at, created_at)
    LIMIT $4
    FOR UPDATE SKIP LOCKED
)
UPDATE notify_deliveries d
SET status = CASE WHEN d.status = 'sending' AND d.created_at < $1::timestamptz - $5::interval THEN 'expired'
                  WHEN d.status = 'sending' THEN 'failed'
                  ELSE d.status END,
    last_error = CASE WHEN d.status = 'sending' THEN 'claim expired after ' || $2::interval::text || ' (worker stopped mid-send); re-driven' ELSE d.last_error END,
    settled_at = CASE WHEN d.status = 'sending' AND d.created_at < $1::timestamptz - $5::interval THEN $1 END,
    claimed_at = NULL, next_attempt_at = $1, updated_at = $1
FROM due
WHERE d.id = due.id
RETURNING d.id::text, d.status`

// RedriveDeliveries runs the retry sweep's statement and returns the ids to
// enqueue send jobs for.
func RedriveDeliveries(ctx context.Context, db DB, now time.Time, lease, grace, maxAge time.Duration, limit int) ([]string, error) {
	rows, err := db.Query(ctx, redriveSQL, now, lease, grace, limit, maxAge)
	if err != nil {
		return nil, fmt.Errorf("re-drive deliveries: %w", err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id, status string
		if err := rows.Scan(&id, &status); err != nil {
			return nil, err
		}
		if status != "expired" {
			ids = append(ids, id)
		}
	}
	return ids, rows.Err()
}

// RedrivableStatuses are the statuses an operator may re-drive with `notifyd
// retry`: deliveries that were not sent and whose failure may have been the
// provider's (an outage, a bad deploy on their side).
var RedrivableStatuses = []string{"failed", "rate_limited", "pending", "expired", "refused"}

// LedgerRow is one delivery in the recent-deliveries log (the dev page, ops tools).
type LedgerRow struct {
	Notifier  string
	Key       string
	Recipient *string
	Channel   string
	Mode      string
	Status    string
	Attempts  int
	LastError *string
	UpdatedAt time.Time
	// NextAttemptAt is when a scheduled delivery is due; nil for any other.
	NextAttemptAt *time.Time
}

const recentDeliveriesSQL = `
SELECT notifier, key, recipient, channel, mode, status, attempts, last_error, updated_at,
       CASE WHEN status = 'scheduled' THEN next_attempt_at END
FROM notify_deliveries
ORDER BY updated_at DESC, id
LIMIT $1`

// RecentDeliveries returns the limit most recently changed delivery rows.
func RecentDeliveries(ctx context.Context, db DB, limit int) ([]LedgerRow, error) {
	rows, err := db.Query(ctx, recentDeliveriesSQL, limit)
	if err != nil {
		return nil, fmt.Errorf("recent deliveries: %w", err)
	}
	defer rows.Close()
	var out []LedgerRow
	for rows.Next() {
		var r LedgerRow
		if err := rows.Scan(&r.Notifier, &r.Key, &r.Recipient, &r.Channel, &r.Mode, &r.Status, &r.Attempts,
			&r.LastError, &r.UpdatedAt, &r.NextAttemptAt); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// admitRecipientCapSQL admits one attempt of delivery $5 to recipient $1 on
// channel $2 against the channel's per-recipient cap ($3 attempts in any
// window of $4 seconds, at $6), in notify_throttle under the empty notifier
// name (no notifier has it): the same upsert as a notifier's throttle
// (writeChunkSQL), so concurrent sends queue on the row and cannot admit
// more than the cap. The attempt was admitted when its instant is the last
// one recorded and the row names it.
const admitRecipientCapSQL = `
INSERT INTO notify_throttle AS t (recipient, notifier, channel, lim, per, admitted, last_delivery, updated_at)
VALUES ($1, '', $2, $3, $4 * interval '1 second', ARRAY[$6::timestamptz], $5::uuid, $6)
ON CONFLICT (recipient, notifier, channel) DO UPDATE
SET lim = EXCLUDED.lim, per = EXCLUDED.per, updated_at = $6,
    admitted = ARRAY(SELECT a FROM unnest(t.admitted) a WHERE a > $6 - EXCLUDED.per ORDER BY a)
               || CASE WHEN (SELECT count(*) FROM unnest(t.admitted) a WHERE a > $6 - EXCLUDED.per) < EXCLUDED.lim
                       THEN ARRAY[$6::timestamptz] ELSE '{}'::timestamptz[] END,
    last_delivery = CASE WHEN (SELECT count(*) FROM unnest(t.admitted) a WHERE a > $6 - EXCLUDED.per) < EXCLUDED.lim
                         THEN EXCLUDED.last_delivery ELSE t.last_delivery END
RETURNING t.last_delivery = $5::uuid AND t.admitted[cardinality(t.admitted)] = $6`

// AdmitRecipientCap admits one attempt of delivery id to recipient on
// channel against a cap of limit attempts in any window of per (see
// channels.RecipientCapper), at now, and reports whether it was admitted.
func AdmitRecipientCap(ctx context.Context, db DB, recipient, channel, id string, limit int, per time.Duration, now time.Time) (bool, error) {
	var ok bool
	if err := db.QueryRow(ctx, admitRecipientCapSQL, recipient, channel, limit, per.Seconds(), id, now).Scan(&ok); err != nil {
		return false, fmt.Errorf("admit %s to %s against the channel's per-recipient cap: %w", channel, recipient, err)
	}
	return ok, nil
}
