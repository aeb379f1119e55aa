package stores

import (
	"context"
	"errors"
	"fmt"

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
// river:rescue_count), wakes those jobs' queues, and forgets the clients.
const rescueDeadClientsSQL = `
WITH dead AS MATERIALIZED (
    SELECT c.client_id FROM notify_river_clients c
    WHERE pg_try_advisory_xact_lock($1, hashtext(c.client_id))
), rescued AS (
    UPDATE river_job j
    SET state = 'available', scheduled_at = now(),
        errors = array_append(j.errors, jsonb_build_object('at', now(), 'attempt', j.attempt,
            'error', 'rescued by notifyd: the process running it (River client ' ||
                     j.attempted_by[cardinality(j.attempted_by)] || ') is gone', 'trace', '')),
        metadata = j.metadata || jsonb_build_object('river:rescue_count',
            coalesce(CASE WHEN jsonb_typeof(j.metadata -> 'river:rescue_count') = 'number'
                          THEN (j.metadata ->> 'river:rescue_count')::int END, 0) + 1)
    WHERE j.state = 'running' AND j.attempted_by[cardinality(j.attempted_by)] IN (SELECT client_id FROM dead)
    RETURNING j.id, j.queue
), forgot AS (
    DELETE FROM notify_river_clients c WHERE c.client_id IN (SELECT client_id FROM dead)
)
SELECT (SELECT count(*) FROM rescued),
       (SELECT count(pg_notify(current_schema() || '.river_insert', json_build_object('queue', q.queue)::text))
        FROM (SELECT DISTINCT queue FROM rescued) q),
       (SELECT count(*) FROM dead)`

// RescueDeadClients makes the running jobs of registered River clients whose
// process is gone available again, forgets those clients, and returns how
// many jobs and clients that was. Run it in a transaction of its own (the
// liveness locks it takes are held to its end).
func RescueDeadClients(ctx context.Context, tx DB) (jobs, clients int, err error) {
	var queues int
	if err := tx.QueryRow(ctx, rescueDeadClientsSQL, LivenessLockClass).Scan(&jobs, &queues, &clients); err != nil {
		return 0, 0, fmt.Errorf("rescue the jobs of gone River clients: %w", err)
	}
	return jobs, clients, nil
}
