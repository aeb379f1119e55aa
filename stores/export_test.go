package stores

// WriteChunkSQLs exposes the two chunk statements to the external tests.
func WriteChunkSQLs() (fresh, guarded string) { return writeChunkFreshSQL, writeChunkSQL }

// SettleSQLs exposes the grouped settle statements to the plan test.
func SettleSQLs() (deliveries, deliveriesRetry, digests string) {
	return settleSQL, settleRetrySQL, settleDigestsSQL
}
