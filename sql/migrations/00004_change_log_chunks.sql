-- A fan-out chunk logs the inbox items it created as ONE change-log row
-- instead of one row per item: recipient is null and recipients lists, in
-- step with item_ids, whose item each is (all distinct). Readers expand it
-- (stores/changes.go). A fan-out of 100k recipients writes 100 log rows, not
-- 100,000, and holds the change-log lock (taken right before commit) for a
-- fraction of the time.

-- +goose Up
ALTER TABLE notify_inbox_changes ALTER COLUMN recipient DROP NOT NULL,
                                 ADD COLUMN recipients text[] COLLATE "C";
ALTER TABLE notify_inbox_changes ADD CONSTRAINT notify_inbox_changes_one_or_many
    CHECK ((recipient IS NULL) <> (recipients IS NULL)
           AND (recipients IS NULL OR cardinality(recipients) = cardinality(item_ids)));
-- Rows naming many recipients, for a reader resuming one recipient's stream.
CREATE INDEX notify_inbox_changes_many_idx ON notify_inbox_changes (seq) WHERE recipient IS NULL;

-- +goose Down
DROP INDEX notify_inbox_changes_many_idx;
INSERT INTO notify_inbox_changes (recipient, kind, item_ids, data, created_at)
SELECT u.rid, c.kind, ARRAY[u.item], c.data, c.created_at
FROM notify_inbox_changes c, unnest(c.recipients, c.item_ids) WITH ORDINALITY AS u(rid, item, ord)
WHERE c.recipient IS NULL
ORDER BY c.seq, u.ord;
DELETE FROM notify_inbox_changes WHERE recipient IS NULL;
ALTER TABLE notify_inbox_changes DROP CONSTRAINT notify_inbox_changes_one_or_many,
                                 DROP COLUMN recipients,
                                 ALTER COLUMN recipient SET NOT NULL;
