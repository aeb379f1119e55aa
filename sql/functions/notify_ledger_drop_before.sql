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
-- partition is dropped with the attempts and events partitions of the same
-- range.
CREATE OR REPLACE FUNCTION notify_ledger_drop_before(inbox_cutoff timestamptz, deliveries_cutoff timestamptz,
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
        IF to_regclass(quote_ident('notify_delivery_events_' || suffix)) IS NOT NULL THEN
            EXECUTE format('DROP TABLE %I', 'notify_delivery_events_' || suffix);
        END IF;
        EXECUTE format('DROP TABLE %I', p.relname);
        deliveries_dropped := deliveries_dropped + 1;
    END LOOP;
END
$$;
