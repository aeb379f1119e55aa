-- An inbox item is found by its notification through notification_id, never
-- through (notifier, key), and the inbox loses its (notifier, key) index.
--
-- Every inbox item carries its notification's id (the partition key since
-- 00018), and the unique (notification_id, recipient) index serves a look-up
-- by notification in the one partition the id names. The (notifier, key)
-- index served the same look-ups in every partition, and cost every inbox
-- write an entry: all of a notification's items share one key, so a fan-out
-- chunk's inserts, and the concurrent chunks of its other lanes, went to the
-- same leaf pages. Measured on 100,000 rows written in chunks of 2,000, the
-- inbox's insert took about a sixth less time without it; an inbox mark,
-- whose update is never HOT (read_at is in the unread index's predicate),
-- writes one index entry fewer too.
--
-- The two look-ups left in notify_cancel (the closed batch found by its item,
-- and the delete of the cancelled notification's items) now name
-- notification_id = v_id. A batch item handed to the batch's next member
-- (00019) moves its notification_id and key together, so both forms named the
-- same rows. The function is long and changes in two conditions only, so it
-- is rewritten in place from its current definition, and the migration fails
-- unless both were found.

-- +goose Up
-- +goose StatementBegin
DO $$
DECLARE
    def text := pg_get_functiondef('notify_cancel(text, text)'::regprocedure);
    old text := 'i.notifier = notify_cancel.notifier AND i.key = notify_cancel.key';
    new text := 'i.notification_id = v_id';
    found integer := (length(def) - length(replace(def, old, ''))) / length(old);
BEGIN
    IF found <> 2 THEN
        RAISE EXCEPTION 'notify_cancel: expected 2 inbox look-ups by (notifier, key), found %', found;
    END IF;
    EXECUTE replace(def, old, new);
END
$$;
-- +goose StatementEnd
DROP INDEX notify_inbox_notification_idx;

-- +goose Down
CREATE INDEX notify_inbox_notification_idx ON notify_inbox (notifier, key);
-- +goose StatementBegin
DO $$
DECLARE
    def text := pg_get_functiondef('notify_cancel(text, text)'::regprocedure);
    old text := 'i.notification_id = v_id';
    new text := 'i.notifier = notify_cancel.notifier AND i.key = notify_cancel.key';
    found integer := (length(def) - length(replace(def, old, ''))) / length(old);
BEGIN
    IF found <> 2 THEN
        RAISE EXCEPTION 'notify_cancel: expected 2 inbox look-ups by notification_id, found %', found;
    END IF;
    EXECUTE replace(def, old, new);
END
$$;
-- +goose StatementEnd
