-- A fan-out chunk logs its new inbox items as one change-log row whose
-- recipients and item_ids run to a chunk's length (2,000 by default, about
-- 50 kB): compressing them on every chunk cost more than the bytes saved
-- (in_app fan-out about 4% faster stored uncompressed). The rows live only
-- for the stream's retained window.

-- +goose Up
ALTER TABLE notify_inbox_changes ALTER COLUMN recipients SET STORAGE EXTERNAL,
                                 ALTER COLUMN item_ids SET STORAGE EXTERNAL;

-- +goose Down
ALTER TABLE notify_inbox_changes ALTER COLUMN recipients SET STORAGE EXTENDED,
                                 ALTER COLUMN item_ids SET STORAGE EXTENDED;
