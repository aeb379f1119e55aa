-- Fan-out lanes: a large audience is split at normalisation into ranges of
-- recipient ids, each fanned out by its own notify.fanout job with its own
-- cursor, so chunks of one notification are written on several connections
-- at once (docs/architecture.md, "Fan-out"). Every normalised notification
-- has at least lane 0; a small one has only that.
--
-- A lane covers the recipients r with lo <= r < hi (null: unbounded), in byte
-- order. Its progress: every recipient <= cursor has been written, and the
-- inline entries (1-based positions) up to inline_pos are behind the cursor;
-- the lane's inline entries end at inline_end.

-- +goose Up
CREATE TABLE notify_fanout_lanes (
    notification_id uuid NOT NULL,
    lane            integer NOT NULL,
    lo              text COLLATE "C",
    hi              text COLLATE "C",
    cursor          text COLLATE "C",
    inline_pos      integer NOT NULL,
    inline_end      integer NOT NULL,
    done            boolean NOT NULL DEFAULT false,
    PRIMARY KEY (notification_id, lane)
);

-- Fan-outs under way when this migration runs continue as one lane.
INSERT INTO notify_fanout_lanes (notification_id, lane, cursor, inline_pos, inline_end)
SELECT id, 0, fanout_cursor, fanout_inline_pos, cardinality(recipients)
FROM notify_notifications
WHERE normalized AND status = 'pending';

ALTER TABLE notify_notifications DROP COLUMN fanout_cursor, DROP COLUMN fanout_inline_pos;

-- +goose Down
ALTER TABLE notify_notifications ADD COLUMN fanout_cursor text COLLATE "C",
                                 ADD COLUMN fanout_inline_pos integer NOT NULL DEFAULT 0;
UPDATE notify_notifications n SET fanout_cursor = l.cursor, fanout_inline_pos = l.inline_pos
FROM notify_fanout_lanes l WHERE l.notification_id = n.id AND l.lane = 0
  AND NOT EXISTS (SELECT 1 FROM notify_fanout_lanes o WHERE o.notification_id = n.id AND o.lane > 0);
DROP TABLE notify_fanout_lanes;
