-- notify_inbox_changes_drop_before drops every day partition whose day ended
-- at or before cutoff, recording the newest seq it dropped in
-- notify_inbox_changes_trimmed first (a stream whose cursor is older is told
-- to reset), and returns how many partitions it dropped and the start of the
-- oldest day partition left (NULL when none is left): rows older than that
-- can only be in the default partition.
CREATE OR REPLACE FUNCTION notify_inbox_changes_drop_before(cutoff timestamptz, OUT dropped integer,
                                                            OUT oldest_kept timestamptz)
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
