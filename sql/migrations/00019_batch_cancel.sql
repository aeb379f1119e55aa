-- A cancelled notification leaves the batches it is a member of, and the
-- batch goes on without it. Before, cancelling the first notification of a
-- batch cancelled its carrying deliveries and deleted the batch's in-app
-- item, so the members that had joined it (their deliveries `batched` into
-- the cancelled one, no in-app item of their own) were never sent and never
-- shown; cancelling a later member left it counted in the batch's message.
--
-- notify_cancel now, for each batch of the notification that is not closed
-- (a closed batch's message has been claimed for sending: what it says is
-- decided), and for each closed batch whose in-app item is the
-- notification's (it was the first member: the item shows the others too),
-- in batch id order and under the batch row's lock (the lock a joining
-- fan-out chunk and the closing claim take too):
--   * takes the notification out of members, its params out of items, and
--     counts and lists the actors again from the remaining members;
--   * when it was the batch's first member and others remain: in an
--     unclosed batch, each of its carrying deliveries hands the batch to the earliest remaining member's
--     delivery batched into it on that channel (which becomes `scheduled` at
--     the same due time, with a send job, and carries the batch; the others
--     batched into the old carrier now name it), and the batch's in-app item
--     is kept and moves to that member (notification_id, key, actor,
--     params) instead of being deleted, in a closed batch too;
--   * when it was a later member: its `batched` deliveries of that
--     recipient are cancelled (it is no longer in the message);
--   * when it was the only member: the batch is closed, and a notification
--     that arrives later opens a new one;
--   * and, for every batch whose in-app item remains, enqueues one
--     notify.batch_render job, which renders the item again from what the
--     batch now holds (templates live in the daemon) without making it
--     unread.
-- The batch's notifier narrows the search: a notification is found in
-- members by scanning that notifier's unclosed batches
-- (notify_batches_unsent_idx), and a closed batch by its item
-- (notify_batches_inbox_idx).

-- +goose Up
CREATE INDEX notify_batches_unsent_idx ON notify_batches (notifier) WHERE state <> 'closed';
CREATE INDEX notify_batches_inbox_idx ON notify_batches (inbox_id) WHERE inbox_id IS NOT NULL;

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
    v_kept uuid[] := '{}';    -- batch items handed to the batch's next member
    v_render uuid[] := '{}';  -- batches whose in-app item is rendered again
    b record;
    c record;
    v_rest uuid[];
    v_heir uuid;
    v_first record;
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

    FOR b IN
        SELECT nb.id, nb.recipient, nb.members, nb.inbox_id, nb.state, array_position(nb.members, v_id) AS pos
        FROM notify_batches nb
        WHERE nb.id IN (SELECT u.id FROM notify_batches u
                        WHERE u.notifier = notify_cancel.notifier AND u.state <> 'closed' AND v_id = ANY(u.members)
                        UNION
                        SELECT u.id FROM notify_batches u
                        WHERE u.inbox_id IN (SELECT i.id FROM notify_inbox i
                                             WHERE i.notifier = notify_cancel.notifier AND i.key = notify_cancel.key))
          AND v_id = ANY(nb.members)
        ORDER BY nb.id
        FOR UPDATE
    LOOP
        v_rest := array_remove(b.members, v_id);
        IF cardinality(v_rest) = 0 THEN
            UPDATE notify_batches SET state = 'closed', count = 0, members = '{}', items = '[]', actors = '{}',
                                      updated_at = now()
            WHERE id = b.id;
            CONTINUE;
        END IF;
        UPDATE notify_batches nb
        SET members = v_rest,
            items = nb.items - (b.pos - 1),
            count = cardinality(v_rest),
            actors = coalesce((
                SELECT array_agg(x.actor ORDER BY x.first)
                FROM (SELECT n.actor, min(m.ord) AS first
                      FROM unnest(v_rest) WITH ORDINALITY AS m(id, ord)
                      JOIN notify_notifications n ON n.id = m.id
                      WHERE coalesce(n.actor, '') <> ''
                      GROUP BY n.actor) x), '{}'),
            updated_at = now()
        WHERE nb.id = b.id;

        IF b.pos = 1 AND b.state = 'closed' THEN
            NULL; -- its message is claimed: only the in-app item moves on (below)
        ELSIF b.pos = 1 THEN
            -- Each carrying delivery hands the batch to the earliest
            -- remaining member's delivery batched into it.
            FOR c IN
                SELECT d.id, d.channel, d.recipient, d.status, d.next_attempt_at
                FROM notify_deliveries d
                WHERE d.notification_id = v_id AND d.batch_id = b.id
                  AND d.status IN ('scheduled', 'pending', 'failed', 'rate_limited')
                ORDER BY d.id
            LOOP
                SELECT d.id INTO v_heir
                FROM notify_deliveries d
                WHERE d.notification_id = ANY(v_rest) AND d.channel = c.channel
                  AND coalesce(d.recipient, '') = coalesce(c.recipient, '')
                  AND d.status = 'batched' AND d.batched_into = c.id
                ORDER BY array_position(v_rest, d.notification_id)
                LIMIT 1;
                IF v_heir IS NULL THEN
                    CONTINUE;
                END IF;
                UPDATE notify_deliveries d
                SET status = c.status, next_attempt_at = c.next_attempt_at, batch_id = b.id, batched_into = NULL,
                    settled_at = NULL, last_error = NULL, updated_at = now()
                WHERE d.id = v_heir;
                UPDATE notify_deliveries d
                SET batched_into = v_heir, updated_at = now()
                WHERE d.notification_id = ANY(v_rest) AND d.channel = c.channel
                  AND coalesce(d.recipient, '') = coalesce(c.recipient, '')
                  AND d.status = 'batched' AND d.batched_into = c.id;
                INSERT INTO river_job (args, kind, max_attempts, priority, queue, state, scheduled_at, tags, metadata)
                VALUES (jsonb_build_object('delivery_ids', jsonb_build_array(v_heir::text)), 'notify.send', 25, 1, 'send',
                        (CASE WHEN c.next_attempt_at > now() THEN 'scheduled' ELSE 'available' END)::river_job_state,
                        coalesce(c.next_attempt_at, now()), '{}'::varchar(255)[], '{}'::jsonb);
                IF c.next_attempt_at IS NULL OR c.next_attempt_at <= now() THEN
                    PERFORM pg_notify(current_schema() || '.river_insert', json_build_object('queue', 'send')::text);
                END IF;
            END LOOP;
        END IF;
        IF b.pos = 1 THEN
            -- The batch's in-app item moves to the batch's new first member.
            IF b.inbox_id IS NOT NULL THEN
                SELECT n.id, n.key, n.actor, n.params INTO v_first FROM notify_notifications n WHERE n.id = v_rest[1];
                UPDATE notify_inbox i
                SET notification_id = v_first.id, key = v_first.key, actor = v_first.actor, params = v_first.params
                WHERE i.id = b.inbox_id AND i.recipient = b.recipient;
                IF FOUND THEN
                    v_kept := v_kept || b.inbox_id;
                END IF;
            END IF;
        ELSE
            UPDATE notify_deliveries d
            SET status = 'cancelled', last_error = 'notification cancelled', settled_at = now(), updated_at = now()
            WHERE d.notification_id = v_id AND d.recipient = b.recipient AND d.status = 'batched';
        END IF;
        IF b.inbox_id IS NOT NULL THEN
            v_render := v_render || b.id;
        END IF;
    END LOOP;
    IF cardinality(v_render) > 0 THEN
        INSERT INTO river_job (args, kind, max_attempts, priority, queue, state, scheduled_at, tags, metadata)
        VALUES (jsonb_build_object('batch_ids', to_jsonb(v_render::text[])), 'notify.batch_render', 25, 1, 'fanout',
                'available', now(), '{}'::varchar(255)[], '{}'::jsonb);
        PERFORM pg_notify(current_schema() || '.river_insert', json_build_object('queue', 'fanout')::text);
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
        WHERE i.notifier = notify_cancel.notifier AND i.key = notify_cancel.key AND i.id <> ALL (v_kept)
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
-- +goose StatementBegin
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION notify_cancel(text, text) SET search_path = %I, pg_temp', current_schema());
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP INDEX notify_batches_inbox_idx;
DROP INDEX notify_batches_unsent_idx;
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
