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
-- what is wrong with it, so a valid send pays for one query per list. Every
-- name in it is qualified with the schema it was installed in.
CREATE OR REPLACE FUNCTION notify_send(notifier text, key text, recipients jsonb DEFAULT '[]', params jsonb DEFAULT '{}',
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
        PERFORM public.notify_input_error('notifier', 'is required');
    ELSIF octet_length(notify_send.notifier) > 255 THEN
        PERFORM public.notify_input_error('notifier', 'longer than 255 bytes');
    END IF;
    IF notify_send.key IS NULL OR notify_send.key = '' THEN
        PERFORM public.notify_input_error('key', 'is required');
    ELSIF octet_length(notify_send.key) > 255 THEN
        PERFORM public.notify_input_error('key', 'longer than 255 bytes');
    END IF;
    IF octet_length(notify_send.actor) > 255 THEN
        PERFORM public.notify_input_error('actor', 'longer than 255 bytes');
    END IF;
    IF jsonb_typeof(v_recipients) = 'null' THEN
        v_recipients := '[]';
    ELSIF jsonb_typeof(v_recipients) <> 'array' THEN
        PERFORM public.notify_input_error('recipients', 'want a JSON array, got JSON ' || jsonb_typeof(v_recipients));
    END IF;
    IF jsonb_array_length(v_recipients) = 0 AND cardinality(v_topics) = 0 THEN
        PERFORM public.notify_input_error('recipients', 'give at least one recipient or topic');
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
            PERFORM public.notify_input_error(coalesce(v_field, 'recipients'), coalesce(v_message, 'malformed'));
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
            PERFORM public.notify_input_error(coalesce(v_field, 'topics'), coalesce(v_message, 'malformed'));
        END IF;
    END IF;

    IF jsonb_typeof(v_params) = 'null' THEN
        v_params := '{}';
    ELSIF jsonb_typeof(v_params) <> 'object' THEN
        PERFORM public.notify_input_error('params', 'want a JSON object');
    END IF;

    SELECT c.max_recipients INTO v_max FROM public.notify_notifiers c WHERE c.name = notify_send.notifier;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown notifier "%"', notify_send.notifier USING
            ERRCODE = '22023', COLUMN = 'notifier',
            HINT = 'notify_send accepts the notifiers in public.notify_notifiers, which notifyd publishes from its config at start and at `notifyd migrate`';
    END IF;
    IF v_distinct > v_max THEN
        RAISE EXCEPTION 'too many recipients: % inline recipients, notifier % allows %', v_distinct,
            notify_send.notifier, v_max USING ERRCODE = '22023', COLUMN = 'recipients';
    END IF;

    -- An assignment, not a query: PL/pgSQL evaluates it without starting an
    -- executor.
    v_result := public.notify_enqueue(public.notify_uuidv7(), notify_send.notifier, notify_send.key, notify_send.actor, v_ids,
                               v_reasons, v_topics, v_params, notify_send.send_at, v_distinct = cardinality(v_ids));
    id := v_result.id;
    duplicate := v_result.duplicate;
    RETURN NEXT;
END
$$;
