package stores

// WriteChunkSQLs exposes the two chunk statements to the external tests.
func WriteChunkSQLs() (fresh, guarded string) { return writeChunkFreshSQL, writeChunkSQL }

// SettleSQLs exposes the two grouped settle statements to the plan test.
func SettleSQLs() (deliveries, digests string) { return settleSQL, settleDigestsSQL }
