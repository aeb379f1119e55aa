-- notify_params_violation returns the first value of params that breaks
-- schema, as {pointer, message} (pointer an RFC 6901 JSON pointer into the
-- params, '' for the params object itself), or NULL when none does. schema is
-- a notifier's params_schema: the part of its JSON Schema SQL checks, made of
-- the keywords type, enum, const, minLength, maxLength, minimum, maximum,
-- exclusiveMinimum, exclusiveMaximum, multipleOf, minItems, maxItems, uniqueItems, required, properties,
-- additionalProperties (false only), items (one schema for every item), allOf, anyOf, oneOf, not, pattern (a
-- PostgreSQL regular expression, with patternSource, the pattern as written) and format, with formatPattern: a
-- regular expression every string of that format matches. The catalog's publisher compiles it, with an SQL/JSON path
-- predicate (params_check) that notify_send_write evaluates first: when that holds, this walk finds nothing; when it
-- fails, this walk decides (uniqueItems, oneOf and not are left to it).
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
    alt jsonb;
    passed integer[];
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
        ELSIF (value #>> '{}') !~ (schema ->> 'pattern') THEN
            RETURN ARRAY[pointer, format('''%s'' does not match pattern ''%s''', value #>> '{}', schema ->> 'patternSource')];
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
        ELSIF mod(value::text::numeric, (schema ->> 'multipleOf')::numeric) <> 0 THEN
            RETURN ARRAY[pointer, format('multipleOf: got %s, want %s', value, schema ->> 'multipleOf')];
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
    ELSIF t = 'array' THEN
        IF jsonb_array_length(value) < (schema ->> 'minItems')::numeric THEN
            RETURN ARRAY[pointer, format('minItems: got %s, want %s', jsonb_array_length(value), schema ->> 'minItems')];
        ELSIF jsonb_array_length(value) > (schema ->> 'maxItems')::numeric THEN
            RETURN ARRAY[pointer, format('maxItems: got %s, want %s', jsonb_array_length(value), schema ->> 'maxItems')];
        END IF;
        IF schema -> 'uniqueItems' = 'true' THEN
            -- jsonb equality is JSON Schema's: numbers by value, objects by members.
            found := (SELECT ARRAY[pointer, format('items at %s and %s are equal', a.n - 1, b.n - 1)]
                      FROM jsonb_array_elements(value) WITH ORDINALITY AS a(v, n)
                      JOIN jsonb_array_elements(value) WITH ORDINALITY AS b(v, n) ON b.n > a.n AND b.v = a.v
                      ORDER BY b.n, a.n LIMIT 1);
            IF found IS NOT NULL THEN
                RETURN found;
            END IF;
        END IF;
        IF schema ? 'items' THEN
            FOR i IN 0 .. jsonb_array_length(value) - 1 LOOP
                found := notify_params_violation(schema -> 'items', value -> i, pointer || '/' || i);
                IF found IS NOT NULL THEN
                    RETURN found;
                END IF;
            END LOOP;
        END IF;
    END IF;

    -- The combinators, on a value of any type.
    FOR alt IN SELECT e FROM jsonb_array_elements(schema -> 'allOf') AS e LOOP
        found := notify_params_violation(alt, value, pointer);
        IF found IS NOT NULL THEN
            RETURN found;
        END IF;
    END LOOP;
    IF schema ? 'anyOf' AND NOT EXISTS (SELECT 1 FROM jsonb_array_elements(schema -> 'anyOf') AS e(s)
                                        WHERE notify_params_violation(e.s, value, pointer) IS NULL) THEN
        RETURN ARRAY[pointer, 'matches none of the allowed alternatives (anyOf)'];
    END IF;
    IF schema ? 'oneOf' THEN
        SELECT array_agg(e.n - 1 ORDER BY e.n) INTO passed
        FROM jsonb_array_elements(schema -> 'oneOf') WITH ORDINALITY AS e(s, n)
        WHERE notify_params_violation(e.s, value, pointer) IS NULL;
        IF passed IS NULL THEN
            RETURN ARRAY[pointer, 'matches none of the allowed alternatives (oneOf)'];
        ELSIF cardinality(passed) > 1 THEN
            RETURN ARRAY[pointer, format('matches more than one alternative (oneOf: %s and %s)', passed[1], passed[2])];
        END IF;
    END IF;
    IF schema ? 'not' AND notify_params_violation(schema -> 'not', value, pointer) IS NULL THEN
        RETURN ARRAY[pointer, '''not'' failed'];
    END IF;
    RETURN NULL;
END
$$;
