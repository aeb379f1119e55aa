package jobs

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/notifyd/notifyd/stores/uuidv7"
)

// SendArgs is the notify.send job: deliver a batch of ledger rows. A batch is
// what lets sends outrun River's per-job overhead: the job claims its rows in
// one statement, calls the providers outside any transaction, and settles them
// in one statement.
//
// In river_job.args the batch is {"ids": "<base64 of the 16-byte ids, one
// after another>"}: 50 ids as a JSON array of strings are 2 kB, which
// PostgreSQL compresses or moves out of line (TOAST) on insert and reads
// back on every fetch, and River's GIN index on args takes one entry per
// string. Jobs written as {"delivery_ids": [...]} (by an older notifyd, by
// notify_cancel in SQL, or for an id that is not a UUID) decode too. To find
// the jobs of a delivery in SQL:
// position(uuid_send(d.id) IN decode(j.args->>'ids', 'base64')) > 0, or
// j.args->'delivery_ids' ? d.id::text for the list form.
type SendArgs struct {
	DeliveryIDs []string `json:"delivery_ids"`
}

// sendArgsJSON is SendArgs as stored: the packed ids, or the list.
type sendArgsJSON struct {
	IDs         string   `json:"ids,omitempty"`
	DeliveryIDs []string `json:"delivery_ids,omitempty"`
}

// MarshalJSON packs the ids (see SendArgs).
func (a SendArgs) MarshalJSON() ([]byte, error) {
	packed, ok := packIDs(a.DeliveryIDs)
	if !ok {
		return json.Marshal(sendArgsJSON{DeliveryIDs: a.DeliveryIDs})
	}
	return json.Marshal(sendArgsJSON{IDs: packed})
}

// UnmarshalJSON reads either form.
func (a *SendArgs) UnmarshalJSON(b []byte) error {
	var j sendArgsJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	a.DeliveryIDs = j.DeliveryIDs
	if j.IDs == "" {
		return nil
	}
	raw, err := base64.StdEncoding.DecodeString(j.IDs)
	if err != nil || len(raw)%16 != 0 {
		return fmt.Errorf("notify.send args: ids is not base64 of 16-byte ids")
	}
	for i := 0; i < len(raw); i += 16 {
		a.DeliveryIDs = append(a.DeliveryIDs, uuidv7.Format([16]byte(raw[i:i+16])))
	}
	return nil
}

// packIDs is base64 of ids as 16-byte UUIDs, or false when one is not a
// UUID in its canonical form.
func packIDs(ids []string) (string, bool) {
	raw := make([]byte, 0, 16*len(ids))
	for _, id := range ids {
		u, ok := uuidv7.Parse(id)
		if !ok {
			return "", false
		}
		raw = append(raw, u[:]...)
	}
	return base64.StdEncoding.EncodeToString(raw), true
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

// bulkSendPriority is the River priority of the send jobs a chunked fan-out
// (a topic, a large list, an audience) enqueues, on their own queue
// (QueueSendBulk). The queue is what keeps a large notification from holding
// up a small one: the tens of thousands of send jobs of a large notification
// occupy the send_bulk queue's workers, never the send queue's, so the send
// job of a one-recipient notification (queue send, priority 1, River's
// default, as every retry) finds a free worker at once, and at each target's
// gate its lane goes ahead of the bulk lanes (see targets.acquire). The
// priority only orders a bulk job behind anything moved onto its queue.
const bulkSendPriority = 2

// insertBulkSendJobs is insertSendJobs on QueueSendBulk at bulkSendPriority.
func insertBulkSendJobs(ctx context.Context, tx pgx.Tx, ids []string, batch int) error {
	if len(ids) == 0 {
		return nil
	}
	client, err := river.ClientFromContextSafely[pgx.Tx](ctx)
	if err != nil {
		return fmt.Errorf("enqueue sends: %w", err)
	}
	return insertSendJobsAt(ctx, tx, client, ids, batch, &river.InsertOpts{Queue: QueueSendBulk, Priority: bulkSendPriority})
}

// insertSendJobsWith is insertSendJobs through a given (possibly insert-only)
// River client.
func insertSendJobsWith(ctx context.Context, tx pgx.Tx, client *river.Client[pgx.Tx], ids []string, batch int) error {
	return insertSendJobsAt(ctx, tx, client, ids, batch, nil)
}

// insertSendJobsAt inserts the send jobs with opts (nil: SendArgs's own,
// queue send at River's default priority, 1).
func insertSendJobsAt(ctx context.Context, tx pgx.Tx, client *river.Client[pgx.Tx], ids []string, batch int, opts *river.InsertOpts) error {
	if len(ids) == 0 {
		return nil
	}
	if batch <= 0 {
		batch = DefaultSendBatch
	}
	params := make([]river.InsertManyParams, 0, (len(ids)+batch-1)/batch)
	for start := 0; start < len(ids); start += batch {
		end := min(start+batch, len(ids))
		params = append(params, river.InsertManyParams{Args: SendArgs{DeliveryIDs: ids[start:end]}, InsertOpts: opts})
	}
	if err := insertJobs(ctx, tx, client, params); err != nil {
		return fmt.Errorf("enqueue %d sends: %w", len(ids), err)
	}
	return nil
}
