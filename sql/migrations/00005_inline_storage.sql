-- The inline recipient list of a large notification is read a chunk's window
-- at a time, and PostgreSQL reads a TOASTed array whole on every access:
-- stored uncompressed, that is a copy of its pages rather than a
-- decompression of the whole list per chunk (and SendTx, which writes it,
-- spends no time compressing it either).

-- +goose Up
ALTER TABLE notify_notifications ALTER COLUMN recipients SET STORAGE EXTERNAL,
                                 ALTER COLUMN reasons SET STORAGE EXTERNAL;

-- +goose Down
ALTER TABLE notify_notifications ALTER COLUMN recipients SET STORAGE EXTENDED,
                                 ALTER COLUMN reasons SET STORAGE EXTENDED;
