-- Enqueue from any language: SQL functions that write a notification inside
-- the caller's transaction, with the semantics of the Go API's SendTx
-- (docs/sql-enqueue.md is the reference).
--
--   notify_enqueue      what a send writes: the notification row, its
--                       notify.fanout River job and River's insert wake-up.
--                       SendTx calls it with a list it validated and sorted in
--                       Go; notify_send calls it after validating in SQL. It
--                       is the one definition of what is written: change the
--                       rows here, nowhere else.
--   notify_send         the public call: validates like SendTx, refuses a
--                       notifier the daemon has not published, then enqueues.
--   notify_cancel       what CancelTx does (the Go API calls it).
--   notify_subscribe, notify_unsubscribe
--
-- The bodies are PL/pgSQL: their plans are cached per connection, and they
-- are bound when first called, so they may name river_job, which River's
-- migrations create after this file runs on a fresh database. The public
-- functions run with the search_path pinned to the schema they were created
-- in, so a caller whose search_path does not reach notifyd's schema can call
-- them schema-qualified and their tables still resolve there.

-- +goose Up

-- The notifiers of the daemon's config, published at start and by
-- `notifyd migrate` (stores.PublishCatalog). notify_send refuses a notifier
-- that is not here; everything else about a notifier (its params schema, its
-- channels) is checked at fan-out against the fanning-out replica's config.
CREATE TABLE notify_notifiers (
    name           text PRIMARY KEY,
    category       text NOT NULL DEFAULT '',
    max_recipients integer NOT NULL CHECK (max_recipients > 0),
    updated_at     timestamptz NOT NULL DEFAULT now()
);

-- The River job notify_enqueue inserts: the fan-out job's kind and insert
-- options as the Go code declares them (jobs.FanoutArgs). One row. The daemon
-- republishes it with the catalog; the values here are the same declaration,
-- for a database that was migrated but has not seen a daemon yet (a test
-- compares both with the Go code).
CREATE TABLE notify_fanout_job (
    singleton    boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    kind         text NOT NULL,
    queue        text NOT NULL,
    max_attempts smallint NOT NULL CHECK (max_attempts > 0),
    priority     smallint NOT NULL CHECK (priority BETWEEN 1 AND 4),
    updated_at   timestamptz NOT NULL DEFAULT now()
);
INSERT INTO notify_fanout_job (kind, queue, max_attempts, priority) VALUES ('notify.fanout', 'fanout', 25, 1);

-- notify_uuidv7 returns an RFC 9562 version 7 UUID (48-bit Unix millisecond
-- timestamp, then random bits), the id format of every row notifyd writes:
-- a random version 4 UUID with its first six bytes replaced by the time and
-- its version nibble turned from 4 (0100) into 7 (0111).
CREATE FUNCTION notify_uuidv7() RETURNS uuid
LANGUAGE sql VOLATILE PARALLEL SAFE
AS $$
SELECT encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid())
    PLACING substring(int8send((extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3)
    FROM 1 FOR 6), 52, 1), 53, 1), 'hex')::uuid
$$;

-- notify_input_error raises SQLSTATE 22023 (invalid_parameter_value) with
-- the message "<field>: <message>", as the HTTP API words it, and the field
-- in the error's COLUMN field for clients that map errors to fields.
-- +goose StatementBegin
CREATE FUNCTION notify_input_error(field text, message text) RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = field || ': ' || message, COLUMN = field;
END
$$;
-- +goose StatementEnd

-- notify_check_text applies the Go API's rule for a required text field:
-- present, at most max bytes. (PostgreSQL text is always valid in the
-- database encoding and never holds a NUL, the Go API's two other checks.)
-- +goose StatementBegin
CREATE FUNCTION notify_check_text(field text, value text, max integer) RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    IF value IS NULL OR value = '' THEN
        PERFORM notify_input_error(field, 'is required');
    ELSIF octet_length(value) > max THEN
        PERFORM notify_input_error(field, format('longer than %s bytes', max));
    END IF;
END
$$;
-- +goose StatementEnd

-- notify_enqueue writes a validated notification and its notify.fanout River
-- job in one statement, and reports the id and whether (notifier, key)
-- already existed, in which case nothing was written. recipients and reasons
-- are parallel; inline_sorted promises recipients are in byte order with no
-- id twice (the fan-out then keeps the list as written).
--
-- ON CONFLICT ... DO UPDATE with a no-op assignment returns the existing row
-- even when a concurrent transaction inserted it first (DO NOTHING would
-- return no row under READ COMMITTED); xmax = 0 tells a fresh insert from a
-- duplicate, and only a fresh insert gets a job. The pg_notify is River's own
-- insert notification, so an idle fan-out queue wakes at commit instead of at
-- its next poll. The job's kind, queue, attempts and priority come from
-- notify_fanout_job.
--
-- Applications call notify_send, which validates; this function trusts its
-- arguments.
-- +goose StatementBegin
CREATE FUNCTION notify_enqueue(p_id uuid, p_notifier text, p_key text, p_actor text, p_recipients text[],
                               p_reasons text[], p_topics text[], p_params jsonb, p_send_at timestamptz,
                               p_inline_sorted boolean, OUT id uuid, OUT duplicate boolean)
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
DECLARE
    woke bigint;
BEGIN
    WITH ins AS (
        INSERT INTO notify_notifications AS n (id, notifier, key, actor, recipients, reasons, topics, params,
                                               send_at, status, inline_sorted)
        VALUES (p_id, p_notifier, p_key, nullif(p_actor, ''), coalesce(p_recipients, '{}'),
                coalesce(p_reasons, '{}'), coalesce(p_topics, '{}'), coalesce(p_params, '{}'), p_send_at,
                CASE WHEN p_send_at > now() THEN 'scheduled' ELSE 'pending' END, coalesce(p_inline_sorted, false))
        ON CONFLICT (notifier, key) DO UPDATE SET notifier = EXCLUDED.notifier
        RETURNING n.id, (n.xmax = 0) AS inserted
    ), job AS (
        INSERT INTO river_job (args, kind, max_attempts, priority, queue, state, scheduled_at, tags, metadata)
        SELECT jsonb_build_object('notification_id', ins.id), f.kind, f.max_attempts, f.priority, f.queue,
               (CASE WHEN p_send_at > now() THEN 'scheduled' ELSE 'available' END)::river_job_state,
               coalesce(p_send_at, now()), '{}'::varchar(255)[], '{}'::jsonb
        FROM ins
        CROSS JOIN notify_fanout_job f
        WHERE ins.inserted
        RETURNING river_job.queue
    ), wake AS (
        SELECT pg_notify(current_schema() || '.river_insert', json_build_object('queue', job.queue)::text)
        FROM job
        WHERE p_send_at IS NULL OR p_send_at <= now()
    )
    SELECT ins.id, NOT ins.inserted, (SELECT count(*) FROM wake)
    INTO id, duplicate, woke
    FROM ins;
END
$$;
-- +goose StatementEnd

-- notify_send enqueues a notification inside the caller's transaction: it
-- exists if and only if that transaction commits, and (notifier, key) is one
-- notification forever (a second send returns the first id with duplicate).
-- recipients is the HTTP API's list: "u1" or {"id": "u2", "reason": "author"}.
-- Malformed input and a notifier the daemon has not published raise SQLSTATE
-- 22023 naming the field, and write nothing. Params are checked against the
-- notifier's schema at fan-out (a failing notification becomes rejected).
--
-- The checks are the Go API's (SendTx), in its order, with its words. Each
-- list is read in one pass that also tells whether every entry is valid;
-- only when one is not does a second query find the first bad entry and say
-- what is wrong with it, so a valid send pays for one query per list.
-- +goose StatementBegin
CREATE FUNCTION notify_send(notifier text, key text, recipients jsonb DEFAULT '[]', params jsonb DEFAULT '{}',
                            topics text[] DEFAULT '{}', actor text DEFAULT NULL,
                            send_at timestamptz DEFAULT NULL)
RETURNS TABLE (id uuid, duplicate boolean)
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
DECLARE
    v_recipients jsonb := coalesce(notify_send.recipients, '[]');
    v_topics text[] := coalesce(notify_send.topics, '{}');
    v_params jsonb := coalesce(notify_send.params, '{}');
    v_ids text[] := '{}';
    v_reasons text[] := '{}';
    v_distinct integer := 0;
    v_ok boolean;
    v_entry jsonb;
    v_result record;
    v_field text;
    v_message text;
    v_max integer;
BEGIN
    IF notify_send.notifier IS NULL OR notify_send.notifier = '' THEN
        PERFORM notify_input_error('notifier', 'is required');
    ELSIF octet_length(notify_send.notifier) > 255 THEN
        PERFORM notify_input_error('notifier', 'longer than 255 bytes');
    END IF;
    IF notify_send.key IS NULL OR notify_send.key = '' THEN
        PERFORM notify_input_error('key', 'is required');
    ELSIF octet_length(notify_send.key) > 255 THEN
        PERFORM notify_input_error('key', 'longer than 255 bytes');
    END IF;
    IF octet_length(notify_send.actor) > 255 THEN
        PERFORM notify_input_error('actor', 'longer than 255 bytes');
    END IF;
    IF jsonb_typeof(v_recipients) = 'null' THEN
        v_recipients := '[]';
    ELSIF jsonb_typeof(v_recipients) <> 'array' THEN
        PERFORM notify_input_error('recipients', 'want a JSON array, got JSON ' || jsonb_typeof(v_recipients));
    END IF;
    IF jsonb_array_length(v_recipients) = 0 AND cardinality(v_topics) = 0 THEN
        PERFORM notify_input_error('recipients', 'give at least one recipient or topic');
    END IF;

    v_entry := v_recipients -> 0;
    IF jsonb_array_length(v_recipients) = 1 AND jsonb_typeof(v_entry) = 'string'
       AND octet_length(v_entry #>> '{}') BETWEEN 1 AND 255 THEN
        -- The common case, one recipient id, without a query.
        v_ids := ARRAY[v_entry #>> '{}'];
        v_reasons := '{direct}';
        v_distinct := 1;
    ELSIF jsonb_array_length(v_recipients) > 0 THEN
        -- The ids and reasons sorted by id in byte order (stable: an id given
        -- twice keeps its entries in the order given), as SendTx sorts them.
        SELECT coalesce(bool_and(coalesce(CASE jsonb_typeof(e.v)
                   WHEN 'string' THEN octet_length(e.v #>> '{}') BETWEEN 1 AND 255
                   WHEN 'object' THEN e.v - 'id' - 'reason' = '{}'
                       AND jsonb_typeof(e.v -> 'id') = 'string' AND octet_length(e.v ->> 'id') BETWEEN 1 AND 255
                       AND coalesce(jsonb_typeof(e.v -> 'reason'), 'null') IN ('string', 'null')
                       AND coalesce(octet_length(e.v ->> 'reason'), 0) <= 64
                   ELSE false END, false)), true),
               array_agg(x.rid ORDER BY x.rid COLLATE "C", e.ord),
               array_agg(coalesce(nullif(x.reason, ''), 'direct') ORDER BY x.rid COLLATE "C", e.ord),
               count(DISTINCT x.rid COLLATE "C")
        INTO v_ok, v_ids, v_reasons, v_distinct
        FROM jsonb_array_elements(v_recipients) WITH ORDINALITY AS e(v, ord)
        CROSS JOIN LATERAL (SELECT coalesce(e.v ->> 'id', e.v #>> '{}') AS rid,
                                   CASE WHEN jsonb_typeof(e.v) = 'object' THEN e.v ->> 'reason' END AS reason) x;
        IF NOT v_ok THEN
            -- The first bad entry, and what the HTTP API would say of it.
            SELECT format('recipients[%s]', e.ord - 1) || c.sub, c.problem INTO v_field, v_message
            FROM jsonb_array_elements(v_recipients) WITH ORDINALITY AS e(v, ord)
            CROSS JOIN LATERAL (
                SELECT CASE jsonb_typeof(e.v) WHEN 'string' THEN e.v #>> '{}' WHEN 'object' THEN e.v ->> 'id' END AS rid,
                       CASE WHEN jsonb_typeof(e.v) = 'object' THEN nullif(e.v ->> 'reason', '') END AS reason,
                       (SELECT min(k COLLATE "C") FROM jsonb_object_keys(CASE WHEN jsonb_typeof(e.v) = 'object' THEN e.v END) AS k
                        WHERE k NOT IN ('id', 'reason')) AS unknown_key
            ) g
            CROSS JOIN LATERAL (
                SELECT CASE
                    WHEN jsonb_typeof(e.v) NOT IN ('string', 'object') THEN ''
                    WHEN g.unknown_key IS NOT NULL THEN '.' || g.unknown_key
                    WHEN jsonb_typeof(e.v -> 'id') NOT IN ('string', 'null') THEN '.id'
                    WHEN jsonb_typeof(e.v -> 'reason') NOT IN ('string', 'null') THEN '.reason'
                    WHEN coalesce(g.rid, '') = '' OR octet_length(g.rid) > 255 THEN '.id'
                    WHEN octet_length(g.reason) > 64 THEN '.reason'
                END AS sub,
                CASE
                    WHEN jsonb_typeof(e.v) NOT IN ('string', 'object') THEN
                        'want a recipient id (string) or an object {"id", "reason"}'
                    WHEN g.unknown_key IS NOT NULL THEN 'unknown field'
                    WHEN jsonb_typeof(e.v -> 'id') NOT IN ('string', 'null') THEN
                        'want a string, got JSON ' || jsonb_typeof(e.v -> 'id')
                    WHEN jsonb_typeof(e.v -> 'reason') NOT IN ('string', 'null') THEN
                        'want a string, got JSON ' || jsonb_typeof(e.v -> 'reason')
                    WHEN coalesce(g.rid, '') = '' THEN 'is required'
                    WHEN octet_length(g.rid) > 255 THEN 'longer than 255 bytes'
                    WHEN octet_length(g.reason) > 64 THEN 'longer than 64 bytes'
                END AS problem
            ) c
            WHERE c.problem IS NOT NULL
            ORDER BY e.ord
            LIMIT 1;
            PERFORM notify_input_error(coalesce(v_field, 'recipients'), coalesce(v_message, 'malformed'));
        END IF;
    END IF;

    IF cardinality(v_topics) = 1 AND octet_length(v_topics[1]) BETWEEN 1 AND 255 THEN
        NULL; -- one valid topic: nothing to sort
    ELSIF cardinality(v_topics) > 0 THEN
        -- Sorted in byte order, each topic once, as SendTx stores them.
        SELECT coalesce(bool_and(coalesce(octet_length(t.topic), 0) BETWEEN 1 AND 255), false),
               array_agg(DISTINCT t.topic COLLATE "C" ORDER BY t.topic COLLATE "C")
        INTO v_ok, v_topics
        FROM unnest(v_topics) AS t(topic);
        IF NOT v_ok THEN
            SELECT format('topics[%s]', t.ord - 1),
                   CASE WHEN coalesce(t.topic, '') = '' THEN 'is required' ELSE 'longer than 255 bytes' END
            INTO v_field, v_message
            FROM unnest(notify_send.topics) WITH ORDINALITY AS t(topic, ord)
            WHERE coalesce(octet_length(t.topic), 0) NOT BETWEEN 1 AND 255
            ORDER BY t.ord
            LIMIT 1;
            PERFORM notify_input_error(coalesce(v_field, 'topics'), coalesce(v_message, 'malformed'));
        END IF;
    END IF;

    IF jsonb_typeof(v_params) = 'null' THEN
        v_params := '{}';
    ELSIF jsonb_typeof(v_params) <> 'object' THEN
        PERFORM notify_input_error('params', 'want a JSON object');
    END IF;

    SELECT c.max_recipients INTO v_max FROM notify_notifiers c WHERE c.name = notify_send.notifier;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown notifier "%"', notify_send.notifier USING
            ERRCODE = '22023', COLUMN = 'notifier',
            HINT = 'notify_send accepts the notifiers in notify_notifiers, which notifyd publishes from its config at start and at `notifyd migrate`';
    END IF;
    IF v_distinct > v_max THEN
        RAISE EXCEPTION 'too many recipients: % inline recipients, notifier % allows %', v_distinct,
            notify_send.notifier, v_max USING ERRCODE = '22023', COLUMN = 'recipients';
    END IF;

    -- An assignment, not a query: PL/pgSQL evaluates it without starting an
    -- executor.
    v_result := notify_enqueue(notify_uuidv7(), notify_send.notifier, notify_send.key, notify_send.actor, v_ids,
                               v_reasons, v_topics, v_params, notify_send.send_at, v_distinct = cardinality(v_ids));
    id := v_result.id;
    duplicate := v_result.duplicate;
    RETURN NEXT;
END
$$;
-- +goose StatementEnd

-- notify_cancel cancels (notifier, key): deliveries not yet claimed become
-- cancelled (digest rows digest_dropped), inbox items are deleted and their
-- deletion logged for the realtime stream. It returns the number of
-- deliveries and items withdrawn, 0 when the notification was already
-- cancelled or rejected, and NULL when it was never sent.
--
-- The status update is a statement of its own, before the withdrawal: it
-- waits for a fan-out chunk holding the row, and the next statement takes a
-- fresh snapshot that sees that chunk's rows. Every later chunk sees the
-- status and writes nothing. A delivery already claimed (sending,
-- digest_sending) or settled is left alone; the list below is the statuses
-- the Go code calls protected (stores.protectedStatuses). Its change-log rows
-- take their positions from the transaction's id, as every inbox writer's do
-- (migration 00009): no lock, no NOTIFY.
-- +goose StatementBegin
CREATE FUNCTION notify_cancel(notifier text, key text) RETURNS integer
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

-- notify_subscribe subscribes recipient to topic for reason (an upsert:
-- subscribing again changes the reason and keeps created_at). It returns
-- true when the subscription is new. The rules are the Go API's SubscribeTx.
-- +goose StatementBegin
CREATE FUNCTION notify_subscribe(topic text, recipient text, reason text DEFAULT 'subscribed') RETURNS boolean
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
DECLARE
    v_reason text := coalesce(nullif(notify_subscribe.reason, ''), 'subscribed');
    v_new boolean;
BEGIN
    PERFORM notify_check_text('topic', notify_subscribe.topic, 255);
    PERFORM notify_check_text('recipient', notify_subscribe.recipient, 255);
    IF v_reason !~ '^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$' THEN
        PERFORM notify_input_error('reason', 'want one word of letters, digits, ''-'', ''_'' or ''.'', at most 64 bytes');
    END IF;
    INSERT INTO notify_subscriptions AS s (topic, recipient, reason)
    VALUES (notify_subscribe.topic, notify_subscribe.recipient, v_reason)
    ON CONFLICT (topic, recipient) DO UPDATE SET reason = EXCLUDED.reason
    RETURNING (s.xmax = 0) INTO v_new;
    RETURN v_new;
END
$$;
-- +goose StatementEnd

-- notify_unsubscribe removes recipient's subscription to topic and returns
-- whether there was one.
-- +goose StatementBegin
CREATE FUNCTION notify_unsubscribe(topic text, recipient text) RETURNS boolean
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
BEGIN
    PERFORM notify_check_text('topic', notify_unsubscribe.topic, 255);
    PERFORM notify_check_text('recipient', notify_unsubscribe.recipient, 255);
    DELETE FROM notify_subscriptions s
    WHERE s.topic = notify_unsubscribe.topic AND s.recipient = notify_unsubscribe.recipient;
    RETURN FOUND;
END
$$;
-- +goose StatementEnd

-- Pin the public functions' search_path to the schema they live in (the one
-- these tables were created in), then pg_temp last so a temporary table never
-- shadows one of notifyd's: an application calls them schema-qualified
-- whatever its own search_path. The helpers they call inherit it.
-- notify_enqueue is not pinned: SendTx calls it through a pool whose
-- search_path reaches notifyd's schema, and pinning costs a configuration
-- change on every call.
-- +goose StatementBegin
DO $$
DECLARE
    f text;
BEGIN
    FOREACH f IN ARRAY ARRAY[
        'notify_send(text, text, jsonb, jsonb, text[], text, timestamptz)',
        'notify_cancel(text, text)',
        'notify_subscribe(text, text, text)',
        'notify_unsubscribe(text, text)']
    LOOP
        EXECUTE format('ALTER FUNCTION %s SET search_path = %I, pg_temp', f, current_schema());
    END LOOP;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION notify_unsubscribe(text, text);
DROP FUNCTION notify_subscribe(text, text, text);
DROP FUNCTION notify_cancel(text, text);
DROP FUNCTION notify_send(text, text, jsonb, jsonb, text[], text, timestamptz);
DROP FUNCTION notify_enqueue(uuid, text, text, text, text[], text[], text[], jsonb, timestamptz, boolean);
DROP FUNCTION notify_check_text(text, text, integer);
DROP FUNCTION notify_input_error(text, text);
DROP FUNCTION notify_uuidv7();
DROP TABLE notify_fanout_job;
DROP TABLE notify_notifiers;
