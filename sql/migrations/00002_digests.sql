-- Digests (SPEC §9). A digest is one email covering a set of a recipient's
-- digest rows; its id is generated when the rows are first claimed and stays on
-- them, so every retry and every re-drive of that digest carries the same
-- Message-ID.
--
-- Row life cycle (jobs/digest.go):
--   digest_pending, digest_id NULL      fresh: waiting for the recipient's next schedule instant
--   digest_sending, digest_id set       claimed by a notify.digest job (claimed_at is the claim token)
--   digest_pending, digest_id set       that digest failed temporarily (or its claim expired) and
--                                       is waiting for its retry job (next_attempt_at)
--   digest_sent | digest_failed | digest_dropped   terminal

-- +goose Up
ALTER TABLE notify_deliveries
    ADD COLUMN digest_id     uuid,
    ADD COLUMN digest_due_at timestamptz;

-- The sweep's candidate query reads fresh rows only, grouped by recipient in
-- key order, oldest first: (recipient, created_at, id) lets it run as an
-- index-only scan. Rows that already belong to a digest are left to that
-- digest's retry job, so they are outside the predicate.
DROP INDEX notify_deliveries_digest_idx;
CREATE INDEX notify_deliveries_digest_idx ON notify_deliveries (recipient, created_at, id)
    WHERE status = 'digest_pending' AND digest_id IS NULL;

-- Digests in flight: claimed, or waiting for a retry. Small (settled rows fall
-- out of the predicate); it serves the retry claim, the settle and the re-drive.
CREATE INDEX notify_deliveries_digest_flight_idx ON notify_deliveries (digest_id)
    WHERE digest_id IS NOT NULL AND status IN ('digest_pending', 'digest_sending');

-- +goose Down
DROP INDEX notify_deliveries_digest_flight_idx;
DROP INDEX notify_deliveries_digest_idx;
CREATE INDEX notify_deliveries_digest_idx ON notify_deliveries (recipient, created_at) WHERE status = 'digest_pending';
ALTER TABLE notify_deliveries
    DROP COLUMN digest_due_at,
    DROP COLUMN digest_id;
