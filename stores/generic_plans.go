package stores

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// genericPlanSQL makes the statements after it in the transaction run on
// their prepared statement's generic plan: an explicit transaction, or the
// implicit one a pipelined batch on a pool runs in until its Sync. It is
// set_config rather than SET LOCAL because SET LOCAL outside an explicit
// transaction block draws a WARNING to the client and the server log on every
// call (it applies all the same). defaultPlanSQL gives the rest of an
// explicit transaction the session's setting back; an implicit one ends with
// the batch, and the setting with it.
const (
	genericPlanSQL = `SELECT set_config('plan_cache_mode', 'force_generic_plan', true)`
	defaultPlanSQL = `SET LOCAL plan_cache_mode TO DEFAULT`
)

// genericBatch starts a batch whose statements run on their generic plans;
// queue them and send it with sendGeneric, which adds the statement that ends
// the setting inside a transaction: one round trip for all of it.
//
// The send path's claim and settle need it. Called with a handful of ids (a
// trickle of single-recipient notifications), a plan made for those ids is
// cheaper to execute — it prunes the partitioned notify_deliveries to one
// partition at plan time — so PostgreSQL's plan cache may pick a custom plan
// for every call, and planning these statements over partitioned tables costs
// far more than running them. pg_stat_statements with track_planning, 2,000
// single-recipient emails at 200/s: the settle 1,568 plans in 1,562 calls,
// 1,884 ms planning against 307 ms executing; in another run the claim 779
// plans, 10,998 ms planning against 1,354 ms executing (whether the cache
// settles on custom plans differs from run to run). The generic plan prunes
// to the same partition when the executor starts, and batches of ten or more
// ids used it already.
func genericBatch() *pgx.Batch {
	b := &pgx.Batch{}
	b.Queue(genericPlanSQL)
	return b
}

// sendGeneric sends a batch started by genericBatch on db. In a transaction
// (db is a pgx.Tx) the batch ends by restoring the session's plan_cache_mode
// for the caller's next statements.
func sendGeneric(ctx context.Context, db DB, b *pgx.Batch) error {
	if _, inTx := db.(pgx.Tx); inTx {
		b.Queue(defaultPlanSQL)
	}
	return db.SendBatch(ctx, b).Close()
}
