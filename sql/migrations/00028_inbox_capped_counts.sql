-- The inbox's unread index also tells unseen from seen, so that both badge
-- counts are read from it and stop after a cap (GET /v1/inbox/counts?max=,
-- default 99, and the stream's counts events): a recipient with 100,000
-- unread items costs a count of at most max + 1 index entries, where the old
-- exact count read every unread item (about 40 req/s at 32 clients for such
-- a recipient, every badge refresh counting 100,000 rows).
--
-- notify_inbox_unread_idx was (recipient) WHERE read_at IS NULL AND
-- archived_at IS NULL; it becomes (recipient, (seen_at IS NULL)) with the
-- same predicate. The unread count reads the recipient's entries, the unseen
-- count only those whose second column is true, each under a LIMIT. One index
-- serves both, so an inbox insert writes as many index entries as before. A
-- "mark seen" now changes an indexed value, like "mark read" always did.
--
-- On a large inbox the index is rebuilt while the migration holds the table
-- (writes to the inbox wait; reads go on).

-- +goose Up
DROP INDEX notify_inbox_unread_idx;
CREATE INDEX notify_inbox_unread_idx ON notify_inbox (recipient, (seen_at IS NULL))
    WHERE read_at IS NULL AND archived_at IS NULL;

-- +goose Down
DROP INDEX notify_inbox_unread_idx;
CREATE INDEX notify_inbox_unread_idx ON notify_inbox (recipient) WHERE read_at IS NULL AND archived_at IS NULL;
