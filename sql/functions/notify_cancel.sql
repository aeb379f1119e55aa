SELECT set_config('search_path', quote_ident(current_schema()) || ', pg_catalog, pg_temp', true);
-- notify_cancel cancels (notifier, key) of tenant and returns the number of
-- deliveries and inbox items withdrawn, 0 when the notification was already
-- cancelled or rejected, and NULL when it was never sent. Keys are per
-- tenant: tenant NULL or '' (and the overload without it) is the
-- notification sent with no tenant, and a cancel never touches another
-- tenant's notification of the same key. What CancelTx does (the Go API
-- calls it).
--
-- The status update is a statement of its own, before the withdrawal: it
-- waits for a fan-out chunk holding the row, and the next statement takes a
-- fresh snapshot that sees that chunk's rows. Every later chunk sees the
-- status and writes nothing. Then the notification leaves its batches (a
-- batch it led is handed to its next member, with the in-app item; a batch
-- whose message went is rendered again without it), deliveries not yet
-- claimed become cancelled (digest rows digest_dropped), and inbox items are
-- deleted, their deletion logged for the realtime stream. A delivery already
-- claimed (sending, digest_sending) or settled is left alone; the lists below
-- are the statuses the Go code calls protected (stores.protectedStatuses).
--
-- It runs as its owner (SECURITY DEFINER), search_path pinned like
-- notify_send's: notifyd_app may call it and touch nothing it touches.
CREATE OR REPLACE FUNCTION notify_cancel(notifier text, key text, tenant text) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
#variable_conflict use_column
DECLARE
    v_tenant text := coalesce(notify_cancel.tenant, '');
    v_id uuid;
    v_deliveries integer;
    v_items uuid[];
    v_recipients text[];
    v_kept uuid[] := '{}';    -- batch items handed to the batch's next member
    -- The notification's batches as they were taken out of (parallel arrays):
    -- id, recipient, in-app item, state before, its position in members,
    -- and the members left.
    v_b uuid[];
    v_b_recipient text[];
    v_b_item uuid[];
    v_b_was text[];
    v_b_pos integer[];
    v_b_left integer[];
    v_n integer;
BEGIN
    PERFORM notify_check_text('notifier', notify_cancel.notifier, 255);
    PERFORM notify_check_text('key', notify_cancel.key, 255);
    IF octet_length(v_tenant) > 255 THEN
        PERFORM notify_input_error('tenant', 'longer than 255 bytes');
    END IF;
    UPDATE notify_notifications n
    SET status = 'cancelled', updated_at = now()
    WHERE coalesce(n.tenant, '') = v_tenant AND n.notifier = notify_cancel.notifier AND n.key = notify_cancel.key
      AND n.status NOT IN ('cancelled', 'rejected')
    RETURNING n.id INTO v_id;
    IF v_id IS NULL THEN
        IF EXISTS (SELECT 1 FROM notify_notifications n
                   WHERE coalesce(n.tenant, '') = v_tenant AND n.notifier = notify_cancel.notifier
                     AND n.key = notify_cancel.key) THEN
            RETURN 0;
        END IF;
        RETURN NULL;
    END IF;

    -- Out of its batches, set-based: one statement per step whatever the
    -- audience, under the batch rows' locks taken in recipient order.
    WITH mine AS (
        SELECT nb.id, nb.state, array_position(nb.members, v_id) AS pos
        FROM notify_batches nb
        WHERE nb.id IN (SELECT u.id FROM notify_batches u
                        WHERE u.notifier = notify_cancel.notifier AND u.state <> 'closed' AND v_id = ANY(u.members)
                        UNION
                        SELECT u.id FROM notify_batches u
                        WHERE u.inbox_id IN (SELECT i.id FROM notify_inbox i
                                             WHERE i.notification_id = v_id)
                        UNION
                        -- A closed batch it was a later member of: found
                        -- through its deliveries batched into the carrier.
                        SELECT c.batch_id FROM notify_deliveries d
                        JOIN notify_deliveries c ON c.id = d.batched_into
                        WHERE d.notification_id = v_id AND d.status = 'batched' AND c.batch_id IS NOT NULL)
          AND v_id = ANY(nb.members)
        ORDER BY nb.recipient, nb.id -- the order a fan-out chunk's join and a closing claim lock them in
        FOR UPDATE
    ), out AS (
        UPDATE notify_batches nb
        SET members = array_remove(nb.members, v_id),
            items = nb.items - (m.pos - 1),
            count = cardinality(nb.members) - 1,
            actors = coalesce((
                SELECT array_agg(x.actor ORDER BY x.first)
                FROM (SELECT n.actor, min(u.ord) AS first
                      FROM unnest(array_remove(nb.members, v_id)) WITH ORDINALITY AS u(id, ord)
                      JOIN notify_notifications n ON n.id = u.id
                      WHERE coalesce(n.actor, '') <> ''
                      GROUP BY n.actor) x), '{}'),
            state = CASE WHEN cardinality(nb.members) = 1 THEN 'closed' ELSE nb.state END,
            updated_at = now()
        FROM mine m
        WHERE nb.id = m.id
        RETURNING nb.id, nb.recipient, nb.inbox_id, m.state AS was, m.pos, cardinality(nb.members) AS members_left
    )
    SELECT coalesce(array_agg(o.id ORDER BY o.id), '{}'), coalesce(array_agg(o.recipient ORDER BY o.id), '{}'),
           coalesce(array_agg(o.inbox_id ORDER BY o.id), '{}'), coalesce(array_agg(o.was ORDER BY o.id), '{}'),
           coalesce(array_agg(o.pos ORDER BY o.id), '{}'), coalesce(array_agg(o.members_left ORDER BY o.id), '{}')
    INTO v_b, v_b_recipient, v_b_item, v_b_was, v_b_pos, v_b_left
    FROM out o;

    IF cardinality(v_b) > 0 THEN
        -- Where it was the first member of a batch still unsent, each of its
        -- carrying deliveries hands the batch to the earliest remaining
        -- member's delivery batched into it, which gets a send job at the
        -- same due time (in send jobs of up to 50 per due instant); the
        -- others batched into the old carrier name the new one.
        WITH b AS (
            SELECT u.id FROM unnest(v_b, v_b_was, v_b_pos, v_b_left) AS u(id, was, pos, members_left)
            WHERE u.pos = 1 AND u.was <> 'closed' AND u.members_left > 0
        ), heir AS (
            SELECT DISTINCT ON (c.id) c.id AS carrier, h.id AS heir, c.channel, c.recipient, c.status,
                   c.next_attempt_at, c.batch_id, nb.members
            FROM notify_deliveries c
            JOIN b ON b.id = c.batch_id
            JOIN notify_batches nb ON nb.id = c.batch_id
            JOIN notify_deliveries h ON h.notification_id = ANY(nb.members) AND h.channel = c.channel
                 AND coalesce(h.recipient, '') = coalesce(c.recipient, '')
                 AND h.status = 'batched' AND h.batched_into = c.id
            WHERE c.notification_id = v_id AND c.status IN ('scheduled', 'pending', 'failed', 'rate_limited')
            ORDER BY c.id, array_position(nb.members, h.notification_id)
        ), promoted AS (
            UPDATE notify_deliveries d
            SET status = heir.status, next_attempt_at = heir.next_attempt_at, batch_id = heir.batch_id,
                batched_into = NULL, settled_at = NULL, last_error = NULL, updated_at = now()
            FROM heir
            WHERE d.id = heir.heir
            RETURNING d.id, d.next_attempt_at
        ), repointed AS (
            UPDATE notify_deliveries d
            SET batched_into = heir.heir, updated_at = now()
            FROM heir
            WHERE d.notification_id = ANY(heir.members) AND d.channel = heir.channel
              AND coalesce(d.recipient, '') = coalesce(heir.recipient, '')
              AND d.status = 'batched' AND d.batched_into = heir.carrier AND d.id <> heir.heir
            RETURNING 1
        ), jobs AS (
            INSERT INTO river_job (args, kind, max_attempts, priority, queue, state, scheduled_at, tags, metadata)
            SELECT jsonb_build_object('delivery_ids', jsonb_agg(p.id::text ORDER BY p.id)), 'notify.send', 25, 1, 'send',
                   (CASE WHEN p.due > now() THEN 'scheduled' ELSE 'available' END)::river_job_state,
                   p.due, '{}'::varchar(255)[], '{}'::jsonb
            FROM (SELECT pr.id, coalesce(pr.next_attempt_at, now()) AS due,
                         (row_number() OVER (PARTITION BY pr.next_attempt_at ORDER BY pr.id) - 1) / 50 AS part
                  FROM promoted pr) p
            GROUP BY p.due, p.part
            RETURNING state
        )
        SELECT (SELECT count(*) FROM repointed)
               + (SELECT count(pg_notify(current_schema() || '.river_insert', json_build_object('queue', 'send')::text))
                  FROM (SELECT 1 FROM jobs WHERE state = 'available' LIMIT 1) w)
        INTO v_n;

        -- Where it was a batch's first member, the batch's in-app item (which
        -- shows the others too) is kept and moves to the new first member,
        -- in a closed batch as well. The items are locked in recipient order
        -- first, as a join's re-render and notify.batch_render lock them.
        PERFORM 1 FROM notify_inbox i
        WHERE i.id = ANY (ARRAY(SELECT u.item FROM unnest(v_b_item, v_b_pos, v_b_left) AS u(item, pos, members_left)
                                WHERE u.pos = 1 AND u.members_left > 0 AND u.item IS NOT NULL))
        ORDER BY i.recipient, i.id
        FOR UPDATE;
        WITH moved AS (
            UPDATE notify_inbox i
            SET notification_id = n.id, key = n.key, actor = n.actor, params = n.params
            FROM unnest(v_b, v_b_recipient, v_b_item, v_b_pos, v_b_left) AS u(id, recipient, item, pos, members_left)
            JOIN notify_batches nb ON nb.id = u.id
            JOIN notify_notifications n ON n.id = nb.members[1]
            WHERE u.pos = 1 AND u.members_left > 0 AND i.id = u.item AND i.recipient = u.recipient
            RETURNING i.id
        )
        SELECT coalesce(array_agg(moved.id), '{}') INTO v_kept FROM moved;

        -- Where it was a later member, its batched deliveries to that
        -- recipient are no longer in the message.
        UPDATE notify_deliveries d
        SET status = 'cancelled', last_error = 'notification cancelled', settled_at = now(), updated_at = now()
        WHERE d.notification_id = v_id AND d.status = 'batched'
          AND d.recipient = ANY (ARRAY(SELECT u.recipient FROM unnest(v_b_recipient, v_b_pos, v_b_was) AS u(recipient, pos, was)
                                       WHERE u.pos > 1 AND u.was <> 'closed'));

        -- Every batch whose item remains is rendered again by the daemon,
        -- in jobs of up to 500 batches.
        INSERT INTO river_job (args, kind, max_attempts, priority, queue, state, scheduled_at, tags, metadata)
        SELECT jsonb_build_object('batch_ids', jsonb_agg(x.id::text ORDER BY x.id)), 'notify.batch_render', 25, 1, 'fanout',
               'available', now(), '{}'::varchar(255)[], '{}'::jsonb
        FROM (SELECT u.id, (row_number() OVER (ORDER BY u.id) - 1) / 500 AS part
              FROM unnest(v_b, v_b_item, v_b_left) AS u(id, item, members_left)
              WHERE u.item IS NOT NULL AND u.members_left > 0) x
        GROUP BY x.part;
        IF FOUND THEN
            PERFORM pg_notify(current_schema() || '.river_insert', json_build_object('queue', 'fanout')::text);
        END IF;
    END IF;

    -- The deliveries it withdraws are locked first, in id order: the order
    -- a send job's claim locks its batch in (by the primary key, for
    -- id = ANY(...)). Locked in the order the update below finds them, a
    -- cancel and a claim in flight of a large notification each held a row
    -- the other waited for, and one of them was aborted as a deadlock.
    PERFORM 1 FROM notify_deliveries d
    WHERE d.notification_id = v_id
      AND (d.status = 'digest_pending' OR d.status <> ALL (ARRAY[
          'sending', 'digest_sending', 'sent', 'refused', 'expired', 'unavailable', 'skipped', 'cancelled',
          'digest_pending', 'digest_sent', 'digest_failed', 'digest_dropped',
          'batched', 'throttled', 'suppressed']))
    ORDER BY d.id
    FOR UPDATE;
    WITH d AS (
        UPDATE notify_deliveries d
        SET status = CASE WHEN d.status = 'digest_pending' THEN 'digest_dropped' ELSE 'cancelled' END,
            last_error = 'notification cancelled', settled_at = now(), updated_at = now(),
            next_attempt_at = NULL
        WHERE d.notification_id = v_id
          AND (d.status = 'digest_pending' OR d.status <> ALL (ARRAY[
              'sending', 'digest_sending', 'sent', 'refused', 'expired', 'unavailable', 'skipped', 'cancelled',
              'digest_pending', 'digest_sent', 'digest_failed', 'digest_dropped',
              'batched', 'throttled', 'suppressed', 'delivered', 'bounced', 'complained']))
        RETURNING d.id
    ), i AS (
        DELETE FROM notify_inbox i
        WHERE i.notification_id = v_id AND i.id <> ALL (v_kept)
        RETURNING i.id, i.recipient
    )
    SELECT (SELECT count(*) FROM d),
           coalesce((SELECT array_agg(i.id ORDER BY i.recipient, i.id) FROM i), '{}'),
           coalesce((SELECT array_agg(i.recipient ORDER BY i.recipient, i.id) FROM i), '{}')
    INTO v_deliveries, v_items, v_recipients;
    IF cardinality(v_items) > 0 THEN
        -- The deletions are logged in rows naming up to 2,000 recipients
        -- each, the shape of a fan-out chunk's created row (an item per
        -- recipient: notify_inbox is unique on (notification_id,
        -- recipient)), so a cancel of any audience stays far within a
        -- transaction's 65,536 change rows: a million recipients are 500
        -- rows. A lone item is a row of its recipient. A tenant's deletions
        -- name it: a stream confined to a tenant forwards only its own.
        INSERT INTO notify_inbox_changes (recipient, recipients, kind, item_ids, data)
        SELECT CASE WHEN cardinality(v_items) = 1 THEN min(u.recipient) END,
               CASE WHEN cardinality(v_items) > 1 THEN array_agg(u.recipient ORDER BY u.ord) END,
               'deleted', array_agg(u.id ORDER BY u.ord),
               (SELECT jsonb_build_object('tenant', n.tenant) FROM notify_notifications n
                WHERE n.id = v_id AND n.tenant IS NOT NULL)
        FROM unnest(v_items, v_recipients) WITH ORDINALITY AS u(id, recipient, ord)
        GROUP BY (u.ord - 1) / 2000
        ORDER BY min(u.ord);
    END IF;
    RETURN v_deliveries + cardinality(v_items);
END
$$;

CREATE OR REPLACE FUNCTION notify_cancel(notifier text, key text) RETURNS integer
LANGUAGE sql SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
SELECT notify_cancel(notifier, key, NULL)
$$;
