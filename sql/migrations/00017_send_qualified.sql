-- notify_send stops pinning its search_path. A function with SET search_path
-- saves, sets and restores a configuration value on every call, about 13% of
-- notify_send's own time measured in the database (229 µs a call pinned,
-- 199 µs unpinned, notify_enqueue alone 193 µs). The pin was there so that an
-- application whose search_path does not reach notifyd's schema can call
-- notify_send schema-qualified and still have its tables (and
-- notify_enqueue's) resolve there; instead, the bodies of notify_send and
-- notify_enqueue now name every table, type, function and the River insert
-- channel with the schema they were created in, so they resolve the same
-- whatever search_path the caller runs with, and a temporary table can never
-- shadow one of them.
--
-- The bodies are rewritten from the installed definitions (pg_get_functiondef)
-- by replacing each unqualified name with its qualified one; the rest of each
-- definition is unchanged. notify_cancel, notify_subscribe and
-- notify_unsubscribe keep their pin.

-- +goose Up
-- +goose StatementBegin
DO $$
DECLARE
    s text := quote_ident(current_schema());
    def text;
BEGIN
    def := pg_get_functiondef('notify_enqueue(uuid, text, text, text, text[], text[], text[], jsonb, timestamptz, boolean)'::regprocedure);
    def := regexp_replace(def, '\m(notify_notifications|notify_fanout_job|river_job|river_job_state)\M', s || '.\1', 'g');
    def := replace(def, 'current_schema() || ''.river_insert''', quote_literal(current_schema() || '.river_insert'));
    EXECUTE def;

    def := pg_get_functiondef('notify_send(text, text, jsonb, jsonb, text[], text, timestamptz)'::regprocedure);
    def := regexp_replace(def, '\m(notify_notifiers|notify_enqueue|notify_input_error|notify_uuidv7)\M', s || '.\1', 'g');
    EXECUTE def;
    EXECUTE 'ALTER FUNCTION notify_send(text, text, jsonb, jsonb, text[], text, timestamptz) RESET search_path';
END
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION notify_send(text, text, jsonb, jsonb, text[], text, timestamptz) SET search_path = %I, pg_temp',
                   current_schema());
END
$$;
-- +goose StatementEnd
