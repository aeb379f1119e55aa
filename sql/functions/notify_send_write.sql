-- notify_send_write is the part of a send both notify_send overloads share,
-- after they checked the notifier, key, actor and audience: it checks the
-- recipient ids and reasons (unless sorted says the caller already checked
-- them, sorted them by id in byte order and counted the distinct ones), the
-- topics (then sorted, each once), the params, send_at and the tenant (one of
-- notify_tenants; NULL or '' for none), looks the notifier up in
-- the catalog, checks the params against the checkable part of its JSON
-- Schema and max_recipients, and writes through notify_enqueue.
--
-- The sizes are the HTTP API's, read from notify_api_limits (the daemon
-- publishes http.max_topics and http.max_body there) with the catalog, in
-- one query before any list is sorted: at most 10 times max_recipients
-- recipient ids before duplicates collapse, at most max_topics topics, params
-- of at most max_body bytes as JSON text. send_at is finite and within 10
-- years of now: an infinite time stops River's fetch and rescuer.
--
-- The params check is the notifier's compiled SQL/JSON path predicate
-- (notify_notifiers.params_check, written when the catalog is published):
-- one evaluation when it holds. Only when it fails does
-- notify_params_violation walk the checks (params_schema) to decide: it finds
-- the first failing value and says what is wrong with it, or finds none
-- (the predicate leaves uniqueItems, oneOf and not to the walk).
--
-- It trusts that its caller checked the rest; only notify_send calls it, and
-- it runs in notify_send's pinned search_path.
CREATE OR REPLACE FUNCTION notify_send_write(p_notifier text, p_key text, p_actor text, p_ids text[], p_reasons text[],
                                             p_sorted boolean, p_distinct integer, p_topics text[], p_params jsonb,
                                             p_send_at timestamptz, p_tenant text, OUT id uuid, OUT duplicate boolean)
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
DECLARE
    v_ids text[] := coalesce(p_ids, '{}');
    v_reasons text[] := coalesce(p_reasons, '{}');
    v_distinct integer := p_distinct;
    v_topics text[] := coalesce(p_topics, '{}');
    v_params jsonb := coalesce(p_params, '{}');
    v_tenant text := nullif(p_tenant, '');
    v_ok boolean;
    v_field text;
    v_message text;
    v_max integer;
    v_check jsonpath;
    v_known boolean;
    v_max_topics integer;
    v_max_body bigint;
    v_violation text[];
    v_result record;
BEGIN
    SELECT l.max_topics, l.max_body, c.max_recipients, c.params_check, c.name IS NOT NULL
    INTO v_max_topics, v_max_body, v_max, v_check, v_known
    FROM notify_api_limits l
    LEFT JOIN notify_notifiers c ON c.name = p_notifier;

    IF NOT p_sorted AND v_known AND cardinality(v_ids) > 10 * v_max THEN
        RAISE EXCEPTION 'too many recipients: % recipients listed, notifier % allows at most % before duplicates are removed (10 times max_recipients)',
            cardinality(v_ids), p_notifier, 10 * v_max USING ERRCODE = '22023', COLUMN = 'recipients';
    END IF;
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

    IF cardinality(v_topics) > v_max_topics THEN
        PERFORM notify_input_error('topics', format('%s topics, http.max_topics allows %s', cardinality(v_topics),
                                                    v_max_topics));
    ELSIF cardinality(v_topics) = 1 AND octet_length(v_topics[1]) BETWEEN 1 AND 255 THEN
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
    ELSIF octet_length(v_params::text) > v_max_body THEN
        PERFORM notify_input_error('params', format('larger than %s bytes as JSON (http.max_body)', v_max_body));
    END IF;

    IF NOT isfinite(p_send_at) OR p_send_at NOT BETWEEN now() - interval '10 years' AND now() + interval '10 years' THEN
        PERFORM notify_input_error('send_at', 'want a time within 10 years of now');
    END IF;

    IF v_tenant IS NOT NULL THEN
        IF octet_length(v_tenant) > 255 THEN
            PERFORM notify_input_error('tenant', 'longer than 255 bytes');
        ELSIF v_tenant ~ '[[:cntrl:]]' THEN
            PERFORM notify_input_error('tenant', 'contains a control character');
        ELSIF NOT EXISTS (SELECT 1 FROM notify_tenants t WHERE t.id = v_tenant) THEN
            PERFORM notify_input_error('tenant', format('unknown tenant %s (PUT /v1/tenants/{id} creates it)',
                                                        to_json(v_tenant)));
        END IF;
    END IF;

    IF v_known IS NOT TRUE THEN
        RAISE EXCEPTION 'unknown notifier "%"', p_notifier USING
            ERRCODE = '22023', COLUMN = 'notifier',
            HINT = 'notify_send accepts the notifiers in notify_notifiers, which notifyd publishes from its config at start and at `notifyd migrate`';
    END IF;
    IF v_check IS NOT NULL AND (v_params @@ v_check) IS NOT TRUE THEN
        v_violation := notify_params_violation((SELECT c.params_schema FROM notify_notifiers c WHERE c.name = p_notifier),
                                               v_params);
        IF v_violation IS NOT NULL THEN
            RAISE EXCEPTION '%: params%: %', p_notifier, CASE WHEN v_violation[1] = '' THEN '' ELSE ' ' || v_violation[1] END,
                v_violation[2] USING ERRCODE = '22023', COLUMN = 'params', DETAIL = v_violation[1];
        END IF;
    END IF;
    IF v_distinct > v_max THEN
        RAISE EXCEPTION 'too many recipients: % inline recipients, notifier % allows %', v_distinct,
            p_notifier, v_max USING ERRCODE = '22023', COLUMN = 'recipients';
    END IF;

    -- An assignment, not a query: PL/pgSQL evaluates it without starting an
    -- executor.
    v_result := notify_enqueue(notify_uuidv7(), p_notifier, p_key, p_actor, v_ids, v_reasons, v_topics, v_params,
                               p_send_at, v_distinct = cardinality(v_ids), v_tenant);
    id := v_result.id;
    duplicate := v_result.duplicate;
END
$$;
