package stores

import (
	"context"
	"fmt"
	"time"

	"github.com/notifyd/notifyd/stores/uuidv7"
)

// Retention deletes in bounded batches so no statement holds an unbounded
// number of row locks or generates an unbounded amount of WAL at once; the
// caller loops until a batch comes back short.

// The inbox and the ledger are partitioned by month of notification id
// (00018_partition_inbox_ledger.sql) and retention drops whole months first
// (DropLedgerMonths); these deletes trim what is left: the default partition
// and the months not droppable yet (their newest rows are recent). Rows are
// named by the whole primary key, so each is found in its own partition.
const deleteOldInboxSQL = `
DELETE FROM notify_inbox
WHERE (id, notification_id) IN (SELECT id, notification_id FROM notify_inbox WHERE created_at < $1 ORDER BY created_at LIMIT $2)`

// deleteOldDeliveriesSQL removes settled ledger rows. A row that is somehow
// still unsettled is kept: nothing disappears before it reached a terminal
// status (the retry sweep expires it first). Rows are found by primary key:
// delivery ids are UUIDv7, made when the row is, and $4 is the first id of
// the cutoff's millisecond (uuidv7.Floor), so the scan reads old rows only,
// oldest first, with no index on created_at to keep up on every write.
//
// A delivery's failed attempts and provider events go with it: the partitioned ledger has no
// foreign key to cascade the delete.
const deleteOldDeliveriesSQL = `
WITH gone AS (
    DELETE FROM notify_deliveries
    WHERE (id, notification_id) IN (SELECT id, notification_id FROM notify_deliveries
                                    WHERE id < $4::uuid AND created_at < $1 AND status <> ALL($3::text[])
                                    ORDER BY id LIMIT $2)
    RETURNING id, notification_id
), attempts AS (
    DELETE FROM notify_delivery_attempts a
    WHERE a.delivery_id = ANY(ARRAY(SELECT id FROM gone))
      AND (a.delivery_id, a.notification_id) IN (SELECT id, notification_id FROM gone)
), events AS (
    DELETE FROM notify_delivery_events e
    WHERE e.delivery_id = ANY(ARRAY(SELECT id FROM gone))
      AND (e.delivery_id, e.notification_id) IN (SELECT id, notification_id FROM gone)
)
SELECT count(*) FROM gone`

// compactOldNotificationsSQL empties the bulky columns (inline recipients,
// params) of finished notifications older than the deliveries retention that
// have nothing left: no delivery row and no inbox item. The row itself stays:
// (notifier, key) is an identity forever, so a send of the same pair years
// later is still a duplicate. What remains is about a hundred bytes a
// notification.
const compactOldNotificationsSQL = `
UPDATE notify_notifications n
SET recipients = '{}', reasons = '{}', topics = '{}', params = '{}', updated_at = now()
WHERE n.id IN (SELECT id FROM notify_notifications
               WHERE created_at < $1 AND status IN ('fanned_out', 'cancelled', 'rejected')
                 AND (params <> '{}' OR cardinality(recipients) > 0 OR cardinality(topics) > 0)
               ORDER BY created_at LIMIT $2)
  AND NOT EXISTS (SELECT 1 FROM notify_deliveries d WHERE d.notification_id = n.id)
  AND NOT EXISTS (SELECT 1 FROM notify_inbox i WHERE i.notification_id = n.id)`

// unsettledStatuses are the statuses retention never deletes (the partition
// drop, notify_ledger_drop_before, checks the same list through the partial
// indexes that cover them).
var unsettledStatuses = []string{"pending", "sending", "failed", "rate_limited", "digest_pending", "digest_sending",
	"scheduled"}

// deleteOldWorkflowsSQL removes batches whose window closed before the
// deliveries cutoff, and throttle windows last written before it whose
// `per` has passed too (workflows, 00015_workflows.sql).
const deleteOldWorkflowsSQL = `
WITH b AS (
    DELETE FROM notify_batches
    WHERE id IN (SELECT id FROM notify_batches WHERE closes_at < $1 ORDER BY closes_at LIMIT $2)
    RETURNING 1
), t AS (
    DELETE FROM notify_throttle
    WHERE (recipient, notifier, channel) IN (
        SELECT recipient, notifier, channel FROM notify_throttle
        WHERE updated_at < $1 AND updated_at + per < now() LIMIT $2)
    RETURNING 1
)
SELECT (SELECT count(*) FROM b) + (SELECT count(*) FROM t)`

// RetentionCutoffs says what is old enough to delete.
type RetentionCutoffs struct {
	Inbox      time.Time
	Deliveries time.Time
	Changes    time.Time
}

// RetentionResult counts what one batch round deleted (inbox items, delivery
// rows, change-log rows) and compacted (notifications), and what a retention
// pass dropped whole.
type RetentionResult struct {
	Inbox, Deliveries, Changes, Notifications int64
	// ChangeDays counts the change log's day partitions dropped whole.
	ChangeDays int64
	// InboxMonths and DeliveryMonths count the inbox's and the ledger's
	// partitions (months, or the legacy partition) dropped whole.
	InboxMonths, DeliveryMonths int64
}

// DeleteExpired deletes at most batch rows of each kind older than the cutoffs.
func DeleteExpired(ctx context.Context, db DB, c RetentionCutoffs, batch int) (RetentionResult, error) {
	var r RetentionResult
	tag, err := db.Exec(ctx, deleteOldInboxSQL, c.Inbox, batch)
	if err != nil {
		return r, fmt.Errorf("retention: inbox: %w", err)
	}
	r.Inbox = tag.RowsAffected()
	if err = db.QueryRow(ctx, deleteOldDeliveriesSQL, c.Deliveries, batch, unsettledStatuses, uuidv7.Floor(c.Deliveries)).
		Scan(&r.Deliveries); err != nil {
		return r, fmt.Errorf("retention: deliveries: %w", err)
	}
	if r.Changes, err = DeleteChangesBefore(ctx, db, c.Changes, batch); err != nil {
		return r, fmt.Errorf("retention: %w", err)
	}
	if tag, err = db.Exec(ctx, compactOldNotificationsSQL, c.Deliveries, batch); err != nil {
		return r, fmt.Errorf("retention: notifications: %w", err)
	}
	r.Notifications = tag.RowsAffected()
	// Batches and throttle windows are ledger state: counted as deliveries.
	var workflows int64
	if err := db.QueryRow(ctx, deleteOldWorkflowsSQL, c.Deliveries, batch).Scan(&workflows); err != nil {
		return r, fmt.Errorf("retention: workflows: %w", err)
	}
	r.Deliveries += workflows
	return r, nil
}
