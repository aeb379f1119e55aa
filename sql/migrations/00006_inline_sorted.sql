-- SendTx sorts the inline recipients by id (byte order) before it writes
-- them; when no id is listed twice it says so here, and the fan-out's
-- normalisation keeps the list as it is instead of sorting it again in the
-- database (a 100k list: about 120 ms of one core before the first chunk).
-- A row written by anything else keeps the default and is normalised in full.

-- +goose Up
ALTER TABLE notify_notifications ADD COLUMN inline_sorted boolean NOT NULL DEFAULT false;

-- +goose Down
ALTER TABLE notify_notifications DROP COLUMN inline_sorted;
