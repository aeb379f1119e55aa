package stores

// WriteChunkSQLs exposes the two chunk statements to the external tests.
func WriteChunkSQLs() (fresh, guarded string) { return writeChunkFreshSQL, writeChunkSQL }
