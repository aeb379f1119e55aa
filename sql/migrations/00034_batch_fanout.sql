-- Small notifications are fanned out in batches: a notification of at most
-- 100 inline recipients and no topics is written with batch_fanout set and no
-- River job of its own (sql/functions/notify_enqueue.sql), and every
-- replica's fan-out claimer takes such notifications, many per transaction,
-- through this partial index: FOR UPDATE SKIP LOCKED, oldest due first. A
-- notification leaves the index when it is fanned out, rejected, cancelled or
-- handed to a notify.fanout job. The column's default keeps every row written
-- before (and every row an older notify_enqueue writes) on its River job.

-- +goose Up
ALTER TABLE notify_notifications ADD COLUMN batch_fanout boolean NOT NULL DEFAULT false;
CREATE INDEX notify_notifications_batch_fanout_idx ON notify_notifications ((coalesce(send_at, created_at)), id)
    WHERE batch_fanout AND status IN ('pending', 'scheduled');

-- +goose Down
DROP INDEX notify_notifications_batch_fanout_idx;
ALTER TABLE notify_notifications DROP COLUMN batch_fanout;
