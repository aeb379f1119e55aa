package stores

import (
	"context"
	"fmt"
	"time"
)

// The inbox change log is partitioned by UTC day
// (sql/migrations/00016_change_log_partitions.sql): retention drops a day's
// partition whole instead of deleting its rows, so its cost does not grow
// with the volume of the log. These wrap the two SQL functions that manage
// the partitions; both take the log's exclusive lock briefly and give up
// after a 5 s lock timeout (the next run retries).

// ChangeLogAhead is how many days after today ExtendChangeLog creates
// partitions for. Rows of a day with no partition go to the default
// partition, which retention trims row by row.
const ChangeLogAhead = 7

// ExtendChangeLog creates the change log's day partitions from yesterday
// through ChangeLogAhead days after today that do not exist yet, and returns
// how many it created.
func ExtendChangeLog(ctx context.Context, db DB) (int, error) {
	var n int
	if err := db.QueryRow(ctx, `SELECT notify_inbox_changes_extend($1)`, ChangeLogAhead).Scan(&n); err != nil {
		return 0, fmt.Errorf("extend the inbox change log's partitions: %w", err)
	}
	return n, nil
}

// DropChangeLogDays drops the change log's day partitions whose day ended at
// or before cutoff (recording the newest seq dropped, so streams with older
// cursors reset) and returns how many it dropped and the start of the oldest
// day partition left (zero when none is left): a row older than that can only
// be in the default partition.
func DropChangeLogDays(ctx context.Context, db DB, cutoff time.Time) (int, time.Time, error) {
	var n int
	var oldest *time.Time
	if err := db.QueryRow(ctx, `SELECT dropped, oldest_kept FROM notify_inbox_changes_drop_before($1)`, cutoff).
		Scan(&n, &oldest); err != nil {
		return 0, time.Time{}, fmt.Errorf("drop old inbox change-log partitions: %w", err)
	}
	if oldest == nil {
		return n, time.Time{}, nil
	}
	return n, *oldest, nil
}

// The inbox (notify_inbox) and the ledger (notify_deliveries,
// notify_delivery_attempts) are partitioned by UTC month of notification id
// (sql/migrations/00018_partition_inbox_ledger.sql): T_pYYYYMM for each month,
// T_legacy for the rows from before the migration, T_default for ids no
// partition covers. Retention drops a month (or the legacy partition) whole
// once its newest row is past the retention; these wrap the two SQL
// functions that manage the partitions (both give up after a 5 s lock
// timeout; the next run retries).

// LedgerAhead is how many months after the current one ExtendLedger creates
// partitions for. Every partition is one more index probe for a lookup by id
// alone, so few are made ahead; every retention run (retention.schedule,
// daily by default) and every daemon start extends them.
const LedgerAhead = 2

// ExtendLedger creates the inbox's and the ledger's month partitions from the
// current UTC month through LedgerAhead months after it that do not exist
// yet, and returns how many it created.
func ExtendLedger(ctx context.Context, db DB) (int, error) {
	var n int
	if err := db.QueryRow(ctx, `SELECT notify_ledger_extend($1)`, LedgerAhead).Scan(&n); err != nil {
		return 0, fmt.Errorf("extend the inbox's and the ledger's partitions: %w", err)
	}
	return n, nil
}

// DropLedgerMonths drops the inbox's partitions whose range has ended and
// whose newest item is older than inboxCutoff, and the ledger's whose range
// has ended, whose newest delivery is older than deliveriesCutoff and that
// hold no unsettled delivery (with their attempts), and returns how many of
// each it dropped.
func DropLedgerMonths(ctx context.Context, db DB, inboxCutoff, deliveriesCutoff time.Time) (inbox, deliveries int, err error) {
	if err := db.QueryRow(ctx, `SELECT inbox_dropped, deliveries_dropped FROM notify_ledger_drop_before($1, $2)`,
		inboxCutoff, deliveriesCutoff).Scan(&inbox, &deliveries); err != nil {
		return 0, 0, fmt.Errorf("drop old inbox and ledger partitions: %w", err)
	}
	return inbox, deliveries, nil
}
