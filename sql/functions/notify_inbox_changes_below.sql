-- notify_inbox_changes_below returns the watermark as a seq: every
-- transaction of this database that could still write a change row below it
-- has ended, so a statement that starts after this function returned sees
-- every row below it that will ever exist. It is the oldest transaction id
-- still running in this database (a backend's, or a prepared transaction's),
-- or, with none, the snapshot's xmax; taken before the backends are looked
-- at, xmax bounds every id handed out before they were. Transactions of other
-- databases cannot write this log, so they do not hold readers back (the
-- cluster-wide pg_snapshot_xmin would). Outside READ COMMITTED a transaction
-- reads one snapshot throughout, so the bound is that snapshot's xmin; so it
-- is on a standby, whose backends do not show the primary's transactions.
CREATE OR REPLACE FUNCTION notify_inbox_changes_below() RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    snap_xmax bigint;
    oldest_xid bigint;
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' OR pg_is_in_recovery() THEN
        RETURN pg_snapshot_xmin(pg_current_snapshot())::text::bigint << 16;
    END IF;
    snap_xmax := pg_snapshot_xmax(pg_current_snapshot())::text::bigint;
    -- The backends as they are now, not as this transaction first saw them.
    PERFORM pg_stat_clear_snapshot();
    -- Running ids are 32-bit here: each is widened to the xid8 just below
    -- snap_xmax with the same low bits (one above it counts as snap_xmax).
    SELECT min(snap_xmax - CASE WHEN r.d >= 2147483648 THEN r.d - 4294967296 ELSE r.d END) INTO oldest_xid
    FROM (SELECT ((snap_xmax & 4294967295) - x.xid + 4294967296) % 4294967296 AS d
          FROM (SELECT a.backend_xid::text::bigint AS xid
                FROM pg_stat_get_activity(NULL) a
                WHERE a.datid = (SELECT oid FROM pg_database WHERE datname = current_database())
                  AND a.backend_xid IS NOT NULL
                UNION ALL
                SELECT p.transaction::text::bigint
                FROM pg_prepared_xacts p
                WHERE p.database = current_database()) x) r;
    RETURN least(snap_xmax, coalesce(oldest_xid, snap_xmax)) << 16;
END $$;
