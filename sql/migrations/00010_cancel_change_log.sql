-- notify_cancel writes its change-log rows the way every inbox writer does
-- since 00009: the row's position comes from its transaction id (the
-- column's default), so it takes no advisory lock and sends no NOTIFY (the
-- stream hubs read the log's head; docs/architecture.md, "The inbox change
-- log"). Everything else is as 00008 defined it.

-- +goose Up
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
        PERFORM pg_advisory_xact_lock(7343);
        INSERT INTO notify_inbox_changes (recipient, kind, item_ids)
        SELECT u.recipient, 'deleted', array_agg(u.id ORDER BY u.id)
        FROM unnest(v_items, v_recipients) AS u(id, recipient)
        GROUP BY u.recipient
        ORDER BY u.recipient;
        PERFORM pg_notify('notifyd_inbox', '');
    END IF;
    RETURN v_deliveries + cardinality(v_items);
END
$$;
-- +goose StatementEnd
