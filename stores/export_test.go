package stores

// WriteChunkSQLs exposes the two chunk statements to the external tests.
func WriteChunkSQLs() (fresh, guarded string) { return writeChunkFreshSQL, writeChunkSQL }

// SettleSQLs exposes the grouped settle statements to the plan test.
func SettleSQLs() (deliveries, deliveriesRetry, digests string) {
	return settleSQL, settleRetrySQL, settleDigestsSQL
}

// ProtectedStatuses exposes the statuses a cancel must leave alone to the
// test of notify_cancel, which lists them in SQL.
var ProtectedStatuses = protectedStatuses

// SettleAttemptsSQLs exposes the settle statements that also record failed
// attempts, for the plan test.
func SettleAttemptsSQLs() (deliveries, deliveriesRetry string) {
	return settleAttemptsSQL, settleRetryAttemptsSQL
}
