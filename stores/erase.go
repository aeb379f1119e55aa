package stores

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// ErasedPrefix starts every pseudonym EraseRecipient writes in place of a
// recipient id.
const ErasedPrefix = "erased:"

// ErasedID is the pseudonym that replaces recipient id in the rows an erasure
// keeps: "erased:" and the hex SHA-256 of the id. It is stable (every row of
// one recipient gets the same pseudonym, so an audit can still group them) and
// not reversible from the rows alone; it is a pseudonym, not anonymisation:
// whoever already knows an id can compute its pseudonym and find its rows.
func ErasedID(id string) string {
	sum := sha256.Sum256([]byte(id))
	return ErasedPrefix + hex.EncodeToString(sum[:])
}

// recordErasureSQL records that the recipient of pseudonym $1 was erased now.
const recordErasureSQL = `
INSERT INTO notify_erased_recipients (pseudonym, erased_at) VALUES ($1, now())
ON CONFLICT (pseudonym) DO UPDATE SET erased_at = now()`

// Erasure counts what EraseRecipient removed or changed.
type Erasure struct {
	// Profile reports whether a notify_recipients row was deleted.
	Profile bool
	// Inbox and Changes count the deleted inbox items and change-log
	// entries (rows of their own, and rows shared with other recipients
	// that named them).
	Inbox   int
	Changes int
	// Preferences (tenant-scoped rules included), Subscriptions and Mutes
	// count the deleted settings rows,
	// Devices the deleted mobile devices.
	Preferences   int
	Subscriptions int
	Mutes         int
	Devices       int
	// Deliveries counts the recipient's ledger rows, all now pseudonymised;
	// Cancelled is how many of them were still unsent and are now cancelled
	// (digest_dropped for digest rows).
	Deliveries int
	Cancelled  int
	// Notifications counts notifications whose inline recipients or actor
	// named the recipient.
	Notifications int
}

// empty reports whether nothing of the recipient existed.
func (e *Erasure) empty() bool {
	return !e.Profile && e.Inbox == 0 && e.Changes == 0 && e.Preferences == 0 && e.Subscriptions == 0 &&
		e.Mutes == 0 && e.Devices == 0 && e.Deliveries == 0 && e.Notifications == 0
}

// lockErasedNotificationsSQL locks, before anything else is touched, every
// notification the erasure will change or whose fan-out could still reach the
// recipient: unfinished ones that address them inline or through a topic they
// subscribe to, and any that names them inline or as actor. The fan-out locks
// its notification row at the start of every chunk, so once these locks are
// held no chunk is in flight for them, and every later chunk sees the erasure
// committed (subscriptions gone, inline entry removed). Locking notifications
// first is also the order the fan-out and cancel take (notification, then its
// inbox and delivery rows).
//
// It reads notify_notifications sequentially (no index holds inline
// recipients or actors): erasure is rare and an operator may run it at a
// quiet time.
const lockErasedNotificationsSQL = `
SELECT n.id
FROM notify_notifications n
WHERE n.recipients @> ARRAY[$1]::text[]
   OR n.actor = $1
   OR (n.status IN ('scheduled', 'pending')
       AND n.topics && ARRAY(SELECT s.topic FROM notify_subscriptions s WHERE s.recipient = $1))
ORDER BY n.id
FOR UPDATE OF n`

// eraseRecipientSQL removes or pseudonymises everything of recipient $1 in one
// statement; $2 is ErasedID($1), $3 the statuses an unsent delivery does not
// have (protectedStatuses, as cancel uses them).
//
//   - Notifications not yet fanned out (scheduled, pending — including one
//     half-way through its fan-out) lose the recipient from their inline
//     lists, so nothing is sent to them afterwards; each fan-out lane's inline
//     positions move back by the entries removed before them (the statement
//     reads the lists as they were before it). Finished
//     notifications get the pseudonym in their inline list. An actor becomes
//     the pseudonym everywhere.
//   - Profile, inbox items, change-log rows, preferences, subscriptions,
//     push subscriptions, devices and mutes are deleted; a change-log row
//     shared with other recipients (a fan-out chunk's) loses the
//     recipient's entry.
//   - Delivery rows are kept for the audit trail with the pseudonym as
//     recipient and last_error cleared (it may quote an address). Unsent rows
//     become cancelled (digest_pending: digest_dropped) with last_error
//     "recipient erased". A row claimed by a send in flight (sending) is left
//     to settle. A row whose pseudonymised identity already exists (the
//     recipient was erased before and reached again by the same
//     notification) is deleted instead: the identity index allows one.
const eraseRecipientSQL = `
WITH nt AS (
    UPDATE notify_notifications n
    SET recipients = CASE WHEN n.status IN ('scheduled', 'pending')
            THEN ARRAY(SELECT r.rid FROM unnest(n.recipients) WITH ORDINALITY AS r(rid, ord)
                       WHERE r.rid <> $1 ORDER BY r.ord)
            ELSE array_replace(n.recipients, $1, $2) END,
        reasons = CASE WHEN n.status IN ('scheduled', 'pending')
            THEN ARRAY(SELECT r.reason FROM unnest(n.recipients, n.reasons) WITH ORDINALITY AS r(rid, reason, ord)
                       WHERE r.rid <> $1 ORDER BY r.ord)
            ELSE n.reasons END,
        actor = CASE WHEN n.actor = $1 THEN $2 ELSE n.actor END,
        updated_at = now()
    WHERE n.recipients @> ARRAY[$1]::text[] OR n.actor = $1
    RETURNING 1
), lanes AS (
    UPDATE notify_fanout_lanes l
    SET inline_pos = l.inline_pos - (SELECT count(*) FROM unnest(n.recipients) WITH ORDINALITY AS r(rid, ord)
                                     WHERE r.rid = $1 AND r.ord <= l.inline_pos)::int,
        inline_end = l.inline_end - (SELECT count(*) FROM unnest(n.recipients) WITH ORDINALITY AS r(rid, ord)
                                     WHERE r.rid = $1 AND r.ord <= l.inline_end)::int
    FROM notify_notifications n
    WHERE l.notification_id = n.id AND n.status IN ('scheduled', 'pending') AND n.recipients @> ARRAY[$1]::text[]
    RETURNING 1
), subs AS (
    DELETE FROM notify_subscriptions WHERE recipient = $1 RETURNING 1
), audience AS (
    -- A fan-out under way does not reach an erased recipient its audience
    -- query returned. The staging holds only fan-outs under way: no index.
    DELETE FROM notify_audience_members WHERE recipient = $1 RETURNING 1
), push AS (
    -- Executed though not read: a data-modifying WITH always runs.
    DELETE FROM notify_push_subscriptions WHERE recipient = $1 RETURNING 1
), devices AS (
    DELETE FROM notify_devices WHERE recipient = $1 RETURNING 1
), prefs AS (
    DELETE FROM notify_preferences WHERE recipient = $1 RETURNING 1
), tenant_prefs AS (
    -- The recipient's rules scoped to tenants (00025_tenants.sql).
    DELETE FROM notify_tenant_preferences WHERE recipient = $1 RETURNING 1
), mutes AS (
    DELETE FROM notify_mutes WHERE recipient = $1 RETURNING 1
), inbox AS (
    DELETE FROM notify_inbox WHERE recipient = $1 RETURNING 1
), changes AS (
    DELETE FROM notify_inbox_changes WHERE recipient = $1 RETURNING 1
), shared_changes AS (
    UPDATE notify_inbox_changes c
    SET recipients = ARRAY(SELECT u.rid FROM unnest(c.recipients, c.item_ids) WITH ORDINALITY AS u(rid, item, ord)
                           WHERE u.rid <> $1 ORDER BY u.ord),
        item_ids = ARRAY(SELECT u.item FROM unnest(c.recipients, c.item_ids) WITH ORDINALITY AS u(rid, item, ord)
                         WHERE u.rid <> $1 ORDER BY u.ord)
    WHERE c.recipient IS NULL AND c.recipients @> ARRAY[$1]::text[]
    RETURNING 1
), profile AS (
    DELETE FROM notify_recipients WHERE id = $1 RETURNING 1
), workflows AS ( -- batches and throttle windows (00015_workflows.sql)
    DELETE FROM notify_batches WHERE recipient = $1 RETURNING 1
), throttles AS (
    DELETE FROM notify_throttle WHERE recipient = $1 RETURNING 1
), twins AS (
    DELETE FROM notify_deliveries d
    WHERE d.recipient = $1
      AND EXISTS (SELECT 1 FROM notify_deliveries x
                  WHERE x.notification_id = d.notification_id AND x.channel = d.channel
                    AND coalesce(x.recipient, '') = $2)
    RETURNING d.id, d.notification_id, d.status = 'digest_pending' OR d.status <> ALL($3::text[]) AS unsent
), twin_attempts AS (
    -- The ledger is partitioned: attempts have no foreign key to cascade
    -- from their delivery (00018_partition_inbox_ledger.sql).
    DELETE FROM notify_delivery_attempts a
    WHERE a.delivery_id = ANY(ARRAY(SELECT id FROM twins))
      AND (a.delivery_id, a.notification_id) IN (SELECT id, notification_id FROM twins)
), twin_events AS (
    DELETE FROM notify_delivery_events e
    WHERE e.delivery_id = ANY(ARRAY(SELECT id FROM twins))
      AND (e.delivery_id, e.notification_id) IN (SELECT id, notification_id FROM twins)
), dl AS (
    UPDATE notify_deliveries d
    SET recipient = $2,
        status = CASE WHEN d.status = 'digest_pending' THEN 'digest_dropped'
                      WHEN d.status <> ALL($3::text[]) THEN 'cancelled'
                      ELSE d.status END,
        last_error = CASE WHEN d.status = 'digest_pending' OR d.status <> ALL($3::text[]) THEN 'recipient erased' END,
        settled_at = CASE WHEN d.status = 'digest_pending' OR d.status <> ALL($3::text[]) THEN now()
                          ELSE d.settled_at END,
        next_attempt_at = CASE WHEN d.status = 'digest_pending' OR d.status <> ALL($3::text[]) THEN NULL
                               ELSE d.next_attempt_at END,
        updated_at = now()
    WHERE d.recipient = $1
      AND NOT EXISTS (SELECT 1 FROM notify_deliveries x
                      WHERE x.notification_id = d.notification_id AND x.channel = d.channel
                        AND coalesce(x.recipient, '') = $2)
    -- RETURNING sees the new row: the rows just cancelled carry this error.
    RETURNING coalesce(d.last_error = 'recipient erased', false) AS unsent
)
SELECT (SELECT count(*) FROM profile) > 0,
       (SELECT count(*) FROM inbox), (SELECT count(*) FROM changes) + (SELECT count(*) FROM shared_changes),
       (SELECT count(*) FROM prefs) + (SELECT count(*) FROM tenant_prefs), (SELECT count(*) FROM subs),
       (SELECT count(*) FROM mutes),
       (SELECT count(*) FROM dl) + (SELECT count(*) FROM twins),
       (SELECT count(*) FROM dl WHERE unsent) + (SELECT count(*) FROM twins WHERE unsent),
       (SELECT count(*) FROM nt), (SELECT count(*) FROM devices)`

// EraseRecipient erases recipient id (the right to erasure): see
// eraseRecipientSQL for exactly what is deleted, pseudonymised and cancelled.
// It returns ErrNotFound when nothing of id existed; the caller rolls back
// (nothing was changed anyway).
//
// Call it in a transaction of its own and commit right after: it takes the
// recipient lock (RecipientLockClass) first, so a settings write in flight
// finishes before, then locks the notifications concerned (see
// lockErasedNotificationsSQL). It writes no change-log row (the recipient's
// log is deleted with the rest): an open stream of the recipient simply
// receives nothing more about the erased items.
//
// What the erasure cannot reach: the application sending to id again after it
// commits (a new inbox and ledger start), a send already claimed (sending)
// when it ran (it completes and settles on the pseudonymised row), and what
// other recipients' inbox items and params say about id (their denormalised
// content, removed by retention).
//
// It records the erasure under the pseudonym (notify_erased_recipients), so
// that an unsubscribe link minted before it does not write the recipient's
// settings back (PutPreferenceRules).
func EraseRecipient(ctx context.Context, tx DB, id string) (*Erasure, error) {
	b := &pgx.Batch{}
	b.Queue(lockRecipientSQL, RecipientLockClass, id)
	b.Queue(lockErasedNotificationsSQL, id)
	var e Erasure
	b.Queue(eraseRecipientSQL, id, ErasedID(id), protectedStatuses).QueryRow(func(row pgx.Row) error {
		return row.Scan(&e.Profile, &e.Inbox, &e.Changes, &e.Preferences, &e.Subscriptions, &e.Mutes,
			&e.Deliveries, &e.Cancelled, &e.Notifications, &e.Devices)
	})
	b.Queue(recordErasureSQL, ErasedID(id))
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return nil, fmt.Errorf("erase recipient %s: %w", id, err)
	}
	if e.empty() {
		return nil, ErrNotFound
	}
	return &e, nil
}
