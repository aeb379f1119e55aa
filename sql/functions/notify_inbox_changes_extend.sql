-- notify_inbox_changes_extend creates the day partitions of
-- notify_inbox_changes from yesterday through `ahead` days after today (UTC)
-- that do not exist yet, and returns how many it created. A day whose rows
-- already sit in the default partition is left there (creating its partition
-- would have to move them under an exclusive lock): those rows are trimmed by
-- the batched delete.
CREATE OR REPLACE FUNCTION notify_inbox_changes_extend(ahead integer DEFAULT 7) RETURNS integer
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
