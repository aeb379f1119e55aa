-- Which process holds a delivery's claim. A send job writes its River
-- client's id here with the claim (status `sending`); the column means
-- nothing on a row in any other status. When that client's liveness lock
-- (notify_river_clients, 00020) has been free for a few seconds, its
-- process is gone: a dead process cannot still be talking to a provider, so
-- any live replica (or the process's successor) takes such claims back at
-- once instead of waiting out retry.lease. A claim without a claimant (a
-- claim made before this migration, or by a client that never registered)
-- waits for the lease as before.
--
-- Nullable without a default: adding it rewrites nothing, on every
-- partition. No index: the rows in `sending` are few and the retry sweep's
-- partial index (status, updated_at) finds them.

-- +goose Up
ALTER TABLE notify_deliveries ADD COLUMN claimed_by text;

-- +goose Down
ALTER TABLE notify_deliveries DROP COLUMN claimed_by;
