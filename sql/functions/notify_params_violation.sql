-- notify_params_violation returns the first value of params that breaks
-- schema, as {pointer, message} (pointer an RFC 6901 JSON pointer into the
-- params, '' for the params object itself), or NULL when none does. schema is
-- a notifier's params_schema: the part of its JSON Schema SQL checks, made of
-- the keywords type, enum, const, minLength, maxLength, minimum, maximum,
-- exclusiveMinimum, exclusiveMaximum, minItems, maxItems, required, properties, additionalProperties (false only), items (one
-- schema for every item) and format, with formatPattern: a regular
-- expression every string of that format matches. The catalog's publisher compiles it, with the same
-- checks as an SQL/JSON path predicate (params_check) that notify_send_write
-- evaluates first; this walk runs only to explain a failure.
--
-- The order is the document's: a value's own keywords (type, const, enum,
-- lengths, bounds), then an object's properties by name in byte order (a
-- missing required property, a property additionalProperties forbids, or a
-- failing value inside one), then an array's items by index. The messages
-- are the words of the JSON Schema validator the Go API uses.
CREATE OR REPLACE FUNCTION notify_params_violation(schema jsonb, value jsonb, pointer text DEFAULT '')
RETURNS text[]
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    t text := jsonb_typeof(value);
    k text;
    sub text;
    found text[];
BEGIN
    IF schema ? 'type' AND NOT (schema -> 'type' ? t
            OR (t = 'number' AND schema -> 'type' ? 'integer' AND value::text::numeric = trunc(value::text::numeric))) THEN
        RETURN ARRAY[pointer, format('got %s, want %s', t,
                                     (SELECT string_agg(x, ' or ') FROM jsonb_array_elements_text(schema -> 'type') AS x))];
    END IF;
    IF schema ? 'const' AND value IS DISTINCT FROM schema -> 'const' THEN
        RETURN ARRAY[pointer, format('value must be %s', schema -> 'const')];
    END IF;
    IF schema ? 'enum' AND NOT EXISTS (SELECT 1 FROM jsonb_array_elements(schema -> 'enum') AS e(v) WHERE e.v = value) THEN
        RETURN ARRAY[pointer, format('value must be one of %s',
                                     (SELECT string_agg(e.v::text, ', ') FROM jsonb_array_elements(schema -> 'enum') AS e(v)))];
    END IF;
    IF t = 'string' THEN
        IF length(value #>> '{}') < (schema ->> 'minLength')::numeric THEN
            RETURN ARRAY[pointer, format('minLength: got %s, want %s', length(value #>> '{}'), schema ->> 'minLength')];
        ELSIF length(value #>> '{}') > (schema ->> 'maxLength')::numeric THEN
            RETURN ARRAY[pointer, format('maxLength: got %s, want %s', length(value #>> '{}'), schema ->> 'maxLength')];
        ELSIF (value #>> '{}') !~ (schema ->> 'formatPattern') THEN
            RETURN ARRAY[pointer, format('''%s'' is not valid %s', value #>> '{}', schema ->> 'format')];
        END IF;
    ELSIF t = 'number' THEN
        IF value::text::numeric < (schema ->> 'minimum')::numeric THEN
            RETURN ARRAY[pointer, format('minimum: got %s, want %s', value, schema ->> 'minimum')];
        ELSIF value::text::numeric > (schema ->> 'maximum')::numeric THEN
            RETURN ARRAY[pointer, format('maximum: got %s, want %s', value, schema ->> 'maximum')];
        ELSIF value::text::numeric <= (schema ->> 'exclusiveMinimum')::numeric THEN
            RETURN ARRAY[pointer, format('exclusiveMinimum: got %s, want %s', value, schema ->> 'exclusiveMinimum')];
        ELSIF value::text::numeric >= (schema ->> 'exclusiveMaximum')::numeric THEN
            RETURN ARRAY[pointer, format('exclusiveMaximum: got %s, want %s', value, schema ->> 'exclusiveMaximum')];
        END IF;
    ELSIF t = 'object' THEN
        FOR k IN
            SELECT n.name FROM (
                SELECT jsonb_array_elements_text(schema -> 'required')
                UNION SELECT jsonb_object_keys(schema -> 'properties')
                UNION SELECT jsonb_object_keys(value) WHERE schema -> 'additionalProperties' = 'false'
            ) AS n(name)
            ORDER BY n.name COLLATE "C"
        LOOP
            sub := pointer || '/' || replace(replace(k, '~', '~0'), '/', '~1');
            IF NOT value ? k THEN
                IF schema -> 'required' ? k THEN
                    RETURN ARRAY[sub, 'missing required property'];
                END IF;
            ELSIF schema -> 'properties' ? k THEN
                found := notify_params_violation(schema -> 'properties' -> k, value -> k, sub);
                IF found IS NOT NULL THEN
                    RETURN found;
                END IF;
            ELSIF schema -> 'additionalProperties' = 'false' THEN
                RETURN ARRAY[sub, 'property not allowed'];
            END IF;
        END LOOP;
    ELSIF t = 'array' AND jsonb_array_length(value) < (schema ->> 'minItems')::numeric THEN
        RETURN ARRAY[pointer, format('minItems: got %s, want %s', jsonb_array_length(value), schema ->> 'minItems')];
    ELSIF t = 'array' AND jsonb_array_length(value) > (schema ->> 'maxItems')::numeric THEN
        RETURN ARRAY[pointer, format('maxItems: got %s, want %s', jsonb_array_length(value), schema ->> 'maxItems')];
    ELSIF t = 'array' AND schema ? 'items' THEN
        FOR i IN 0 .. jsonb_array_length(value) - 1 LOOP
            found := notify_params_violation(schema -> 'items', value -> i, pointer || '/' || i);
            IF found IS NOT NULL THEN
                RETURN found;
            END IF;
        END LOOP;
    END IF;
    RETURN NULL;
END
$$;
