SELECT set_config('search_path', quote_ident(current_schema()) || ', pg_catalog, pg_temp', true);
-- notify_send enqueues a notification inside the caller's transaction: it
-- exists if and only if that transaction commits, and (tenant, notifier,
-- key) is one notification forever (a second send returns the first id with
-- duplicate): keys are per tenant, and no tenant is a space of its own.
-- A notifier with an audience (notify_notifiers.audience: the daemon reads
-- its recipients from the application's tables at fan-out) may be sent with
-- no recipients and no topics; any other needs at least one of them.
-- Malformed input, a notifier the daemon has not published and params that
-- break the checkable part of the notifier's JSON Schema raise SQLSTATE 22023
-- naming the field, and write nothing.
--
-- Two overloads. The first is the one applications call: recipients is the
-- HTTP API's JSON list, "u1" or {"id": "u2", "reason": "author"}. The second
-- takes the ids and their reasons as parallel arrays (SendTx calls it: no
-- JSON to build and parse); it has no defaults, so a call with eight
-- arguments or fewer always means the first.
--
-- tenant names the tenant the notification is sent for (NULL or '' for
-- none): a tenant that is not in notify_tenants raises 22023 naming the
-- field tenant. Its inbox items and deliveries carry it, and its recipients'
-- preferences resolve with the tenant's layers.
--
-- The checks are the Go API's (SendTx), in its order, with its words: the
-- notifier, key and actor and the recipients here, then, in
-- notify_send_write, the topics, the params, send_at, the tenant, the
-- catalog, max_recipients and the params schema. Sizes and counts are the
-- HTTP API's (notify_send_write says which), and send_at is within 10 years
-- of now. Each list is read in one pass that also tells whether
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
                                       send_at timestamptz DEFAULT NULL, tenant text DEFAULT NULL)
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
    v_max integer;
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
    IF jsonb_array_length(v_recipients) = 0 AND coalesce(cardinality(notify_send.topics), 0) = 0
       AND NOT EXISTS (SELECT 1 FROM notify_notifiers c WHERE c.name = notify_send.notifier AND c.audience) THEN
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
        -- The HTTP API's bound on the list before duplicates collapse, before
        -- it is sorted (max_recipients is at least 1: a list of 10 or fewer
        -- needs no look-up).
        IF jsonb_array_length(v_recipients) > 10 THEN
            SELECT 10 * c.max_recipients INTO v_max FROM notify_notifiers c WHERE c.name = notify_send.notifier;
            IF jsonb_array_length(v_recipients) > v_max THEN
                RAISE EXCEPTION 'too many recipients: % recipients listed, notifier % allows at most % before duplicates are removed (10 times max_recipients)',
                    jsonb_array_length(v_recipients), notify_send.notifier, v_max USING ERRCODE = '22023', COLUMN = 'recipients';
            END IF;
        END IF;
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
                                  v_distinct, notify_send.topics, notify_send.params, notify_send.send_at,
                                  notify_send.tenant);
    id := v_result.id;
    duplicate := v_result.duplicate;
    RETURN NEXT;
END
$$;

CREATE OR REPLACE FUNCTION notify_send(notifier text, key text, recipient_ids text[], reasons text[], params jsonb,
                                       topics text[], actor text, send_at timestamptz, tenant text)
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
    IF coalesce(cardinality(notify_send.recipient_ids), 0) = 0 AND coalesce(cardinality(notify_send.topics), 0) = 0
       AND NOT EXISTS (SELECT 1 FROM notify_notifiers c WHERE c.name = notify_send.notifier AND c.audience) THEN
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
                                  notify_send.send_at, notify_send.tenant);
    id := v_result.id;
    duplicate := v_result.duplicate;
    RETURN NEXT;
END
$$;
