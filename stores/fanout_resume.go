package stores

import (
	"context"
	"fmt"
	"time"
)

// A notification's fan-out ends by its own success: the fan-out marks it
// fanned_out (or rejected, or finds it cancelled). A fan-out job that ends
// any other way — cancelled through River (its API, River UI), discarded, or
// deleted — leaves the notification pending with nobody to finish it. The
// resume statements find such notifications and name the lanes that still
// need a job; a new fan-out job resumes a lane from its cursor (the unique
// keys make a replayed chunk write nothing twice), so a resume that races a
// live job costs a duplicate run, never a duplicate item.
//
// A lane needs a job when it is not done and no job of its own is live
// (available, pending, retryable, running or scheduled). Before the
// normalisation only lane 0 exists; when every lane is done but the
// notification is not finished (a crash between the two), lane 0's job
// finishes it.

// resumeEndedFanoutsSQL finds the notifications whose fan-out job was
// cancelled or discarded since $1, through River's (state, finalized_at)
// index: what the retry sweep runs each time. $2 bounds the lanes returned.
const resumeEndedFanoutsSQL = `
WITH ended AS (
    SELECT DISTINCT (j.args->>'notification_id')::uuid AS id
    FROM river_job j
    WHERE j.state IN ('cancelled', 'discarded') AND j.finalized_at >= $1::timestamptz
      AND j.kind = 'notify.fanout'
), open AS (
    SELECT n.id, n.status, n.send_at, n.normalized
    FROM notify_notifications n
    WHERE n.id IN (SELECT id FROM ended) AND n.status IN ('pending', 'scheduled')
` + lanesWithoutJobSQL

// resumeOrphanedFanoutsSQL finds every pending or scheduled notification
// created before $1 whose lanes have no live job, whatever became of the job
// (deleted ones leave no row behind): a scan of the notifications, so the
// sweep runs it seldom. $2 bounds the lanes returned.
const resumeOrphanedFanoutsSQL = `
WITH open AS (
    SELECT n.id, n.status, n.send_at, n.normalized
    FROM notify_notifications n
    WHERE n.status IN ('pending', 'scheduled') AND n.created_at < $1::timestamptz
` + lanesWithoutJobSQL

// lanesWithoutJobSQL ends both resume statements: from open (the
// notifications each statement looks at: id, send_at, normalized), the lanes
// not done that have no live job of their own, at most $2. The statements
// stay constants: the text a log shows is the whole statement.
const lanesWithoutJobSQL = `), lanes AS (
    SELECT o.id, coalesce(l.lane, 0) AS lane, o.send_at
    FROM open o
    LEFT JOIN notify_fanout_lanes l ON o.normalized AND l.notification_id = o.id AND NOT l.done
)
SELECT x.id::text, x.lane, x.send_at
FROM lanes x
WHERE NOT EXISTS (
    SELECT 1 FROM river_job j
    WHERE j.args @> jsonb_build_object('notification_id', x.id::text)
      AND j.kind = 'notify.fanout'
      AND j.state NOT IN ('cancelled', 'completed', 'discarded')
      AND coalesce((j.args->>'lane')::integer, 0) = x.lane
)
ORDER BY x.id, x.lane
LIMIT $2`

// ResumeLane is one lane of a notification's fan-out that needs a job. A
// non-nil SendAt is the notification's send_at (the job waits for it when it
// is in the future).
type ResumeLane struct {
	NotificationID string
	Lane           int
	SendAt         *time.Time
}

// EndedFanouts returns, at most limit, the lanes to resume of the
// notifications whose fan-out job was cancelled or discarded since since.
func EndedFanouts(ctx context.Context, db DB, since time.Time, limit int) ([]ResumeLane, error) {
	return fanoutLanes(ctx, db, resumeEndedFanoutsSQL, since, limit)
}

// OrphanedFanouts returns, at most limit, the lanes to resume of every
// pending or scheduled notification created before before that has no live
// fan-out job for them. It reads every pending and scheduled notification.
func OrphanedFanouts(ctx context.Context, db DB, before time.Time, limit int) ([]ResumeLane, error) {
	return fanoutLanes(ctx, db, resumeOrphanedFanoutsSQL, before, limit)
}

func fanoutLanes(ctx context.Context, db DB, sql string, at time.Time, limit int) ([]ResumeLane, error) {
	rows, err := db.Query(ctx, sql, at, limit)
	if err != nil {
		return nil, fmt.Errorf("fan-outs to resume: %w", err)
	}
	defer rows.Close()
	var out []ResumeLane
	for rows.Next() {
		var l ResumeLane
		if err := rows.Scan(&l.NotificationID, &l.Lane, &l.SendAt); err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, rows.Err()
}
