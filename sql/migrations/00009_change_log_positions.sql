-- The inbox change log stops serialising its writers. Until now every writer
-- took one advisory lock right before commit so that seq order was commit
-- order. From here on a row's seq is its position in the stream, made from
-- its writer's transaction id: (xid8 << 16) | n, where n counts the change
-- rows the transaction wrote before it (at most 65,536 per transaction).
-- Readers only pass rows whose seq lies below the transaction-id watermark
-- (notify_inbox_changes_below: the oldest transaction still running in this
-- database, << 16): every transaction that could still add a row there has
-- finished, so a row that commits late always lands after what a reader has
-- already passed (docs/architecture.md, "The inbox change log").
--
-- Rows already written keep their seq: they were numbered in commit order,
-- they are all below the watermark, and the positions clients hold for them
-- (Last-Event-ID) stay valid. The check below refuses to migrate a log whose
-- numbers would not sort before the new ones (it would take more than 65,536
-- log rows per transaction id ever used in the cluster).
--
-- notify_inbox_changes_trimmed records how far retention has trimmed the log,
-- since positions are no longer consecutive: a stream at position p has lost
-- changes exactly when p < through.

-- +goose Up
LOCK TABLE notify_inbox_changes IN ACCESS EXCLUSIVE MODE;

-- +goose StatementBegin
DO $$
BEGIN
    IF (SELECT coalesce(max(seq), 0) FROM notify_inbox_changes)
       >= (pg_snapshot_xmin(pg_current_snapshot())::text::bigint << 16) THEN
        RAISE EXCEPTION 'notify_inbox_changes: seq % is ahead of the transaction-id positions; migration 00009 cannot keep existing stream positions',
            (SELECT max(seq) FROM notify_inbox_changes);
    END IF;
END $$;
-- +goose StatementEnd

-- notify_inbox_change_seq numbers the change rows of the current
-- transaction. The counter is a transaction-local setting: it starts at 0 in
-- every transaction and is rolled back with a rolled-back savepoint, together
-- with the rows it numbered.
-- +goose StatementBegin
CREATE FUNCTION notify_inbox_change_seq() RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    n integer := coalesce(nullif(current_setting('notifyd.inbox_change_n', true), ''), '0')::integer;
BEGIN
    IF n >= 65536 THEN
        RAISE EXCEPTION 'more than 65536 inbox change-log rows in one transaction';
    END IF;
    PERFORM set_config('notifyd.inbox_change_n', (n + 1)::text, true);
    RETURN (pg_current_xact_id()::text::bigint << 16) | n;
END $$;
-- +goose StatementEnd

ALTER TABLE notify_inbox_changes ALTER COLUMN seq SET DEFAULT notify_inbox_change_seq();

-- notify_inbox_changes_below returns the watermark as a seq: every
-- transaction of this database that could still write a change row below it
-- has ended, so a statement that starts after this function returned sees
-- every row below it that will ever exist. It is the oldest transaction id
-- still running in this database (a backend's, or a prepared transaction's),
-- or, with none, the snapshot's xmax; taken before the backends are looked
-- at, xmax bounds every id handed out before they were. Transactions of other
-- databases cannot write this log, so they do not hold readers back (the
-- cluster-wide pg_snapshot_xmin would). Outside READ COMMITTED a transaction
-- reads one snapshot throughout, so the bound is that snapshot's xmin.
-- +goose StatementBegin
CREATE FUNCTION notify_inbox_changes_below() RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    snap_xmax bigint;
    oldest_xid bigint;
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
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
-- +goose StatementEnd

CREATE TABLE notify_inbox_changes_trimmed (
    one     boolean PRIMARY KEY DEFAULT true CHECK (one),
    through bigint NOT NULL
);
-- Rows before the oldest one left may have been trimmed already (the old
-- numbering was consecutive); an empty log may have been trimmed entirely.
INSERT INTO notify_inbox_changes_trimmed (through)
SELECT coalesce((SELECT min(seq) - 1 FROM notify_inbox_changes),
                (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM notify_inbox_changes_seq_seq));

-- +goose Down
DROP TABLE notify_inbox_changes_trimmed;
ALTER TABLE notify_inbox_changes ALTER COLUMN seq SET DEFAULT nextval('notify_inbox_changes_seq_seq');
SELECT setval('notify_inbox_changes_seq_seq', greatest((SELECT max(seq) FROM notify_inbox_changes), 1));
DROP FUNCTION notify_inbox_changes_below();
DROP FUNCTION notify_inbox_change_seq();
