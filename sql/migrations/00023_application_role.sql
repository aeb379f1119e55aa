-- The application's side of SQL: least privilege, profiles in the
-- application's transaction, params checked at enqueue.
--
-- The five functions of the SQL API (notify_send, notify_cancel,
-- notify_subscribe, notify_unsubscribe and the new notify_put_recipient) run
-- as their owner (SECURITY DEFINER) with the search_path pinned to this
-- schema, then pg_catalog, then pg_temp, and every other notify_* function
-- is closed to PUBLIC: an application role needs EXECUTE on the five and no
-- right on any table. `notifyd migrate` then creates the role notifyd_app
-- (when it may) and grants it USAGE on the schema and EXECUTE on the five
-- (stores.Migrate; docs/sql-enqueue.md). A function created by CREATE
-- FUNCTION is executable by PUBLIC: a later migration that creates one
-- revokes that in the same migration (a test checks every migration).
--
-- notify_send checks params against the checkable part of the notifier's
-- JSON Schema (notify_notifiers.params_schema, and the same checks compiled
-- to an SQL/JSON path predicate, params_check, both written when the catalog
-- is published), and gets an overload taking the recipients as arrays, which
-- SendTx calls instead of notify_enqueue. notify_enqueue and notify_send no
-- longer name their schema: they resolve names through notify_send's pinned
-- search_path. Each function is given whole, as in sql/functions/.

-- +goose Up
SELECT set_config('search_path', quote_ident(current_schema()) || ', pg_catalog, pg_temp', true);

-- NULL: nothing of the notifier's schema is checked at enqueue.
ALTER TABLE notify_notifiers ADD COLUMN params_schema jsonb, ADD COLUMN params_check jsonpath;

-- +goose StatementBegin
-- notify_enqueue writes a validated notification and its notify.fanout River
-- job in one statement, and reports the id and whether (notifier, key)
-- already existed, in which case nothing was written. recipients and reasons
-- are parallel; inline_sorted promises recipients are in byte order with no
-- id twice (the fan-out then keeps the list as written). It is the one
-- definition of what a send writes: both notify_send overloads (and so
-- SendTx, which calls one) end in it.
--
-- ON CONFLICT ... DO UPDATE with a no-op assignment returns the existing row
-- even when a concurrent transaction inserted it first (DO NOTHING would
-- return no row under READ COMMITTED); xmax = 0 tells a fresh insert from a
-- duplicate, and only a fresh insert gets a job. The pg_notify is River's own
-- insert notification, so an idle fan-out queue wakes at commit instead of at
-- its next poll. The job's kind, queue, attempts and priority come from
-- notify_fanout_job.
--
-- It trusts its arguments, so only notify_send, which validates, calls it:
-- no role but its owner may execute it. It has no search_path of its own and
-- runs in its caller's, notify_send's, which is pinned to notifyd's schema.
CREATE OR REPLACE FUNCTION notify_enqueue(p_id uuid, p_notifier text, p_key text, p_actor text,
                                          p_recipients text[], p_reasons text[], p_topics text[],
                                          p_params jsonb, p_send_at timestamptz, p_inline_sorted boolean,
                                          OUT id uuid, OUT duplicate boolean)
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

-- +goose StatementBegin
-- notify_params_violation returns the first value of params that breaks
-- schema, as {pointer, message} (pointer an RFC 6901 JSON pointer into the
-- params, '' for the params object itself), or NULL when none does. schema is
-- a notifier's params_schema: the part of its JSON Schema SQL checks, made of
-- the keywords type, enum, const, minLength, maxLength, minimum, maximum,
-- required, properties, additionalProperties (false only) and items (one
-- schema for every item). The catalog's publisher compiles it, with the same
-- checks as an SQL/JSON path predicate (params_check) that notify_send_write
-- evaluates first; this walk runs only to explain a failure.
--
-- The order is the document's: a value's own keywords (type, const, enum,
-- lengths, bounds), then an object's properties by name in byte order (a
-- missing required property, a property additionalProperties forbids, or a
-- failing value inside one), then an array's items by index. The messages
-- are the words of the JSON Schema validator the Go API uses.
CREATE OR REPLACE FUNCTION notify_params_violation(schema jsonb, value jsonb, pointer text DEFAULT '')
RETURNS text[]
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    t text := jsonb_typeof(value);
    k text;
    sub text;
    found text[];
BEGIN
    IF schema ? 'type' AND NOT (schema -> 'type' ? t
            OR (t = 'number' AND schema -> 'type' ? 'integer' AND value::text::numeric = trunc(value::text::numeric))) THEN
        RETURN ARRAY[pointer, format('got %s, want %s', t,
                                     (SELECT string_agg(x, ' or ') FROM jsonb_array_elements_text(schema -> 'type') AS x))];
    END IF;
    IF schema ? 'const' AND value IS DISTINCT FROM schema -> 'const' THEN
        RETURN ARRAY[pointer, format('value must be %s', schema -> 'const')];
    END IF;
    IF schema ? 'enum' AND NOT EXISTS (SELECT 1 FROM jsonb_array_elements(schema -> 'enum') AS e(v) WHERE e.v = value) THEN
        RETURN ARRAY[pointer, format('value must be one of %s',
                                     (SELECT string_agg(e.v::text, ', ') FROM jsonb_array_elements(schema -> 'enum') AS e(v)))];
    END IF;
    IF t = 'string' THEN
        IF length(value #>> '{}') < (schema ->> 'minLength')::numeric THEN
            RETURN ARRAY[pointer, format('minLength: got %s, want %s', length(value #>> '{}'), schema ->> 'minLength')];
        ELSIF length(value #>> '{}') > (schema ->> 'maxLength')::numeric THEN
            RETURN ARRAY[pointer, format('maxLength: got %s, want %s', length(value #>> '{}'), schema ->> 'maxLength')];
        END IF;
    ELSIF t = 'number' THEN
        IF value::text::numeric < (schema ->> 'minimum')::numeric THEN
            RETURN ARRAY[pointer, format('minimum: got %s, want %s', value, schema ->> 'minimum')];
        ELSIF value::text::numeric > (schema ->> 'maximum')::numeric THEN
            RETURN ARRAY[pointer, format('maximum: got %s, want %s', value, schema ->> 'maximum')];
        END IF;
    ELSIF t = 'object' THEN
        FOR k IN
            SELECT n.name FROM (
                SELECT jsonb_array_elements_text(schema -> 'required')
                UNION SELECT jsonb_object_keys(schema -> 'properties')
                UNION SELECT jsonb_object_keys(value) WHERE schema -> 'additionalProperties' = 'false'
            ) AS n(name)
            ORDER BY n.name COLLATE "C"
        LOOP
            sub := pointer || '/' || replace(replace(k, '~', '~0'), '/', '~1');
            IF NOT value ? k THEN
                IF schema -> 'required' ? k THEN
                    RETURN ARRAY[sub, 'missing required property'];
                END IF;
            ELSIF schema -> 'properties' ? k THEN
                found := notify_params_violation(schema -> 'properties' -> k, value -> k, sub);
                IF found IS NOT NULL THEN
                    RETURN found;
                END IF;
            ELSIF schema -> 'additionalProperties' = 'false' THEN
                RETURN ARRAY[sub, 'property not allowed'];
            END IF;
        END LOOP;
    ELSIF t = 'array' AND schema ? 'items' THEN
        FOR i IN 0 .. jsonb_array_length(value) - 1 LOOP
            found := notify_params_violation(schema -> 'items', value -> i, pointer || '/' || i);
            IF found IS NOT NULL THEN
                RETURN found;
            END IF;
        END LOOP;
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- notify_send_write is the part of a send both notify_send overloads share,
-- after they checked the notifier, key, actor and audience: it checks the
-- recipient ids and reasons (unless sorted says the caller already checked
-- them, sorted them by id in byte order and counted the distinct ones), the
-- topics (then sorted, each once) and the params, looks the notifier up in
-- the catalog, checks the params against the checkable part of its JSON
-- Schema and max_recipients, and writes through notify_enqueue.
--
-- The params check is the notifier's compiled SQL/JSON path predicate
-- (notify_notifiers.params_check, written when the catalog is published):
-- one evaluation when the params are valid. Only when they are not does
-- notify_params_violation walk the same checks (params_schema) to find the
-- first failing value and say what is wrong with it.
--
-- It trusts that its caller checked the rest; only notify_send calls it, and
-- it runs in notify_send's pinned search_path.
CREATE OR REPLACE FUNCTION notify_send_write(p_notifier text, p_key text, p_actor text, p_ids text[], p_reasons text[],
                                             p_sorted boolean, p_distinct integer, p_topics text[], p_params jsonb,
                                             p_send_at timestamptz, OUT id uuid, OUT duplicate boolean)
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
DECLARE
    v_ids text[] := coalesce(p_ids, '{}');
    v_reasons text[] := coalesce(p_reasons, '{}');
    v_distinct integer := p_distinct;
    v_topics text[] := coalesce(p_topics, '{}');
    v_params jsonb := coalesce(p_params, '{}');
    v_ok boolean;
    v_field text;
    v_message text;
    v_max integer;
    v_check jsonpath;
    v_violation text[];
    v_result record;
BEGIN
    IF p_sorted THEN
        NULL; -- checked and sorted by notify_send
    ELSIF cardinality(v_ids) = 1 AND octet_length(v_ids[1]) BETWEEN 1 AND 255
          AND coalesce(octet_length(v_reasons[1]), 0) <= 64 THEN
        -- The common case, one recipient id, without a query.
        v_reasons := ARRAY[coalesce(nullif(v_reasons[1], ''), 'direct')];
        v_distinct := 1;
    ELSIF cardinality(v_ids) > 0 THEN
        -- Sorted by id in byte order (stable: an id given twice keeps its
        -- entries in the order given), as SendTx sorts them.
        SELECT coalesce(bool_and(coalesce(octet_length(u.rid) BETWEEN 1 AND 255, false)
                                 AND coalesce(octet_length(u.reason), 0) <= 64), true),
               array_agg(u.rid ORDER BY u.rid COLLATE "C", u.ord),
               array_agg(coalesce(nullif(u.reason, ''), 'direct') ORDER BY u.rid COLLATE "C", u.ord),
               count(DISTINCT u.rid COLLATE "C")
        INTO v_ok, v_ids, v_reasons, v_distinct
        FROM unnest(v_ids, v_reasons) WITH ORDINALITY AS u(rid, reason, ord)
        WHERE u.ord <= cardinality(v_ids);
        IF NOT v_ok THEN
            SELECT format('recipients[%s].', u.ord - 1)
                       || CASE WHEN coalesce(octet_length(u.rid), 0) NOT BETWEEN 1 AND 255 THEN 'id' ELSE 'reason' END,
                   CASE WHEN coalesce(u.rid, '') = '' THEN 'is required'
                        WHEN octet_length(u.rid) > 255 THEN 'longer than 255 bytes'
                        ELSE 'longer than 64 bytes' END
            INTO v_field, v_message
            FROM unnest(p_ids, p_reasons) WITH ORDINALITY AS u(rid, reason, ord)
            WHERE coalesce(octet_length(u.rid), 0) NOT BETWEEN 1 AND 255 OR octet_length(u.reason) > 64
            ORDER BY u.ord
            LIMIT 1;
            PERFORM notify_input_error(coalesce(v_field, 'recipients'), coalesce(v_message, 'malformed'));
        END IF;
    ELSE
        v_distinct := 0;
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
            FROM unnest(p_topics) WITH ORDINALITY AS t(topic, ord)
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

    SELECT c.max_recipients, c.params_check INTO v_max, v_check FROM notify_notifiers c WHERE c.name = p_notifier;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown notifier "%"', p_notifier USING
            ERRCODE = '22023', COLUMN = 'notifier',
            HINT = 'notify_send accepts the notifiers in notify_notifiers, which notifyd publishes from its config at start and at `notifyd migrate`';
    END IF;
    IF v_check IS NOT NULL AND (v_params @@ v_check) IS NOT TRUE THEN
        v_violation := notify_params_violation((SELECT c.params_schema FROM notify_notifiers c WHERE c.name = p_notifier),
                                               v_params);
        v_violation := coalesce(v_violation, ARRAY['', 'does not match the notifier''s params schema']);
        RAISE EXCEPTION '%: params%: %', p_notifier, CASE WHEN v_violation[1] = '' THEN '' ELSE ' ' || v_violation[1] END,
            v_violation[2] USING ERRCODE = '22023', COLUMN = 'params', DETAIL = v_violation[1];
    END IF;
    IF v_distinct > v_max THEN
        RAISE EXCEPTION 'too many recipients: % inline recipients, notifier % allows %', v_distinct,
            p_notifier, v_max USING ERRCODE = '22023', COLUMN = 'recipients';
    END IF;

    -- An assignment, not a query: PL/pgSQL evaluates it without starting an
    -- executor.
    v_result := notify_enqueue(notify_uuidv7(), p_notifier, p_key, p_actor, v_ids, v_reasons, v_topics, v_params,
                               p_send_at, v_distinct = cardinality(v_ids));
    id := v_result.id;
    duplicate := v_result.duplicate;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
SELECT set_config('search_path', quote_ident(current_schema()) || ', pg_catalog, pg_temp', true);
-- notify_send enqueues a notification inside the caller's transaction: it
-- exists if and only if that transaction commits, and (notifier, key) is one
-- notification forever (a second send returns the first id with duplicate).
-- Malformed input, a notifier the daemon has not published and params that
-- break the checkable part of the notifier's JSON Schema raise SQLSTATE 22023
-- naming the field, and write nothing.
--
-- Two overloads. The first is the one applications call: recipients is the
-- HTTP API's JSON list, "u1" or {"id": "u2", "reason": "author"}. The second
-- takes the ids and their reasons as parallel arrays (SendTx calls it: no
-- JSON to build and parse); it has no defaults, so a call with seven
-- arguments or fewer always means the first.
--
-- The checks are the Go API's (SendTx), in its order, with its words: the
-- notifier, key and actor and the recipients here, then, in
-- notify_send_write, the topics, the params, the catalog, max_recipients and
-- the params schema. Each list is read in one pass that also tells whether
-- every entry is valid; only when one is not does a second query find the
-- first bad entry and say what is wrong with it, so a valid send pays for
-- one query per list (none for a list of one).
--
-- Both run as their owner (SECURITY DEFINER) with the search_path pinned to
-- notifyd's schema, then pg_catalog, then pg_temp: the role notifyd_app may
-- execute them and nothing they touch, and neither the caller's search_path
-- nor objects in the caller's own schemas change what a name in them means.
CREATE OR REPLACE FUNCTION notify_send(notifier text, key text, recipients jsonb DEFAULT '[]', params jsonb DEFAULT '{}',
                                       topics text[] DEFAULT '{}', actor text DEFAULT NULL,
                                       send_at timestamptz DEFAULT NULL)
RETURNS TABLE (id uuid, duplicate boolean)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
#variable_conflict use_column
DECLARE
    v_recipients jsonb := coalesce(notify_send.recipients, '[]');
    v_ids text[] := '{}';
    v_reasons text[] := '{}';
    v_distinct integer := 0;
    v_ok boolean;
    v_entry jsonb;
    v_result record;
    v_field text;
    v_message text;
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
    IF jsonb_array_length(v_recipients) = 0 AND coalesce(cardinality(notify_send.topics), 0) = 0 THEN
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


    -- An assignment, not a query: PL/pgSQL evaluates it without starting an
    -- executor.
    v_result := notify_send_write(notify_send.notifier, notify_send.key, notify_send.actor, v_ids, v_reasons, true,
                                  v_distinct, notify_send.topics, notify_send.params, notify_send.send_at);
    id := v_result.id;
    duplicate := v_result.duplicate;
    RETURN NEXT;
END
$$;

CREATE OR REPLACE FUNCTION notify_send(notifier text, key text, recipient_ids text[], reasons text[], params jsonb,
                                       topics text[], actor text, send_at timestamptz)
RETURNS TABLE (id uuid, duplicate boolean)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
#variable_conflict use_column
DECLARE
    v_result record;
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
    IF coalesce(cardinality(notify_send.recipient_ids), 0) = 0 AND coalesce(cardinality(notify_send.topics), 0) = 0 THEN
        PERFORM notify_input_error('recipients', 'give at least one recipient or topic');
    END IF;
    IF array_ndims(notify_send.recipient_ids) > 1 OR array_ndims(notify_send.reasons) > 1 THEN
        PERFORM notify_input_error('recipients', 'want one-dimensional arrays of ids and reasons');
    END IF;
    IF coalesce(cardinality(notify_send.reasons), 0) NOT IN (0, coalesce(cardinality(notify_send.recipient_ids), 0)) THEN
        PERFORM notify_input_error('reasons', format('want one reason per recipient id (%s ids, %s reasons) or none',
                                   coalesce(cardinality(notify_send.recipient_ids), 0), cardinality(notify_send.reasons)));
    END IF;

    v_result := notify_send_write(notify_send.notifier, notify_send.key, notify_send.actor, notify_send.recipient_ids,
                                  notify_send.reasons, false, NULL, notify_send.topics, notify_send.params,
                                  notify_send.send_at);
    id := v_result.id;
    duplicate := v_result.duplicate;
    RETURN NEXT;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
SELECT set_config('search_path', quote_ident(current_schema()) || ', pg_catalog, pg_temp', true);
-- notify_cancel cancels (notifier, key) and returns the number of deliveries
-- and inbox items withdrawn, 0 when the notification was already cancelled
-- or rejected, and NULL when it was never sent. What CancelTx does (the Go
-- API calls it).
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
CREATE OR REPLACE FUNCTION notify_cancel(notifier text, key text) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
#variable_conflict use_column
DECLARE
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
        WHERE i.notification_id = v_id AND i.id <> ALL (v_kept)
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
SELECT set_config('search_path', quote_ident(current_schema()) || ', pg_catalog, pg_temp', true);
-- notify_subscribe subscribes recipient to topic for reason (an upsert:
-- subscribing again changes the reason and keeps created_at). It returns
-- true when the subscription is new. The Go API's SubscribeTx calls it. It
-- runs as its owner (SECURITY DEFINER), search_path pinned like notify_send's.
CREATE OR REPLACE FUNCTION notify_subscribe(topic text, recipient text, reason text DEFAULT 'subscribed') RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path FROM CURRENT
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

-- +goose StatementBegin
SELECT set_config('search_path', quote_ident(current_schema()) || ', pg_catalog, pg_temp', true);
-- notify_unsubscribe removes recipient's subscription to topic and returns
-- whether there was one. The Go API's UnsubscribeTx calls it. It runs as its
-- owner (SECURITY DEFINER), search_path pinned like notify_send's.
CREATE OR REPLACE FUNCTION notify_unsubscribe(topic text, recipient text) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path FROM CURRENT
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

-- +goose StatementBegin
-- notify_profile_text is a text field of a profile given to
-- notify_put_recipient: NULL when the key is absent, JSON null or "" (a
-- field to clear), else the string, which must be at most max bytes. Any
-- other JSON type is refused naming the field.
CREATE OR REPLACE FUNCTION notify_profile_text(profile jsonb, field text, max integer) RETURNS text
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    v jsonb := profile -> field;
    s text;
BEGIN
    IF v IS NULL OR jsonb_typeof(v) = 'null' THEN
        RETURN NULL;
    ELSIF jsonb_typeof(v) <> 'string' THEN
        PERFORM notify_input_error(field, 'want a string, got JSON ' || jsonb_typeof(v));
    END IF;
    s := v #>> '{}';
    IF s = '' THEN
        RETURN NULL;
    ELSIF octet_length(s) > max THEN
        PERFORM notify_input_error(field, format('longer than %s bytes', max));
    END IF;
    RETURN s;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- notify_check_timezone reports whether name is an IANA time zone name, as
-- a recipient's timezone must be: one the daemon, which reads zones with Go's
-- time.LoadLocation, loads too. PostgreSQL also accepts POSIX rules
-- ("EST5", "<+03>-3"), numeric offsets and names in the wrong case
-- ("europe/paris"); the daemon would not, so they are refused here: the name
-- must look like a zone file's path, PostgreSQL must load it under exactly
-- that name, and a name with digits but no "/" (which could be a POSIX rule)
-- must be in pg_timezone_names ("EST5EDT", "GMT0"). "Local", the daemon's own
-- zone, differs per machine and is refused.
--
-- The zone is loaded by setting TimeZone inside the function; its SET clause
-- restores the caller's TimeZone when it returns.
CREATE OR REPLACE FUNCTION notify_check_timezone(name text) RETURNS boolean
LANGUAGE plpgsql
SET "TimeZone" TO 'UTC'
AS $$
BEGIN
    IF name IS NULL OR name = 'Local' OR name !~ '^[A-Za-z][A-Za-z0-9_+-]*(/[A-Za-z0-9_+-]+)*$' THEN
        RETURN false;
    ELSIF name ~ '[0-9]' AND name !~ '/' THEN
        RETURN EXISTS (SELECT 1 FROM pg_timezone_names z WHERE z.name = notify_check_timezone.name);
    END IF;
    PERFORM set_config('TimeZone', name, true);
    RETURN current_setting('TimeZone') = name;
EXCEPTION WHEN invalid_parameter_value THEN
    RETURN false;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
SELECT set_config('search_path', quote_ident(current_schema()) || ', pg_catalog, pg_temp', true);
-- notify_put_recipient creates recipient id's profile or changes it, inside
-- the caller's transaction, with the rules of PUT /v1/recipients/{id}, which
-- calls it too (as do the Go API's PutRecipient and PutRecipientTx). profile
-- is a JSON object of the fields to write: a key that is absent keeps what is
-- stored; null (or "" for a text field) clears it (data: back to {}). The
-- fields:
--
--   email        a bare address such as ada@example.com (at most 254 bytes)
--   name         at most 255 bytes
--   locale       a BCP 47 language tag such as en or pt-BR (35 bytes)
--   timezone     an IANA time zone name such as Europe/Paris (64 bytes)
--   webhook_url  an absolute http or https URL (2048 bytes); a new one clears
--                webhook_gone_at. Private destinations are refused when a
--                webhook is sent, not here.
--   phone        E.164: "+", the country code, at most 15 digits, no spaces
--   data         a JSON object for the application's own use
--   quiet_hours  {"start": "HH:MM", "end": "HH:MM"}, two different times
--   tokens_valid_after  an RFC 3339 time: the recipient's tokens issued
--                before it are refused
--
-- An invalid field, or a key that is none of these, raises SQLSTATE 22023
-- with the message "<field>: <what is wrong>" and the field in COLUMN, and
-- nothing is written. The checks run in the order of the list above.
--
-- It runs as its owner (SECURITY DEFINER), search_path pinned like
-- notify_send's: notifyd_app may call it, and may not read or write
-- notify_recipients itself.
CREATE OR REPLACE FUNCTION notify_put_recipient(id text, profile jsonb) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
#variable_conflict use_column
DECLARE
    p jsonb := coalesce(notify_put_recipient.profile, '{}');
    v_unknown text;
    v_email text;
    v_name text;
    v_locale text;
    v_timezone text;
    v_webhook_url text;
    v_phone text;
    v_data jsonb;
    v_quiet jsonb;
    v_start text;
    v_end text;
    v_after timestamptz;
BEGIN
    PERFORM notify_check_text('id', notify_put_recipient.id, 255);
    IF jsonb_typeof(p) = 'null' THEN
        p := '{}';
    ELSIF jsonb_typeof(p) <> 'object' THEN
        PERFORM notify_input_error('profile', 'want a JSON object, got JSON ' || jsonb_typeof(p));
    END IF;
    IF p - ARRAY['email', 'name', 'locale', 'timezone', 'webhook_url', 'phone', 'data', 'quiet_hours',
                 'tokens_valid_after'] <> '{}' THEN
        SELECT min(k COLLATE "C") INTO v_unknown
        FROM jsonb_object_keys(p - ARRAY['email', 'name', 'locale', 'timezone', 'webhook_url', 'phone', 'data',
                                         'quiet_hours', 'tokens_valid_after']) AS k;
        PERFORM notify_input_error(v_unknown, 'unknown field');
    END IF;

    v_email := notify_profile_text(p, 'email', 254);
    IF v_email !~ ('^([A-Za-z0-9!#$%&''*+/=?^_`{|}~-]|[^\x01-\x7f])+(\.([A-Za-z0-9!#$%&''*+/=?^_`{|}~-]|[^\x01-\x7f])+)*'
                   '@(([A-Za-z0-9!#$%&''*+/=?^_`{|}~-]|[^\x01-\x7f])+(\.([A-Za-z0-9!#$%&''*+/=?^_`{|}~-]|[^\x01-\x7f])+)*'
                   '|\[[!-Z^-~]*\])$') THEN
        PERFORM notify_input_error('email', 'want a bare email address such as ada@example.com');
    END IF;
    v_name := notify_profile_text(p, 'name', 255);
    v_locale := notify_profile_text(p, 'locale', 35);
    IF v_locale !~ '^[A-Za-z]{2,8}(-[A-Za-z0-9]{1,8})*$' THEN
        PERFORM notify_input_error('locale', 'want a BCP 47 language tag such as en or pt-BR');
    END IF;
    v_timezone := notify_profile_text(p, 'timezone', 64);
    IF v_timezone = 'Local' THEN
        PERFORM notify_input_error('timezone', 'want an IANA time zone such as Europe/Paris');
    ELSIF v_timezone IS NOT NULL AND NOT notify_check_timezone(v_timezone) THEN
        PERFORM notify_input_error('timezone', 'unknown time zone; want an IANA name such as Europe/Paris');
    END IF;
    v_webhook_url := notify_profile_text(p, 'webhook_url', 2048);
    IF v_webhook_url !~ ('^[Hh][Tt][Tt][Pp][Ss]?://([^/?#@[:space:][:cntrl:]]*@)?'
                         '([A-Za-z0-9._~!$&''()*+,;=%-]+|\[[0-9A-Fa-f:.]+\])(:[0-9]*)?'
                         '([/?#][^[:space:][:cntrl:]]*)?$') THEN
        PERFORM notify_input_error('webhook_url', 'want an absolute http or https URL');
    END IF;
    v_phone := notify_profile_text(p, 'phone', 16);
    IF v_phone !~ '^\+[1-9][0-9]{7,14}$' THEN
        PERFORM notify_input_error('phone', 'want an E.164 phone number such as +14155550123 (a +, the country code, no spaces)');
    END IF;

    v_data := p -> 'data';
    IF jsonb_typeof(v_data) = 'null' THEN
        v_data := '{}';
    ELSIF jsonb_typeof(v_data) <> 'object' THEN
        PERFORM notify_input_error('data', 'want a JSON object, got JSON ' || jsonb_typeof(v_data));
    END IF;

    v_quiet := p -> 'quiet_hours';
    IF jsonb_typeof(v_quiet) = 'null' THEN
        v_quiet := NULL;
    ELSIF v_quiet IS NOT NULL THEN
        IF jsonb_typeof(v_quiet) <> 'object' OR v_quiet - 'start' - 'end' <> '{}' THEN
            PERFORM notify_input_error('quiet_hours', 'want {"start": "HH:MM", "end": "HH:MM"} or null');
        END IF;
        v_start := CASE WHEN jsonb_typeof(v_quiet -> 'start') = 'string' THEN v_quiet ->> 'start' END;
        v_end := CASE WHEN jsonb_typeof(v_quiet -> 'end') = 'string' THEN v_quiet ->> 'end' END;
        IF v_start IS NULL OR v_start !~ '^([01][0-9]|2[0-3]):[0-5][0-9]$' THEN
            PERFORM notify_input_error('quiet_hours', format('start: want HH:MM (24-hour), got %s',
                                                             coalesce((v_quiet -> 'start')::text, 'nothing')));
        ELSIF v_end IS NULL OR v_end !~ '^([01][0-9]|2[0-3]):[0-5][0-9]$' THEN
            PERFORM notify_input_error('quiet_hours', format('end: want HH:MM (24-hour), got %s',
                                                             coalesce((v_quiet -> 'end')::text, 'nothing')));
        ELSIF v_start = v_end THEN
            PERFORM notify_input_error('quiet_hours', 'start and end are the same time (omit quiet_hours for none)');
        END IF;
        v_quiet := jsonb_build_object('start', v_start, 'end', v_end);
    END IF;

    IF jsonb_typeof(p -> 'tokens_valid_after') = 'string' AND p ->> 'tokens_valid_after'
           ~ '^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt]([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]+)?([Zz]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$' THEN
        BEGIN
            v_after := (p ->> 'tokens_valid_after')::timestamptz;
        EXCEPTION WHEN datetime_field_overflow OR invalid_datetime_format THEN
            PERFORM notify_input_error('tokens_valid_after', 'want an RFC 3339 time or null');
        END;
    ELSIF jsonb_typeof(p -> 'tokens_valid_after') <> 'null' THEN
        PERFORM notify_input_error('tokens_valid_after', 'want an RFC 3339 time or null');
    END IF;

    INSERT INTO notify_recipients AS r (id, email, name, locale, timezone, webhook_url, phone, data, quiet_hours,
                                        tokens_valid_after)
    VALUES (notify_put_recipient.id, v_email, v_name, v_locale, v_timezone, v_webhook_url, v_phone,
            coalesce(v_data, '{}'), v_quiet, v_after)
    ON CONFLICT (id) DO UPDATE
    SET email = CASE WHEN p ? 'email' THEN EXCLUDED.email ELSE r.email END,
        name = CASE WHEN p ? 'name' THEN EXCLUDED.name ELSE r.name END,
        locale = CASE WHEN p ? 'locale' THEN EXCLUDED.locale ELSE r.locale END,
        timezone = CASE WHEN p ? 'timezone' THEN EXCLUDED.timezone ELSE r.timezone END,
        webhook_url = CASE WHEN p ? 'webhook_url' THEN EXCLUDED.webhook_url ELSE r.webhook_url END,
        -- A gone endpoint stays gone while the address stays the same: a new
        -- address deserves a new try.
        webhook_gone_at = CASE WHEN NOT p ? 'webhook_url' OR r.webhook_url IS NOT DISTINCT FROM EXCLUDED.webhook_url
                               THEN r.webhook_gone_at END,
        phone = CASE WHEN p ? 'phone' THEN EXCLUDED.phone ELSE r.phone END,
        data = CASE WHEN p ? 'data' THEN EXCLUDED.data ELSE r.data END,
        quiet_hours = CASE WHEN p ? 'quiet_hours' THEN EXCLUDED.quiet_hours ELSE r.quiet_hours END,
        tokens_valid_after = CASE WHEN p ? 'tokens_valid_after' THEN EXCLUDED.tokens_valid_after
                                  ELSE r.tokens_valid_after END,
        updated_at = now();
END
$$;
-- +goose StatementEnd

-- Every notify_* function of this schema is closed to PUBLIC; notifyd_app
-- is granted the five API functions by `notifyd migrate` (stores.Migrate).
-- +goose StatementBegin
DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN SELECT p.oid FROM pg_proc p
             WHERE p.pronamespace = current_schema()::regnamespace AND p.proname LIKE 'notify\_%' LOOP
        EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', f);
    END LOOP;
END
$$;
-- +goose StatementEnd

-- +goose Down
-- Back to functions that run with the caller's rights, executable by PUBLIC.
SELECT set_config('search_path', quote_ident(current_schema()) || ', pg_temp', true);
DROP FUNCTION notify_put_recipient(text, jsonb);
DROP FUNCTION notify_check_timezone(text);
DROP FUNCTION notify_profile_text(jsonb, text, integer);
DROP FUNCTION notify_send(text, text, text[], text[], jsonb, text[], text, timestamptz);
DROP FUNCTION notify_send_write(text, text, text, text[], text[], boolean, integer, text[], jsonb, timestamptz);
DROP FUNCTION notify_params_violation(jsonb, jsonb, text);
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION notify_send(notifier text, key text, recipients jsonb DEFAULT '[]', params jsonb DEFAULT '{}',
                                       topics text[] DEFAULT '{}', actor text DEFAULT NULL,
                                       send_at timestamptz DEFAULT NULL)
RETURNS TABLE (id uuid, duplicate boolean)
LANGUAGE plpgsql
SET search_path FROM CURRENT
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
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION notify_cancel(notifier text, key text) RETURNS integer
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
#variable_conflict use_column
DECLARE
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
        WHERE i.notification_id = v_id AND i.id <> ALL (v_kept)
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
CREATE OR REPLACE FUNCTION notify_subscribe(topic text, recipient text, reason text DEFAULT 'subscribed') RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
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
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION notify_unsubscribe(topic text, recipient text) RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
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
-- +goose StatementBegin
DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN SELECT p.oid FROM pg_proc p
             WHERE p.pronamespace = current_schema()::regnamespace AND p.proname LIKE 'notify\_%' LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO PUBLIC', f);
    END LOOP;
END
$$;
-- +goose StatementEnd
ALTER TABLE notify_notifiers DROP COLUMN params_check, DROP COLUMN params_schema;
