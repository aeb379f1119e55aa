-- The inbox change log becomes a table partitioned by day (created_at, UTC),
-- so retention drops a whole day's partition instead of deleting its rows one
-- by one: the work of a retention run no longer grows with the volume of the
-- log (no per-row WAL, no dead tuples for vacuum, no index cleanup).
--
-- Layout: one partition per UTC day, notify_inbox_changes_YYYYMMDD, created
-- ahead by notify_inbox_changes_extend (at migrate, at daemon start and by
-- every retention run), and a DEFAULT partition, notify_inbox_changes_default,
-- for rows no day partition covers (a clock far off, or a daemon that did not
-- run for longer than the days created ahead). Retention drops a day
-- partition once its whole day is older than retention.changes
-- (notify_inbox_changes_drop_before); rows in the default partition are
-- deleted in batches as before. A partition's rows can therefore outlive the
-- cutoff by up to a day.
--
-- The primary key becomes (seq, created_at): a partitioned table's unique
-- indexes must include the partition key. seq stays unique on its own by
-- construction (the writer's transaction id and a per-transaction counter).
--
-- Existing rows are copied into the new table (the log holds retention.changes
-- of rows, seven days by default); the copy holds an exclusive lock on the log
-- for its duration, so streams pause while it runs.

-- +goose Up
ALTER TABLE notify_inbox_changes RENAME TO notify_inbox_changes_unpartitioned;
ALTER INDEX notify_inbox_changes_pkey RENAME TO notify_inbox_changes_unpartitioned_pkey;
ALTER INDEX notify_inbox_changes_recipient_idx RENAME TO notify_inbox_changes_unpartitioned_recipient_idx;
ALTER INDEX notify_inbox_changes_many_idx RENAME TO notify_inbox_changes_unpartitioned_many_idx;
-- Keep the sequence the first migrations numbered rows with, for the way down.
ALTER SEQUENCE notify_inbox_changes_seq_seq OWNED BY NONE;

CREATE TABLE notify_inbox_changes (
    LIKE notify_inbox_changes_unpartitioned INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE,
    PRIMARY KEY (seq, created_at)
) PARTITION BY RANGE (created_at);
CREATE INDEX notify_inbox_changes_recipient_idx ON notify_inbox_changes (recipient, seq);
CREATE INDEX notify_inbox_changes_many_idx ON notify_inbox_changes (seq) WHERE recipient IS NULL;
CREATE TABLE notify_inbox_changes_default PARTITION OF notify_inbox_changes DEFAULT;

-- notify_inbox_changes_extend creates the day partitions from yesterday
-- through `ahead` days after today (UTC) that do not exist yet, and returns
-- how many it created. A day whose rows already sit in the default partition
-- is left there (creating its partition would have to move them under an
-- exclusive lock): those rows are trimmed by the batched delete.
-- +goose StatementBegin
CREATE FUNCTION notify_inbox_changes_extend(ahead integer DEFAULT 7) RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    today date := (now() AT TIME ZONE 'UTC')::date;
    d date;
    part text;
    created integer := 0;
BEGIN
    -- DDL on the log waits for an exclusive lock; never queue writers behind
    -- it for long. A run that times out is retried by the next one.
    PERFORM set_config('lock_timeout', '5s', true);
    FOR d IN SELECT generate_series(today - 1, today + ahead, interval '1 day')::date LOOP
        part := 'notify_inbox_changes_' || to_char(d, 'YYYYMMDD');
        CONTINUE WHEN to_regclass(quote_ident(part)) IS NOT NULL;
        CONTINUE WHEN EXISTS (SELECT 1 FROM notify_inbox_changes_default
                              WHERE created_at >= (d::timestamp AT TIME ZONE 'UTC')
                                AND created_at < ((d + 1)::timestamp AT TIME ZONE 'UTC'));
        EXECUTE format('CREATE TABLE %I PARTITION OF notify_inbox_changes FOR VALUES FROM (%L) TO (%L)',
                       part, d::timestamp AT TIME ZONE 'UTC', (d + 1)::timestamp AT TIME ZONE 'UTC');
        created := created + 1;
    END LOOP;
    RETURN created;
END
$$;
-- +goose StatementEnd

-- notify_inbox_changes_drop_before drops every day partition whose day ended
-- at or before cutoff, recording the newest seq it dropped in
-- notify_inbox_changes_trimmed first (a stream whose cursor is older is told
-- to reset), and returns how many partitions it dropped and the start of the
-- oldest day partition left (NULL when none is left): rows older than that
-- can only be in the default partition.
-- +goose StatementBegin
CREATE FUNCTION notify_inbox_changes_drop_before(cutoff timestamptz, OUT dropped integer, OUT oldest_kept timestamptz)
LANGUAGE plpgsql
AS $$
DECLARE
    p record;
    newest bigint;
BEGIN
    PERFORM set_config('lock_timeout', '5s', true);
    dropped := 0;
    FOR p IN
        SELECT c.relname, to_date(right(c.relname, 8), 'YYYYMMDD') AS day
        FROM pg_inherits i
        JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = 'notify_inbox_changes'::regclass
          AND c.relname ~ '^notify_inbox_changes_[0-9]{8}$'
        ORDER BY day
    LOOP
        IF ((p.day + 1)::timestamp AT TIME ZONE 'UTC') > cutoff THEN
            oldest_kept := p.day::timestamp AT TIME ZONE 'UTC';
            EXIT;
        END IF;
        EXECUTE format('SELECT max(seq) FROM %I', p.relname) INTO newest;
        IF newest IS NOT NULL THEN
            UPDATE notify_inbox_changes_trimmed SET through = greatest(through, newest);
        END IF;
        EXECUTE format('DROP TABLE %I', p.relname);
        dropped := dropped + 1;
    END LOOP;
END
$$;
-- +goose StatementEnd

SELECT notify_inbox_changes_extend(7);
-- Days of the rows being copied get partitions too (older ones go to the
-- default partition and are trimmed by the next retention run).
-- +goose StatementBegin
DO $$
DECLARE
    d date;
BEGIN
    FOR d IN SELECT DISTINCT (created_at AT TIME ZONE 'UTC')::date FROM notify_inbox_changes_unpartitioned
             WHERE created_at >= now() - interval '31 days' LOOP
        IF to_regclass(quote_ident('notify_inbox_changes_' || to_char(d, 'YYYYMMDD'))) IS NULL THEN
            EXECUTE format('CREATE TABLE %I PARTITION OF notify_inbox_changes FOR VALUES FROM (%L) TO (%L)',
                           'notify_inbox_changes_' || to_char(d, 'YYYYMMDD'),
                           d::timestamp AT TIME ZONE 'UTC', (d + 1)::timestamp AT TIME ZONE 'UTC');
        END IF;
    END LOOP;
END $$;
-- +goose StatementEnd
INSERT INTO notify_inbox_changes SELECT * FROM notify_inbox_changes_unpartitioned;
DROP TABLE notify_inbox_changes_unpartitioned;

-- +goose Down
CREATE TABLE notify_inbox_changes_unpartitioned (
    LIKE notify_inbox_changes INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE,
    PRIMARY KEY (seq)
);
INSERT INTO notify_inbox_changes_unpartitioned SELECT * FROM notify_inbox_changes;
DROP TABLE notify_inbox_changes;
DROP FUNCTION notify_inbox_changes_drop_before(timestamptz);
DROP FUNCTION notify_inbox_changes_extend(integer);
ALTER TABLE notify_inbox_changes_unpartitioned RENAME TO notify_inbox_changes;
ALTER INDEX notify_inbox_changes_unpartitioned_pkey RENAME TO notify_inbox_changes_pkey;
CREATE INDEX notify_inbox_changes_recipient_idx ON notify_inbox_changes (recipient, seq);
CREATE INDEX notify_inbox_changes_many_idx ON notify_inbox_changes (seq) WHERE recipient IS NULL;
ALTER SEQUENCE notify_inbox_changes_seq_seq OWNED BY notify_inbox_changes.seq;
