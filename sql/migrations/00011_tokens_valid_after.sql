-- A recipient's tokens issued before tokens_valid_after are refused: the
-- operator's way to revoke a recipient's tokens before their exp (PUT
-- /v1/recipients/{id} {"tokens_valid_after": ...}). Null revokes nothing.
-- The daemon reads it by primary key once per authenticated recipient request.

-- +goose Up
ALTER TABLE notify_recipients ADD COLUMN tokens_valid_after timestamptz;

-- +goose Down
ALTER TABLE notify_recipients DROP COLUMN tokens_valid_after;
