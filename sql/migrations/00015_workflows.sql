-- Workflows: delayed deliveries with an `unless` condition, per-recipient
-- throttles and quiet hours.
--
-- A delayed (or quiet-hours held) delivery is written `scheduled` with
-- next_attempt_at; a send job scheduled for that instant claims it, and the
-- claim reads the recipient's inbox item of the same notification when the
-- row has an `unless` ('read' or 'seen'): an item already read (seen) settles
-- the row `skipped` in the claim's own statement. The retry sweep re-drives a
-- scheduled row whose job was lost, through the partial index below.
--
-- notify_throttle holds, per (recipient, notifier, channel) with a throttle,
-- the instants of the deliveries admitted in the last `per` (at most `lim`
-- of them). The fan-out's chunk statement upserts the row of every
-- throttled candidate: INSERT ... ON CONFLICT DO UPDATE works on the latest
-- committed version under the row's lock, so concurrent fan-outs queue on it
-- and cannot admit more than `lim` in any window of `per`. last_delivery
-- names the delivery the latest upsert admitted; a candidate that is not
-- named there was refused, and its row is written `throttled`.

-- +goose Up
ALTER TABLE notify_deliveries ADD COLUMN unless text;
-- The claim looks for `unless` rows among the ones it claims through this
-- index: it holds only those rows, so a claim of deliveries without a
-- condition (nearly all of them) reads next to nothing more.
CREATE INDEX notify_deliveries_unless_idx ON notify_deliveries (id) WHERE unless IS NOT NULL;
CREATE INDEX notify_deliveries_scheduled_idx ON notify_deliveries (next_attempt_at) WHERE status = 'scheduled';

CREATE TABLE notify_throttle (
    recipient     text COLLATE "C" NOT NULL,
    notifier      text NOT NULL,
    channel       text NOT NULL,
    lim           integer NOT NULL,
    per           interval NOT NULL,
    admitted      timestamptz[] NOT NULL DEFAULT '{}',
    last_delivery uuid,
    updated_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (recipient, notifier, channel)
);

-- Batches: per (recipient, notifier, rendered key) the first notification
-- opens a batch and later ones within its window join it. At most one batch
-- of a key is open at a time (the partial unique index): concurrent fan-outs,
-- on any replica, upsert the same row with INSERT ... ON CONFLICT DO UPDATE,
-- which queues them on its lock, so none opens a second batch and none is
-- lost. A batch is `open` until its window ends or it holds `max` members
-- (then `full`), and `closed` once its message is claimed for sending: the
-- claim closes it in its own statement, so a notification that arrives
-- later opens the next batch instead of joining one already sent.
--
-- The first notification's deliveries on the channels that send carry the
-- batch (batch_id), `scheduled` until the window closes; every later
-- member's delivery on that channel is `batched`, naming it (batched_into).
CREATE TABLE notify_batches (
    id            uuid PRIMARY KEY,
    recipient     text COLLATE "C" NOT NULL,
    notifier      text NOT NULL,
    batch_key     text NOT NULL,
    state         text NOT NULL DEFAULT 'open',  -- open | full | closed
    opened_at     timestamptz NOT NULL DEFAULT now(),
    closes_at     timestamptz NOT NULL,
    max_members   integer NOT NULL,
    count         integer NOT NULL DEFAULT 1,
    members       uuid[] NOT NULL,                -- notification ids, in arrival order
    actors        text[] NOT NULL DEFAULT '{}',   -- distinct, in arrival order
    items         jsonb NOT NULL DEFAULT '[]',    -- each member's params, oldest first
    inbox_id      uuid,                           -- the in-app item, created with the first
    updated_at    timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX notify_batches_open ON notify_batches (recipient, notifier, batch_key) WHERE state = 'open';
CREATE INDEX notify_batches_closes_idx ON notify_batches (closes_at);
ALTER TABLE notify_deliveries ADD COLUMN batch_id uuid, ADD COLUMN batched_into uuid;
CREATE INDEX notify_deliveries_batch_idx ON notify_deliveries (batch_id) WHERE batch_id IS NOT NULL;

-- A recipient's quiet hours: {"start":"22:00","end":"07:00"} in their
-- timezone (validated by the API); null for none.
ALTER TABLE notify_recipients ADD COLUMN quiet_hours jsonb;

-- notify_cancel as in 00008, with the workflow statuses protected: a
-- delivery already batched, throttled or suppressed is settled and stays as
-- it is; a scheduled one is withdrawn (cancelled) like a pending one.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION notify_cancel(notifier text, key text) RETURNS integer
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
DECLARE
    v_id uuid;
    v_deliveries integer;
    v_items uuid[];
    v_recipients text[];
BEGIN
    UPDATE notify_notifications n
    SET status = 'cancelled', updated_at = now()
    WHERE n.notifier = notify_cancel.notifier AND n.key = notify_cancel.key
      AND n.status NOT IN ('cancelled', 'rejected')
    RETURNING n.id INTO v_id;
    IF v_id IS NULL THEN
        IF EXISTS (SELECT 1 FROM notify_notifications n
                   WHERE n.notifier = notify_cancel.notifier AND n.key = notify_cancel.key) THEN
            RETURN 0;
        END IF;
        RETURN NULL;
    END IF;

    WITH d AS (
        UPDATE notify_deliveries d
        SET status = CASE WHEN d.status = 'digest_pending' THEN 'digest_dropped' ELSE 'cancelled' END,
            last_error = 'notification cancelled', settled_at = now(), updated_at = now(),
            next_attempt_at = NULL
        WHERE d.notification_id = v_id
          AND (d.status = 'digest_pending' OR d.status <> ALL (ARRAY[
              'sending', 'digest_sending', 'sent', 'refused', 'expired', 'unavailable', 'skipped', 'cancelled',
              'digest_pending', 'digest_sent', 'digest_failed', 'digest_dropped',
              'batched', 'throttled', 'suppressed']))
        RETURNING d.id
    ), i AS (
        DELETE FROM notify_inbox i
        WHERE i.notifier = notify_cancel.notifier AND i.key = notify_cancel.key
        RETURNING i.id, i.recipient
    )
    SELECT (SELECT count(*) FROM d),
           coalesce((SELECT array_agg(i.id ORDER BY i.recipient, i.id) FROM i), '{}'),
           coalesce((SELECT array_agg(i.recipient ORDER BY i.recipient, i.id) FROM i), '{}')
    INTO v_deliveries, v_items, v_recipients;
    IF cardinality(v_items) > 0 THEN
        INSERT INTO notify_inbox_changes (recipient, kind, item_ids)
        SELECT u.recipient, 'deleted', array_agg(u.id ORDER BY u.id)
        FROM unnest(v_items, v_recipients) AS u(id, recipient)
        GROUP BY u.recipient
        ORDER BY u.recipient;
    END IF;
    RETURN v_deliveries + cardinality(v_items);
END
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION notify_cancel(notifier text, key text) RETURNS integer
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
DECLARE
    v_id uuid;
    v_deliveries integer;
    v_items uuid[];
    v_recipients text[];
BEGIN
    UPDATE notify_notifications n
    SET status = 'cancelled', updated_at = now()
    WHERE n.notifier = notify_cancel.notifier AND n.key = notify_cancel.key
      AND n.status NOT IN ('cancelled', 'rejected')
    RETURNING n.id INTO v_id;
    IF v_id IS NULL THEN
        IF EXISTS (SELECT 1 FROM notify_notifications n
                   WHERE n.notifier = notify_cancel.notifier AND n.key = notify_cancel.key) THEN
            RETURN 0;
        END IF;
        RETURN NULL;
    END IF;

    WITH d AS (
        UPDATE notify_deliveries d
        SET status = CASE WHEN d.status = 'digest_pending' THEN 'digest_dropped' ELSE 'cancelled' END,
            last_error = 'notification cancelled', settled_at = now(), updated_at = now()
        WHERE d.notification_id = v_id
          AND (d.status = 'digest_pending' OR d.status <> ALL (ARRAY[
              'sending', 'digest_sending', 'sent', 'refused', 'expired', 'unavailable', 'skipped', 'cancelled',
              'digest_pending', 'digest_sent', 'digest_failed', 'digest_dropped']))
        RETURNING d.id
    ), i AS (
        DELETE FROM notify_inbox i
        WHERE i.notifier = notify_cancel.notifier AND i.key = notify_cancel.key
        RETURNING i.id, i.recipient
    )
    SELECT (SELECT count(*) FROM d),
           coalesce((SELECT array_agg(i.id ORDER BY i.recipient, i.id) FROM i), '{}'),
           coalesce((SELECT array_agg(i.recipient ORDER BY i.recipient, i.id) FROM i), '{}')
    INTO v_deliveries, v_items, v_recipients;
    IF cardinality(v_items) > 0 THEN
        INSERT INTO notify_inbox_changes (recipient, kind, item_ids)
        SELECT u.recipient, 'deleted', array_agg(u.id ORDER BY u.id)
        FROM unnest(v_items, v_recipients) AS u(id, recipient)
        GROUP BY u.recipient
        ORDER BY u.recipient;
    END IF;
    RETURN v_deliveries + cardinality(v_items);
END
$$;
-- +goose StatementEnd
ALTER TABLE notify_recipients DROP COLUMN quiet_hours;
DROP INDEX notify_deliveries_batch_idx;
ALTER TABLE notify_deliveries DROP COLUMN batched_into, DROP COLUMN batch_id;
DROP TABLE notify_batches;
DROP TABLE notify_throttle;
DROP INDEX notify_deliveries_scheduled_idx;
DROP INDEX notify_deliveries_unless_idx;
ALTER TABLE notify_deliveries DROP COLUMN unless;
