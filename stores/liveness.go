package stores

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// LivenessLockClass is the first key of the River clients' liveness locks
// ("noti"); the second is hashtext(client_id). See
// sql/migrations/00020_river_clients.sql.
const LivenessLockClass int32 = 0x6e6f7469

// ErrLivenessHeld is returned by HoldLiveness when another session holds the
// client's lock: another live process runs with the same River client ID
// (River's default IDs are unique; a configured one may not be), or, rarely,
// a client whose ID hashes to the same key.
var ErrLivenessHeld = errors.New("another session holds this River client's liveness lock")

// HoldLiveness takes clientID's liveness lock on conn, a session of its own
// that lives as long as the client runs, and registers the client; the
// registration is written only once the lock is held. It does not wait for
// a lock another session holds (ErrLivenessHeld).
func HoldLiveness(ctx context.Context, conn *pgx.Conn, clientID string) error {
	var got bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1, hashtext($2))`, LivenessLockClass, clientID).Scan(&got); err != nil {
		return fmt.Errorf("hold the liveness lock of %s: %w", clientID, err)
	}
	if !got {
		return fmt.Errorf("hold the liveness lock of %s: %w", clientID, ErrLivenessHeld)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO notify_river_clients (client_id) VALUES ($1) ON CONFLICT (client_id) DO NOTHING`, clientID); err != nil {
		return fmt.Errorf("register River client %s: %w", clientID, err)
	}
	return nil
}

// ReleaseLiveness unregisters clientID (a client that stopped cleanly has
// no running jobs left) and releases its lock on conn.
func ReleaseLiveness(ctx context.Context, conn *pgx.Conn, clientID string) error {
	b := &pgx.Batch{}
	b.Queue(`DELETE FROM notify_river_clients WHERE client_id = $1`, clientID)
	b.Queue(`SELECT pg_advisory_unlock($1, hashtext($2))`, LivenessLockClass, clientID)
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("release the liveness lock of %s: %w", clientID, err)
	}
	return nil
}

// rescueDeadClientsSQL finds the registered clients whose liveness lock is
// free (their process is gone: this transaction can take the lock, and holds
// it to its end), makes the jobs River has running on them available now,
// recording the rescue as River's rescuer does (an error and
// river:rescue_count), and wakes those jobs' queues. Of those clients, the
// ones in $2 (the caller has seen them gone for a while, see
// RescueDeadClients) also lose their delivery claims: each delivery they had
// `sending` is made `failed` and due at $3, each digest they had
// `digest_sending` `digest_pending` (whole: a digest's rows share the claim),
// with a last_error saying why, and they are forgotten. A client not in $2 stays registered, so that its claims
// can be freed once it has been gone long enough.
//
// The EXISTS conditions are one-time filters: while every client is alive
// (the statement runs every second on every replica) neither UPDATE reads a
// row.
const rescueDeadClientsSQL = `
WITH dead AS MATERIALIZED (
    SELECT c.client_id FROM notify_river_clients c
    WHERE pg_try_advisory_xact_lock($1, hashtext(c.client_id))
), forget AS MATERIALIZED (
    SELECT client_id FROM dead WHERE client_id = ANY($2::text[])
), rescued AS (
    UPDATE river_job j
    SET state = 'available', scheduled_at = now(),
        errors = array_append(j.errors, jsonb_build_object('at', now(), 'attempt', j.attempt,
            'error', 'rescued by notifyd: the process running it (River client ' ||
                     j.attempted_by[cardinality(j.attempted_by)] || ') is gone', 'trace', '')),
        metadata = j.metadata || jsonb_build_object('river:rescue_count',
            coalesce(CASE WHEN jsonb_typeof(j.metadata -> 'river:rescue_count') = 'number'
                          THEN (j.metadata ->> 'river:rescue_count')::int END, 0) + 1)
    WHERE EXISTS (SELECT 1 FROM dead)
      AND j.state = 'running' AND j.attempted_by[cardinality(j.attempted_by)] IN (SELECT client_id FROM dead)
    RETURNING j.id, j.queue
), freed AS (
    UPDATE notify_deliveries d
    SET status = 'failed',
        last_error = 'claim released: the process holding it (River client ' || d.claimed_by || ') is gone; re-driven',
        claimed_at = NULL, claimed_by = NULL, next_attempt_at = $3, updated_at = $3
    WHERE EXISTS (SELECT 1 FROM forget)
      AND d.status = 'sending' AND d.claimed_by IN (SELECT client_id FROM forget)
    RETURNING d.id::text
), freed_digests AS (
    UPDATE notify_deliveries d
    SET status = 'digest_pending',
        last_error = 'claim released: the process holding it (River client ' || d.claimed_by || ') is gone; re-driven',
        claimed_at = NULL, claimed_by = NULL, next_attempt_at = $3, updated_at = $3
    WHERE EXISTS (SELECT 1 FROM forget)
      AND d.status = 'digest_sending' AND d.claimed_by IN (SELECT client_id FROM forget)
    RETURNING d.recipient, d.digest_id, coalesce(d.digest_due_at, d.created_at) AS due_at
), forgot AS (
    DELETE FROM notify_river_clients c WHERE c.client_id IN (SELECT client_id FROM forget)
)
SELECT (SELECT count(*) FROM rescued),
       (SELECT count(pg_notify(current_schema() || '.river_insert', json_build_object('queue', q.queue)::text))
        FROM (SELECT DISTINCT queue FROM rescued) q),
       coalesce((SELECT array_agg(client_id ORDER BY client_id) FROM dead), '{}'),
       coalesce((SELECT array_agg(id ORDER BY id) FROM freed), '{}'),
       coalesce((SELECT array_agg(recipient ORDER BY recipient, digest_id) FROM (SELECT DISTINCT recipient, digest_id, due_at FROM freed_digests) x), '{}'),
       coalesce((SELECT array_agg(digest_id::text ORDER BY recipient, digest_id) FROM (SELECT DISTINCT recipient, digest_id, due_at FROM freed_digests) x), '{}'),
       coalesce((SELECT array_agg(due_at ORDER BY recipient, digest_id) FROM (SELECT DISTINCT recipient, digest_id, due_at FROM freed_digests) x), '{}')`

// Rescue is what one RescueDeadClients did.
type Rescue struct {
	// Jobs is how many running River jobs of gone clients were made available.
	Jobs int
	// Gone are the registered clients whose liveness lock was free.
	Gone []string
	// Freed are the deliveries whose claims were taken back from the gone
	// clients asked to be forgotten; the caller enqueues their sends in the
	// same transaction.
	Freed []string
	// Digests are the digests whose claims were taken back the same way
	// (their rows digest_pending again, due now); the caller enqueues them.
	Digests []RedrivenDigest
}

// RescueDeadClients makes the running jobs of registered River clients whose
// process is gone (their liveness lock is free) available again, and, for
// those of them named in forget, takes back every delivery they had claimed
// (`failed`, due at now; a digest's rows `digest_pending`) and forgets them. The jobs are rescued at once (a
// job tolerates a second run); the claims only once the caller has seen the
// client gone for a few seconds: a live process whose liveness connection
// dropped with a PostgreSQL restart takes its lock back within that time,
// and freeing the claims of a process that may be alive would send its
// claimed batch twice. Run it in a transaction of its own (the liveness locks
// it takes are held to its end).
func RescueDeadClients(ctx context.Context, tx DB, forget []string, now time.Time) (Rescue, error) {
	var r Rescue
	var queues int
	if forget == nil {
		forget = []string{}
	}
	var recipients, digests []string
	var dues []time.Time
	if err := tx.QueryRow(ctx, rescueDeadClientsSQL, LivenessLockClass, forget, now).Scan(&r.Jobs, &queues, &r.Gone, &r.Freed,
		&recipients, &digests, &dues); err != nil {
		return Rescue{}, fmt.Errorf("rescue the jobs of gone River clients: %w", err)
	}
	for i := range digests {
		r.Digests = append(r.Digests, RedrivenDigest{Recipient: recipients[i], DigestID: digests[i], DueAt: dues[i]})
	}
	return r, nil
}

// freeOwnClaimsSQL takes back the claims of one client (its own process
// calls it after losing and retaking its liveness lock): like the claims of
// a gone client, see rescueDeadClientsSQL.
const freeOwnClaimsSQL = `
UPDATE notify_deliveries d
SET status = 'failed',
    last_error = 'claim released: the process holding it (River client ' || d.claimed_by || ') lost its liveness lock; re-driven',
    claimed_at = NULL, claimed_by = NULL, next_attempt_at = $2, updated_at = $2
WHERE d.status = 'sending' AND d.claimed_by = $1
RETURNING d.id::text`

// FreeClaims takes back every delivery clientID has claimed (`failed`, due
// at now) and returns their ids. A process calls it for itself after its
// liveness connection was lost and made again: while the lock was free,
// other replicas may have taken its claims for a dead process's, so its
// sends stopped, and what they left claimed is re-driven now rather than
// after retry.lease.
func FreeClaims(ctx context.Context, db DB, clientID string, now time.Time) ([]string, error) {
	rows, err := db.Query(ctx, freeOwnClaimsSQL, clientID, now)
	if err != nil {
		return nil, fmt.Errorf("free the claims of %s: %w", clientID, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("free the claims of %s: %w", clientID, err)
	}
	return ids, nil
}
