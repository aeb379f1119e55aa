-- notify_inbox_change_seq numbers the change rows of the current
-- transaction (the default of notify_inbox_changes.seq): the transaction's
-- id shifted left 16 bits, plus a counter. The counter is a
-- transaction-local setting: it starts at 0 in every transaction and is
-- rolled back with a rolled-back savepoint, together with the rows it
-- numbered.
CREATE OR REPLACE FUNCTION notify_inbox_change_seq() RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    n integer := coalesce(nullif(current_setting('notifyd.inbox_change_n', true), ''), '0')::integer;
    ignored text;
BEGIN
    IF n >= 65536 THEN
        RAISE EXCEPTION 'more than 65536 inbox change-log rows in one transaction';
    END IF;
    -- An assignment, not PERFORM: plpgsql evaluates it without a query.
    ignored := set_config('notifyd.inbox_change_n', (n + 1)::text, true);
    RETURN (pg_current_xact_id()::text::bigint << 16) | n;
END $$;
