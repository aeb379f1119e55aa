package jobs

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
)

// SendArgs is the notify.send job: deliver a batch of ledger rows. A batch is
// what lets sends outrun River's per-job overhead: the job claims its rows in
// one statement, calls the providers outside any transaction, and settles them
// in one statement.
type SendArgs struct {
	DeliveryIDs []string `json:"delivery_ids"`
}

// Kind is the River job kind.
func (SendArgs) Kind() string { return "notify.send" }

// InsertOpts puts sends on the send queue.
func (SendArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: QueueSend, MaxAttempts: 25}
}

// DefaultSendBatch is how many deliveries one notify.send job carries when
// queues.send_batch is not set.
const DefaultSendBatch = 50

// insertSendJobs enqueues send jobs for ids, batch at a time, in tx, with
// River's fast multi-row insert (one round trip), through the River client of
// the running job.
func insertSendJobs(ctx context.Context, tx pgx.Tx, ids []string, batch int) error {
	if len(ids) == 0 {
		return nil
	}
	client, err := river.ClientFromContextSafely[pgx.Tx](ctx)
	if err != nil {
		return fmt.Errorf("enqueue sends: %w", err)
	}
	return insertSendJobsWith(ctx, tx, client, ids, batch)
}

// insertSendJobsWith is insertSendJobs through a given (possibly insert-only)
// River client.
func insertSendJobsWith(ctx context.Context, tx pgx.Tx, client *river.Client[pgx.Tx], ids []string, batch int) error {
	if len(ids) == 0 {
		return nil
	}
	if batch <= 0 {
		batch = DefaultSendBatch
	}
	params := make([]river.InsertManyParams, 0, (len(ids)+batch-1)/batch)
	for start := 0; start < len(ids); start += batch {
		end := min(start+batch, len(ids))
		params = append(params, river.InsertManyParams{Args: SendArgs{DeliveryIDs: ids[start:end]}})
	}
	if err := insertJobs(ctx, tx, client, params); err != nil {
		return fmt.Errorf("enqueue %d sends: %w", len(ids), err)
	}
	return nil
}
