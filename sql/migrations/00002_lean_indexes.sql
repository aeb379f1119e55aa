-- Two indexes that every write paid for and only retention read. Retention
-- now finds old delivery rows through the primary key (ids are UUIDv7, so
-- "id < the first id of the cutoff's millisecond" is "created before it") and
-- trims the change log from its head in seq order. A delivery row is updated
-- twice in its life (claim, settle), each time with a new entry in every
-- index; a fan-out writes one change-log row per inbox item.

-- +goose Up
DROP INDEX notify_deliveries_created_idx;
DROP INDEX notify_inbox_changes_created_idx;

-- +goose Down
CREATE INDEX notify_inbox_changes_created_idx ON notify_inbox_changes (created_at);
CREATE INDEX notify_deliveries_created_idx ON notify_deliveries (created_at);
