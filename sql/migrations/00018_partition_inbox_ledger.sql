-- The inbox (notify_inbox) and the ledger (notify_deliveries and its failed
-- attempts, notify_delivery_attempts) become tables partitioned by month of
-- notification id, so retention drops a whole month instead of deleting its
-- rows one by one: its work no longer grows with the volume of the tables.
--
-- Partition key: notification_id. Notification ids are UUIDv7 (their first
-- 48 bits are the enqueue time in milliseconds), so a range of ids is a range
-- of time, and a notification's id never changes: every replay of a fan-out
-- chunk writes the same partition, so the unique indexes, which a partitioned
-- table enforces per partition, keep every write exactly once:
--   inbox:      (notification_id, recipient), replacing (recipient, notifier,
--               key): a (notifier, key) names exactly one notification, whose
--               row is never deleted (retention only compacts it).
--   deliveries: (notification_id, channel, coalesce(recipient, '')), as before.
-- The partitioned tables have no primary key (it would have to include the
-- partition key: (id, notification_id)); each partition has its own primary
-- key on id instead, created with it. Ids are UUIDv7 made fresh for every
-- row, so they are unique across partitions by construction, and a lookup by
-- id alone (a send's claim and settle, inbox marks) probes each partition's
-- primary key, which the planner knows returns at most one row per id: a
-- non-unique (id, notification_id) index left it to the partition's
-- statistics, and a generic plan made while a new month's partition was
-- still small read the claim's rows by sequential scan (the email bench
-- with -profile: the claim took 48 ms a batch, against 7 ms unpartitioned;
-- with these primary keys 11-13 ms).
--
-- Layout, per table T:
--   T_legacy    everything before the cut-over: the rows of the table as it
--               was at this migration (FROM MINVALUE TO the cut-over).
--   T_pYYYYMM   one partition per UTC calendar month of notification id,
--               from the cut-over on, created ahead by notify_ledger_extend
--               (at migrate, at daemon start and by every retention run).
--   T_default   ids no partition covers (a clock far off, a daemon that did
--               not run for longer than the months created ahead); it should
--               stay empty and is trimmed by the batched retention deletes.
-- The cut-over is the instant of the migration (its transaction's start):
-- the rows there are were written for notifications enqueued before it, so
-- they move into T_legacy whole, and the first month partition covers the
-- rest of the current month from the cut-over (new rows go to month
-- partitions at once; T_legacy's newest row is as old as the migration, so
-- retention drops it as soon as the migration is older than the retention).
-- The daemon is stopped while the migration runs (nothing writes inbox or
-- ledger rows), and the migration holds the tables' exclusive locks. An
-- application may still enqueue (notify_send, or a client making its ids
-- with its own clock), but that writes notifications, not these tables; a
-- notification id below the cut-over made later simply lands in T_legacy,
-- which takes any id below its bound. Rows whose notification id is at or
-- past the cut-over (a clock ahead) are inserted through the partitioned
-- table instead of being moved.
--
-- notify_delivery_attempts loses its foreign key to notify_deliveries (a
-- foreign key to a partitioned table forbids dropping the referenced
-- partitions) and is partitioned the same way instead: a delivery's attempts
-- live in the month of its notification, and retention drops the attempts'
-- month with the deliveries' month. Statements that delete delivery rows
-- delete their attempts themselves (stores/retention.go, stores/erase.go).
--
-- Cost on an existing installation: one copy of the three tables (the old
-- tables are read once and written once into T_legacy, then their indexes are
-- built), under exclusive locks, inside the migration's transaction. The copy
-- into T_legacy (rather than an in-place ADD COLUMN and UPDATE) writes each row
-- once and leaves no dead tuples behind; the check constraint it is created
-- with lets ATTACH PARTITION skip its validation scan.

-- +goose Up

-- notify_uuid_floor is the smallest UUIDv7 of the millisecond of ts: the
-- bound of a partition starting at ts.
-- +goose StatementBegin
CREATE FUNCTION notify_uuid_floor(ts timestamptz) RETURNS uuid
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
SELECT (lpad(to_hex(floor(extract(epoch FROM ts) * 1000)::bigint), 12, '0') || '00000000000000000000')::uuid
$$;
-- +goose StatementEnd

-- notify_uuid_time is the instant in the first 48 bits of a UUIDv7.
-- +goose StatementBegin
CREATE FUNCTION notify_uuid_time(u uuid) RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
SELECT to_timestamp(('x' || lpad(left(replace(u::text, '-', ''), 12), 16, '0'))::bit(64)::bigint / 1000.0)
$$;
-- +goose StatementEnd

-- notify_partition_upper is the upper bound of partition part (NULL for a
-- default partition).
-- +goose StatementBegin
CREATE FUNCTION notify_partition_upper(part regclass) RETURNS uuid
LANGUAGE sql STABLE
AS $$
SELECT (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'TO \(''([0-9a-f-]+)''\)'))[1]::uuid
FROM pg_class c WHERE c.oid = part
$$;
-- +goose StatementEnd

-- The conversion: for each table, the partitioned table under the old name,
-- the old rows copied into T_legacy, attached below the cut-over.
-- +goose StatementBegin
DO $$
DECLARE
    cutover uuid := notify_uuid_floor(now());
BEGIN
    -- The inbox.
    ALTER TABLE notify_inbox RENAME TO notify_inbox_unpartitioned;
    ALTER INDEX notify_inbox_pkey RENAME TO notify_inbox_unpartitioned_pkey;
    ALTER TABLE notify_inbox_unpartitioned RENAME CONSTRAINT notify_inbox_recipient_notifier_key
        TO notify_inbox_unpartitioned_recipient_notifier_key;
    ALTER INDEX notify_inbox_page_idx RENAME TO notify_inbox_unpartitioned_page_idx;
    ALTER INDEX notify_inbox_unread_idx RENAME TO notify_inbox_unpartitioned_unread_idx;
    ALTER INDEX notify_inbox_notification_idx RENAME TO notify_inbox_unpartitioned_notification_idx;
    ALTER INDEX notify_inbox_created_idx RENAME TO notify_inbox_unpartitioned_created_idx;

    -- The default makes a row written by hand (without the column) a
    -- notification of its own; notifyd always writes the column.
    CREATE TABLE notify_inbox (
        LIKE notify_inbox_unpartitioned INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE,
        notification_id uuid NOT NULL DEFAULT notify_uuidv7()
    ) PARTITION BY RANGE (notification_id);

    EXECUTE format('CREATE TABLE notify_inbox_legacy (LIKE notify_inbox INCLUDING DEFAULTS INCLUDING STORAGE,
                        CONSTRAINT notify_inbox_legacy_cutover CHECK (notification_id < %L))', cutover);
    -- An item whose notification row is gone (deleted by hand: notifyd never
    -- deletes one) gets a stand-in id of time zero made from its (notifier,
    -- key), so the unique (notification_id, recipient) holds as the old key did.
    EXECUTE format('INSERT INTO notify_inbox_legacy
        SELECT i.*, x.nid
        FROM notify_inbox_unpartitioned i
        LEFT JOIN notify_notifications n ON n.notifier = i.notifier AND n.key = i.key
        CROSS JOIN LATERAL (SELECT coalesce(n.id, (%L || left(md5(i.notifier || chr(31) || i.key), 20))::uuid) AS nid) x
        WHERE x.nid < %L', '000000000000', cutover);
    ALTER TABLE notify_inbox_legacy ADD CONSTRAINT notify_inbox_legacy_pkey PRIMARY KEY (id);
    ALTER TABLE notify_inbox_legacy ADD CONSTRAINT notify_inbox_legacy_notification_recipient UNIQUE (notification_id, recipient);
    CREATE INDEX notify_inbox_legacy_page_idx ON notify_inbox_legacy (recipient, created_at DESC, id);
    CREATE INDEX notify_inbox_legacy_unread_idx ON notify_inbox_legacy (recipient) WHERE read_at IS NULL AND archived_at IS NULL;
    CREATE INDEX notify_inbox_legacy_notification_idx ON notify_inbox_legacy (notifier, key);
    CREATE INDEX notify_inbox_legacy_created_idx ON notify_inbox_legacy (created_at);

    ALTER TABLE notify_inbox ADD CONSTRAINT notify_inbox_notification_recipient UNIQUE (notification_id, recipient);
    CREATE INDEX notify_inbox_page_idx ON notify_inbox (recipient, created_at DESC, id);
    CREATE INDEX notify_inbox_unread_idx ON notify_inbox (recipient) WHERE read_at IS NULL AND archived_at IS NULL;
    CREATE INDEX notify_inbox_notification_idx ON notify_inbox (notifier, key);
    CREATE INDEX notify_inbox_created_idx ON notify_inbox (created_at);
    EXECUTE format('ALTER TABLE notify_inbox ATTACH PARTITION notify_inbox_legacy FOR VALUES FROM (MINVALUE) TO (%L)', cutover);
    CREATE TABLE notify_inbox_default PARTITION OF notify_inbox DEFAULT;
    ALTER TABLE notify_inbox_default ADD CONSTRAINT notify_inbox_default_pkey PRIMARY KEY (id);

    -- The ledger.
    ALTER TABLE notify_deliveries RENAME TO notify_deliveries_unpartitioned;
    ALTER INDEX notify_deliveries_pkey RENAME TO notify_deliveries_unpartitioned_pkey;
    ALTER INDEX notify_deliveries_identity RENAME TO notify_deliveries_unpartitioned_identity;
    ALTER INDEX notify_deliveries_digest_idx RENAME TO notify_deliveries_unpartitioned_digest_idx;
    ALTER INDEX notify_deliveries_digest_flight_idx RENAME TO notify_deliveries_unpartitioned_digest_flight_idx;
    ALTER INDEX notify_deliveries_retry_idx RENAME TO notify_deliveries_unpartitioned_retry_idx;
    ALTER INDEX notify_deliveries_unless_idx RENAME TO notify_deliveries_unpartitioned_unless_idx;
    ALTER INDEX notify_deliveries_scheduled_idx RENAME TO notify_deliveries_unpartitioned_scheduled_idx;
    ALTER INDEX notify_deliveries_batch_idx RENAME TO notify_deliveries_unpartitioned_batch_idx;
    ALTER TABLE notify_delivery_attempts RENAME TO notify_delivery_attempts_unpartitioned;
    ALTER INDEX notify_delivery_attempts_delivery_idx RENAME TO notify_delivery_attempts_unpartitioned_delivery_idx;

    CREATE TABLE notify_deliveries (
        LIKE notify_deliveries_unpartitioned INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE
    ) PARTITION BY RANGE (notification_id);
    EXECUTE format('CREATE TABLE notify_deliveries_legacy (LIKE notify_deliveries INCLUDING DEFAULTS INCLUDING STORAGE,
                        CONSTRAINT notify_deliveries_legacy_cutover CHECK (notification_id < %L))', cutover);
    EXECUTE format('INSERT INTO notify_deliveries_legacy SELECT * FROM notify_deliveries_unpartitioned WHERE notification_id < %L', cutover);
    ALTER TABLE notify_deliveries_legacy ADD CONSTRAINT notify_deliveries_legacy_pkey PRIMARY KEY (id);
    CREATE UNIQUE INDEX notify_deliveries_legacy_identity ON notify_deliveries_legacy (notification_id, channel, coalesce(recipient, ''));
    CREATE INDEX notify_deliveries_legacy_digest_idx ON notify_deliveries_legacy (recipient, created_at, id)
        WHERE status = 'digest_pending' AND digest_id IS NULL;
    CREATE INDEX notify_deliveries_legacy_digest_flight_idx ON notify_deliveries_legacy (digest_id)
        WHERE digest_id IS NOT NULL AND status IN ('digest_pending', 'digest_sending');
    CREATE INDEX notify_deliveries_legacy_retry_idx ON notify_deliveries_legacy (status, updated_at)
        WHERE status IN ('sending', 'failed', 'rate_limited', 'pending');
    CREATE INDEX notify_deliveries_legacy_unless_idx ON notify_deliveries_legacy (id) WHERE unless IS NOT NULL;
    CREATE INDEX notify_deliveries_legacy_scheduled_idx ON notify_deliveries_legacy (next_attempt_at) WHERE status = 'scheduled';
    CREATE INDEX notify_deliveries_legacy_batch_idx ON notify_deliveries_legacy (batch_id) WHERE batch_id IS NOT NULL;

    CREATE UNIQUE INDEX notify_deliveries_identity ON notify_deliveries (notification_id, channel, coalesce(recipient, ''));
    CREATE INDEX notify_deliveries_digest_idx ON notify_deliveries (recipient, created_at, id)
        WHERE status = 'digest_pending' AND digest_id IS NULL;
    CREATE INDEX notify_deliveries_digest_flight_idx ON notify_deliveries (digest_id)
        WHERE digest_id IS NOT NULL AND status IN ('digest_pending', 'digest_sending');
    CREATE INDEX notify_deliveries_retry_idx ON notify_deliveries (status, updated_at)
        WHERE status IN ('sending', 'failed', 'rate_limited', 'pending');
    CREATE INDEX notify_deliveries_unless_idx ON notify_deliveries (id) WHERE unless IS NOT NULL;
    CREATE INDEX notify_deliveries_scheduled_idx ON notify_deliveries (next_attempt_at) WHERE status = 'scheduled';
    CREATE INDEX notify_deliveries_batch_idx ON notify_deliveries (batch_id) WHERE batch_id IS NOT NULL;
    EXECUTE format('ALTER TABLE notify_deliveries ATTACH PARTITION notify_deliveries_legacy FOR VALUES FROM (MINVALUE) TO (%L)', cutover);
    CREATE TABLE notify_deliveries_default PARTITION OF notify_deliveries DEFAULT;
    ALTER TABLE notify_deliveries_default ADD CONSTRAINT notify_deliveries_default_pkey PRIMARY KEY (id);

    CREATE TABLE notify_delivery_attempts (
        LIKE notify_delivery_attempts_unpartitioned INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE,
        notification_id uuid NOT NULL
    ) PARTITION BY RANGE (notification_id);
    EXECUTE format('CREATE TABLE notify_delivery_attempts_legacy (LIKE notify_delivery_attempts INCLUDING DEFAULTS INCLUDING STORAGE,
                        CONSTRAINT notify_delivery_attempts_legacy_cutover CHECK (notification_id < %L))', cutover);
    EXECUTE format('INSERT INTO notify_delivery_attempts_legacy
        SELECT a.*, d.notification_id
        FROM notify_delivery_attempts_unpartitioned a JOIN notify_deliveries_unpartitioned d ON d.id = a.delivery_id
        WHERE d.notification_id < %L', cutover);
    CREATE INDEX notify_delivery_attempts_legacy_delivery_idx ON notify_delivery_attempts_legacy (delivery_id, attempt);
    CREATE INDEX notify_delivery_attempts_delivery_idx ON notify_delivery_attempts (delivery_id, attempt);
    EXECUTE format('ALTER TABLE notify_delivery_attempts ATTACH PARTITION notify_delivery_attempts_legacy FOR VALUES FROM (MINVALUE) TO (%L)', cutover);
    CREATE TABLE notify_delivery_attempts_default PARTITION OF notify_delivery_attempts DEFAULT;
END
$$;
-- +goose StatementEnd

-- notify_delivery_attempts_forget (00012_delivery_attempts.sql) deletes the
-- attempts of a delivery whose recipient changed (erasure), now by the whole
-- partition key; the trigger moves to the partitioned table.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION notify_delivery_attempts_forget() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    DELETE FROM notify_delivery_attempts WHERE delivery_id = NEW.id AND notification_id = NEW.notification_id;
    RETURN NULL;
END
$$;
-- +goose StatementEnd
-- +goose StatementBegin
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION notify_delivery_attempts_forget() SET search_path = %I, pg_temp', current_schema());
END
$$;
-- +goose StatementEnd
CREATE TRIGGER notify_deliveries_forget_attempts
    AFTER UPDATE OF recipient ON notify_deliveries
    FOR EACH ROW WHEN (OLD.recipient IS DISTINCT FROM NEW.recipient)
    EXECUTE FUNCTION notify_delivery_attempts_forget();

-- notify_ledger_extend creates the month partitions (notify_inbox_pYYYYMM,
-- notify_deliveries_pYYYYMM, notify_delivery_attempts_pYYYYMM) from the
-- current UTC month through `ahead` months after it that do not exist yet,
-- and returns how many it created. A month below the legacy partition's bound
-- is covered by it; the month the bound falls in gets a partition from the
-- bound to the month's end. A month whose rows already sit in the default partition
-- is left there (creating its partition would have to move them under an
-- exclusive lock): those rows are trimmed by the batched deletes.
-- +goose StatementBegin
CREATE FUNCTION notify_ledger_extend(ahead integer DEFAULT 2) RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    this_month timestamptz := date_trunc('month', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC';
    m timestamptz;
    t text;
    part text;
    lo uuid;
    hi uuid;
    legacy_hi uuid;
    found_default boolean;
    created integer := 0;
BEGIN
    -- DDL on these tables waits for an exclusive lock; never queue writers
    -- behind it for long. A run that times out is retried by the next one.
    PERFORM set_config('lock_timeout', '5s', true);
    FOREACH t IN ARRAY ARRAY['notify_inbox', 'notify_deliveries', 'notify_delivery_attempts'] LOOP
        legacy_hi := CASE WHEN to_regclass(quote_ident(t || '_legacy')) IS NOT NULL
                          THEN notify_partition_upper(to_regclass(quote_ident(t || '_legacy'))) END;
        FOR i IN 0 .. ahead LOOP
            m := this_month + make_interval(months => i);
            part := t || '_p' || to_char(m AT TIME ZONE 'UTC', 'YYYYMM');
            CONTINUE WHEN to_regclass(quote_ident(part)) IS NOT NULL;
            lo := notify_uuid_floor(m);
            hi := notify_uuid_floor(m + interval '1 month');
            CONTINUE WHEN legacy_hi IS NOT NULL AND hi <= legacy_hi;
            lo := greatest(lo, legacy_hi);
            EXECUTE format('SELECT EXISTS (SELECT 1 FROM %I WHERE notification_id >= %L AND notification_id < %L)',
                           t || '_default', lo, hi) INTO found_default;
            CONTINUE WHEN found_default;
            EXECUTE format('CREATE TABLE %I PARTITION OF %I FOR VALUES FROM (%L) TO (%L)', part, t, lo, hi);
            IF t <> 'notify_delivery_attempts' THEN
                EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I PRIMARY KEY (id)', part, part || '_pkey');
            END IF;
            created := created + 1;
        END LOOP;
    END LOOP;
    RETURN created;
END
$$;
-- +goose StatementEnd

-- notify_ledger_drop_before drops whole partitions of the inbox and of the
-- ledger (month partitions and the legacy one, never the default one) whose
-- range has ended (its upper bound is in the past) and whose newest row is
-- older than the table's cutoff (a partition with no rows: whose range ended
-- before the cutoff). The newest row, not the bound, decides: a notification
-- scheduled with send_at keeps the id of its enqueue, and its items are
-- written later into an older partition. The inbox's newest row is found by
-- its created_at index; a delivery's by its id (UUIDv7, made with the row),
-- through the primary key. A ledger partition that still holds an unsettled
-- row (the statuses of unsettledStatuses in stores/retention.go) is kept:
-- nothing disappears before it reached a terminal status. A delivery
-- partition is dropped with the attempts partition of the same range.
-- +goose StatementBegin
CREATE FUNCTION notify_ledger_drop_before(inbox_cutoff timestamptz, deliveries_cutoff timestamptz,
                                          OUT inbox_dropped integer, OUT deliveries_dropped integer)
LANGUAGE plpgsql
AS $$
DECLARE
    p record;
    newest timestamptz;
    unsettled boolean;
    suffix text;
BEGIN
    PERFORM set_config('lock_timeout', '5s', true);
    inbox_dropped := 0;
    deliveries_dropped := 0;
    FOR p IN
        SELECT c.relname, notify_uuid_time(notify_partition_upper(c.oid)) AS ends
        FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = 'notify_inbox'::regclass AND c.relname ~ '^notify_inbox_(p[0-9]{6}|legacy)$'
        ORDER BY ends
    LOOP
        CONTINUE WHEN p.ends > now() OR p.ends IS NULL;
        EXECUTE format('SELECT max(created_at) FROM %I', p.relname) INTO newest;
        CONTINUE WHEN coalesce(newest, p.ends) >= inbox_cutoff;
        EXECUTE format('DROP TABLE %I', p.relname);
        inbox_dropped := inbox_dropped + 1;
    END LOOP;
    FOR p IN
        SELECT c.relname, notify_uuid_time(notify_partition_upper(c.oid)) AS ends
        FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = 'notify_deliveries'::regclass AND c.relname ~ '^notify_deliveries_(p[0-9]{6}|legacy)$'
        ORDER BY ends
    LOOP
        CONTINUE WHEN p.ends > now() OR p.ends IS NULL;
        EXECUTE format('SELECT notify_uuid_time(id) FROM %I ORDER BY id DESC LIMIT 1', p.relname) INTO newest;
        CONTINUE WHEN coalesce(newest, p.ends) >= deliveries_cutoff;
        -- Each branch matches one of the partial indexes.
        EXECUTE format($q$SELECT EXISTS (SELECT 1 FROM %1$I WHERE status IN ('sending', 'failed', 'rate_limited', 'pending'))
                          OR EXISTS (SELECT 1 FROM %1$I WHERE status = 'scheduled')
                          OR EXISTS (SELECT 1 FROM %1$I WHERE status = 'digest_pending' AND digest_id IS NULL)
                          OR EXISTS (SELECT 1 FROM %1$I WHERE digest_id IS NOT NULL AND status IN ('digest_pending', 'digest_sending'))$q$,
                       p.relname) INTO unsettled;
        CONTINUE WHEN unsettled;
        suffix := substr(p.relname, length('notify_deliveries_') + 1);
        IF to_regclass(quote_ident('notify_delivery_attempts_' || suffix)) IS NOT NULL THEN
            EXECUTE format('DROP TABLE %I', 'notify_delivery_attempts_' || suffix);
        END IF;
        EXECUTE format('DROP TABLE %I', p.relname);
        deliveries_dropped := deliveries_dropped + 1;
    END LOOP;
END
$$;
-- +goose StatementEnd

SELECT notify_ledger_extend(2);

-- Rows at or past the cut-over (a clock ahead), routed through the
-- partitioned tables to their month or the default partition.
INSERT INTO notify_inbox
SELECT i.*, n.id
FROM notify_inbox_unpartitioned i
JOIN notify_notifications n ON n.notifier = i.notifier AND n.key = i.key
WHERE n.id >= notify_partition_upper('notify_inbox_legacy');
INSERT INTO notify_deliveries
SELECT * FROM notify_deliveries_unpartitioned WHERE notification_id >= notify_partition_upper('notify_deliveries_legacy');
INSERT INTO notify_delivery_attempts
SELECT a.*, d.notification_id
FROM notify_delivery_attempts_unpartitioned a JOIN notify_deliveries_unpartitioned d ON d.id = a.delivery_id
WHERE d.notification_id >= notify_partition_upper('notify_delivery_attempts_legacy');

DROP TABLE notify_delivery_attempts_unpartitioned;
DROP TABLE notify_deliveries_unpartitioned;
DROP TABLE notify_inbox_unpartitioned;

-- +goose Down
-- Back to unpartitioned tables: every row is copied into a plain table.
CREATE TABLE notify_inbox_unpartitioned (LIKE notify_inbox INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE);
ALTER TABLE notify_inbox_unpartitioned DROP COLUMN notification_id;
INSERT INTO notify_inbox_unpartitioned
SELECT id, recipient, notifier, key, category, reason, actor, title, body, url, params, created_at, seen_at, read_at, archived_at
FROM notify_inbox;
DROP TABLE notify_inbox;
ALTER TABLE notify_inbox_unpartitioned RENAME TO notify_inbox;
ALTER TABLE notify_inbox ADD CONSTRAINT notify_inbox_pkey PRIMARY KEY (id);
ALTER TABLE notify_inbox ADD CONSTRAINT notify_inbox_recipient_notifier_key UNIQUE (recipient, notifier, key);
CREATE INDEX notify_inbox_page_idx ON notify_inbox (recipient, created_at DESC, id);
CREATE INDEX notify_inbox_unread_idx ON notify_inbox (recipient) WHERE read_at IS NULL AND archived_at IS NULL;
CREATE INDEX notify_inbox_notification_idx ON notify_inbox (notifier, key);
CREATE INDEX notify_inbox_created_idx ON notify_inbox (created_at);

CREATE TABLE notify_deliveries_unpartitioned (LIKE notify_deliveries INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE);
INSERT INTO notify_deliveries_unpartitioned SELECT * FROM notify_deliveries;
CREATE TABLE notify_delivery_attempts_unpartitioned (LIKE notify_delivery_attempts INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE);
INSERT INTO notify_delivery_attempts_unpartitioned SELECT * FROM notify_delivery_attempts;
ALTER TABLE notify_delivery_attempts_unpartitioned DROP COLUMN notification_id;
DROP TABLE notify_delivery_attempts;
DROP TABLE notify_deliveries;
ALTER TABLE notify_deliveries_unpartitioned RENAME TO notify_deliveries;
ALTER TABLE notify_deliveries ADD CONSTRAINT notify_deliveries_pkey PRIMARY KEY (id);
CREATE UNIQUE INDEX notify_deliveries_identity ON notify_deliveries (notification_id, channel, coalesce(recipient, ''));
CREATE INDEX notify_deliveries_digest_idx ON notify_deliveries (recipient, created_at, id)
    WHERE status = 'digest_pending' AND digest_id IS NULL;
CREATE INDEX notify_deliveries_digest_flight_idx ON notify_deliveries (digest_id)
    WHERE digest_id IS NOT NULL AND status IN ('digest_pending', 'digest_sending');
CREATE INDEX notify_deliveries_retry_idx ON notify_deliveries (status, updated_at)
    WHERE status IN ('sending', 'failed', 'rate_limited', 'pending');
CREATE INDEX notify_deliveries_unless_idx ON notify_deliveries (id) WHERE unless IS NOT NULL;
CREATE INDEX notify_deliveries_scheduled_idx ON notify_deliveries (next_attempt_at) WHERE status = 'scheduled';
CREATE INDEX notify_deliveries_batch_idx ON notify_deliveries (batch_id) WHERE batch_id IS NOT NULL;
ALTER TABLE notify_delivery_attempts_unpartitioned RENAME TO notify_delivery_attempts;
ALTER TABLE notify_delivery_attempts ADD CONSTRAINT notify_delivery_attempts_delivery_id_fkey
    FOREIGN KEY (delivery_id) REFERENCES notify_deliveries (id) ON DELETE CASCADE;
CREATE INDEX notify_delivery_attempts_delivery_idx ON notify_delivery_attempts (delivery_id, attempt);

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION notify_delivery_attempts_forget() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    DELETE FROM notify_delivery_attempts WHERE delivery_id = NEW.id;
    RETURN NULL;
END
$$;
-- +goose StatementEnd
-- +goose StatementBegin
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION notify_delivery_attempts_forget() SET search_path = %I, pg_temp', current_schema());
END
$$;
-- +goose StatementEnd
CREATE TRIGGER notify_deliveries_forget_attempts
    AFTER UPDATE OF recipient ON notify_deliveries
    FOR EACH ROW WHEN (OLD.recipient IS DISTINCT FROM NEW.recipient)
    EXECUTE FUNCTION notify_delivery_attempts_forget();

DROP FUNCTION notify_ledger_drop_before(timestamptz, timestamptz);
DROP FUNCTION notify_ledger_extend(integer);
DROP FUNCTION notify_partition_upper(regclass);
DROP FUNCTION notify_uuid_time(uuid);
DROP FUNCTION notify_uuid_floor(timestamptz);
