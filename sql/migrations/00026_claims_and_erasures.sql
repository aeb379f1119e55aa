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

-- notify_erased_recipients records each erasure under the recipient's
-- pseudonym (stores.ErasedID: "erased:" and the SHA-256 of the id, the
-- pseudonym the erasure already leaves on the ledger rows it keeps). A
-- one-click unsubscribe link minted before the erasure would otherwise write
-- the erased recipient's preferences back: the unsubscribe writes nothing
-- for a recipient erased at or after its link was issued.

-- +goose Up
ALTER TABLE notify_deliveries ADD COLUMN claimed_by text;

CREATE TABLE notify_erased_recipients (
    pseudonym text PRIMARY KEY,
    erased_at timestamptz NOT NULL
);

-- +goose Down
DROP TABLE notify_erased_recipients;
ALTER TABLE notify_deliveries DROP COLUMN claimed_by;
