-- Tenants: one notifyd for a B2B product's many customers (docs/tenants.md).
--
-- notify_tenants holds each tenant: its name, its branding (logo_url,
-- primary_color, email_from: templates see them as .Tenant.Branding, and
-- email_from is the From of its emails) and its default preference rules
-- ([{scope, channel, mode}], the layer between a recipient's global rules
-- and the notifier's defaults). A recipient's rules scoped to a tenant are
-- in notify_tenant_preferences (they beat the recipient's global rules for
-- that tenant's notifications). Tenant API keys are stored as the SHA-256 of
-- the key, never the key; a revoked key keeps its row (revoked_at) so that
-- the console can say when it was revoked.
--
-- A notification may name its tenant (notify_send(..., tenant => 'acme'));
-- its inbox items and deliveries carry it. The column is NULL for every row
-- without a tenant, which the partial indexes leave out: a notifyd without
-- tenants writes no index entry more per inbox item or delivery. Deleting a
-- tenant erases its inbox items, deliveries (with their attempts),
-- notifications, scoped rules and keys in bounded batches by these indexes
-- (stores.EraseTenantBatch), then its row.
--
-- notify_send, notify_send_write and notify_enqueue take the tenant: their
-- signatures change, so the old ones are dropped and the new ones created
-- (and closed to PUBLIC; `notifyd migrate` grants notify_send's overloads to
-- notifyd_app again). Each function is given whole, as in sql/functions/.

-- +goose Up
SELECT set_config('search_path', quote_ident(current_schema()) || ', pg_catalog, pg_temp', true);

CREATE TABLE notify_tenants (
    id          text COLLATE "C" PRIMARY KEY CHECK (octet_length(id) BETWEEN 1 AND 255 AND id !~ '[[:cntrl:]]'),
    name        text NOT NULL DEFAULT '',
    branding    jsonb NOT NULL DEFAULT '{}',
    preferences jsonb NOT NULL DEFAULT '[]',
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE notify_tenant_preferences (
    recipient text COLLATE "C" NOT NULL,
    tenant    text COLLATE "C" NOT NULL,
    scope     text NOT NULL,
    channel   text NOT NULL,
    mode      text NOT NULL,
    PRIMARY KEY (recipient, tenant, scope, channel)
);
CREATE INDEX notify_tenant_preferences_tenant_idx ON notify_tenant_preferences (tenant);

CREATE TABLE notify_tenant_keys (
    id         uuid PRIMARY KEY,
    tenant     text COLLATE "C" NOT NULL,
    hash       bytea NOT NULL UNIQUE,
    -- Requests per second and burst of this key; NULL: http.rate.tenant_key.
    rate       double precision CHECK (rate > 0),
    burst      integer CHECK (burst > 0),
    created_at timestamptz NOT NULL DEFAULT now(),
    revoked_at timestamptz
);
CREATE INDEX notify_tenant_keys_tenant_idx ON notify_tenant_keys (tenant);

ALTER TABLE notify_notifications ADD COLUMN tenant text COLLATE "C";
ALTER TABLE notify_inbox ADD COLUMN tenant text COLLATE "C";
ALTER TABLE notify_deliveries ADD COLUMN tenant text COLLATE "C";
CREATE INDEX notify_notifications_tenant_idx ON notify_notifications (tenant, created_at) WHERE tenant IS NOT NULL;
-- A tenant's inbox page of a recipient (a token with a tenant claim, or
-- ?tenant=), and the tenant's erasure.
CREATE INDEX notify_inbox_tenant_idx ON notify_inbox (tenant, recipient, created_at DESC, id) WHERE tenant IS NOT NULL;
-- The console's and a tenant key's ledger, and the tenant's erasure.
CREATE INDEX notify_deliveries_tenant_idx ON notify_deliveries (tenant, created_at) WHERE tenant IS NOT NULL;

DROP FUNCTION notify_send(text, text, jsonb, jsonb, text[], text, timestamptz);
DROP FUNCTION notify_send(text, text, text[], text[], jsonb, text[], text, timestamptz);
DROP FUNCTION notify_send_write(text, text, text, text[], text[], boolean, integer, text[], jsonb, timestamptz);
DROP FUNCTION notify_enqueue(uuid, text, text, text, text[], text[], text[], jsonb, timestamptz, boolean);

-- +goose StatementBegin
-- notify_enqueue writes a validated notification and its notify.fanout River
-- job in one statement, and reports the id and whether (notifier, key)
-- already existed, in which case nothing was written. recipients and reasons
-- are parallel; inline_sorted promises recipients are in byte order with no
-- id twice (the fan-out then keeps the list as written); tenant is the
-- checked tenant or NULL. It is the one
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
                                          p_tenant text, OUT id uuid, OUT duplicate boolean)
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
DECLARE
    woke bigint;
BEGIN
    WITH ins AS (
        INSERT INTO notify_notifications AS n (id, notifier, key, actor, recipients, reasons, topics, params,
                                               send_at, status, inline_sorted, tenant)
        VALUES (p_id, p_notifier, p_key, nullif(p_actor, ''), coalesce(p_recipients, '{}'),
                coalesce(p_reasons, '{}'), coalesce(p_topics, '{}'), coalesce(p_params, '{}'), p_send_at,
                CASE WHEN p_send_at > now() THEN 'scheduled' ELSE 'pending' END, coalesce(p_inline_sorted, false),
                p_tenant)
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
-- notify_send_write is the part of a send both notify_send overloads share,
-- after they checked the notifier, key, actor and audience: it checks the
-- recipient ids and reasons (unless sorted says the caller already checked
-- them, sorted them by id in byte order and counted the distinct ones), the
-- topics (then sorted, each once), the params and the tenant (one of
-- notify_tenants; NULL or '' for none), looks the notifier up in
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
                               p_send_at, v_distinct = cardinality(v_ids), v_tenant);
    id := v_result.id;
    duplicate := v_result.duplicate;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
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
                                  v_distinct, notify_send.topics, notify_send.params, notify_send.send_at,
                                  notify_send.tenant);
    id := v_result.id;
    duplicate := v_result.duplicate;
    RETURN NEXT;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
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
                                  notify_send.send_at, notify_send.tenant);
    id := v_result.id;
    duplicate := v_result.duplicate;
    RETURN NEXT;
END
$$;
-- +goose StatementEnd

REVOKE EXECUTE ON FUNCTION notify_enqueue(uuid, text, text, text, text[], text[], text[], jsonb, timestamptz, boolean, text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION notify_send_write(text, text, text, text[], text[], boolean, integer, text[], jsonb, timestamptz, text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION notify_send(text, text, jsonb, jsonb, text[], text, timestamptz, text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION notify_send(text, text, text[], text[], jsonb, text[], text, timestamptz, text) FROM PUBLIC;

-- +goose Down
SELECT set_config('search_path', quote_ident(current_schema()) || ', pg_catalog, pg_temp', true);

DROP FUNCTION notify_send(text, text, jsonb, jsonb, text[], text, timestamptz, text);
DROP FUNCTION notify_send(text, text, text[], text[], jsonb, text[], text, timestamptz, text);
DROP FUNCTION notify_send_write(text, text, text, text[], text[], boolean, integer, text[], jsonb, timestamptz, text);
DROP FUNCTION notify_enqueue(uuid, text, text, text, text[], text[], text[], jsonb, timestamptz, boolean, text);

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
-- +goose StatementEnd

-- +goose StatementBegin
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

REVOKE EXECUTE ON FUNCTION notify_enqueue(uuid, text, text, text, text[], text[], text[], jsonb, timestamptz, boolean) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION notify_send_write(text, text, text, text[], text[], boolean, integer, text[], jsonb, timestamptz) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION notify_send(text, text, jsonb, jsonb, text[], text, timestamptz) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION notify_send(text, text, text[], text[], jsonb, text[], text, timestamptz) FROM PUBLIC;

DROP INDEX notify_deliveries_tenant_idx;
DROP INDEX notify_inbox_tenant_idx;
DROP INDEX notify_notifications_tenant_idx;
ALTER TABLE notify_deliveries DROP COLUMN tenant;
ALTER TABLE notify_inbox DROP COLUMN tenant;
ALTER TABLE notify_notifications DROP COLUMN tenant;
DROP TABLE notify_tenant_keys;
DROP TABLE notify_tenant_preferences;
DROP TABLE notify_tenants;
