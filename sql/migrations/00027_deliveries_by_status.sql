-- The operator's views of the ledger across notifications (GET /v1/deliveries,
-- its bulk retry, and the overview's counts per hour) read deliveries by
-- status, channel and time of their last change: "every failed email of the
-- last hour", newest first. Without an index they read the whole ledger.
--
-- One index serves every combination of the two filters: a query walks each
-- (channel, status) pair it asks for as one range, newest first, and merges
-- the ranges (stores/ledger_views.go); id makes (updated_at, id) a key, so
-- keyset pages need no sort. channel leads, not status: the send path's
-- statements look rows up by status among other things (the digest settle:
-- status and digest_id), and a planner whose statistics were taken while
-- nothing was in flight would take an index led by status for them and read
-- every row in flight (stores/plans_test.go). Led by channel, the index
-- serves only a query that names both. The index is not partial: the views also list
-- sent deliveries. It costs one more index entry per row version (a delivery
-- row is written about three times: fan-out, claim, settle). The retry
-- sweep's partial index on (status, updated_at) stays: it is a fraction of
-- this one's size and the sweep runs every minute.
--
-- On a partitioned table CREATE INDEX builds the index on every partition
-- (and new month partitions get it with their CREATE TABLE … PARTITION OF),
-- holding a lock that blocks writes to the ledger while it builds: several
-- seconds per million rows (7.5 s for 1,000,000 on a loaded two-core
-- machine). Run the migration in a quiet moment on a large ledger.

-- +goose Up
CREATE INDEX notify_deliveries_channel_status_idx ON notify_deliveries (channel, status, updated_at, id);

-- +goose Down
DROP INDEX notify_deliveries_channel_status_idx;
