package stores

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// WriteChunkSQLs exposes the two chunk statements to the external tests.
func WriteChunkSQLs() (fresh, guarded string) { return writeChunkFreshSQL, writeChunkSQL }

// SettleSQLs exposes the grouped settle statements to the plan test.
func SettleSQLs() (deliveries, deliveriesRetry, digests string) {
	return settleSQL, settleRetrySQL, settleDigestsSQL
}

// ClaimSQL exposes the send claim to the plan test.
func ClaimSQL() string { return claimSQL }

// InboxByNotificationSQLs are the statements that read a notification's
// inbox items: the console's delivery list and its progress.
func InboxByNotificationSQLs() (list, progress string) { return listDeliveriesSQL, progressSQL }

// ProtectedStatuses exposes the statuses a cancel must leave alone to the
// test of notify_cancel, which lists them in SQL.
var ProtectedStatuses = protectedStatuses

// SettleAttemptsSQLs exposes the settle statements that also record failed
// attempts, for the plan test.
func SettleAttemptsSQLs() (deliveries, deliveriesRetry string) {
	return settleAttemptsSQL, settleRetryAttemptsSQL
}

// MigrateTo moves the database of pool to notifyd's migration version (down
// or up), for the test of a migration's way up and down.
func MigrateTo(ctx context.Context, pool *pgxpool.Pool, version int64) error {
	p, closeDB, err := gooseProvider(pool, nil)
	if err != nil {
		return err
	}
	defer closeDB()
	cur, err := p.GetDBVersion(ctx)
	if err != nil {
		return err
	}
	if cur > version {
		_, err = p.DownTo(ctx, version)
	} else {
		_, err = p.UpTo(ctx, version)
	}
	return err
}

// GenericBatch runs sqls (each without arguments, the last one a query for one
// text value) in a batch of genericBatch on db, as the claim and the settles
// do, and returns what the last one read.
func GenericBatch(ctx context.Context, db DB, sqls ...string) (string, error) {
	b := genericBatch()
	var got string
	for i, s := range sqls {
		q := b.Queue(s)
		if i == len(sqls)-1 {
			q.QueryRow(func(row pgx.Row) error { return row.Scan(&got) })
		}
	}
	err := sendGeneric(ctx, db, b)
	return got, err
}

// CountInboxSQL and CountsPlanSQL expose the capped counts statement and the
// settings it runs with to the test of its plan.
const (
	CountInboxSQL = countInboxSQL
	CountsPlanSQL = countsPlanSQL
)

// LedgerViewSQLs exposes the operator's ledger statements to the plan test.
func LedgerViewSQLs() (list, redrive, hours, counts string) {
	return listDeliveriesAcrossSQL, redriveMatchingSQL, ledgerHoursSQL, notificationCountsSQL
}

// ApplyFunctions and PendingFunctions expose the repeatable function step to
// its test, on a file system the test makes.
var (
	ApplyFunctions   = applyFunctions
	PendingFunctions = pendingFunctions
)
