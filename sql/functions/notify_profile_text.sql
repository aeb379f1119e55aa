-- notify_profile_text is a text field of a profile given to
-- notify_put_recipient: NULL when the key is absent, JSON null or "" (a
-- field to clear), else the string, which must be at most max bytes. Any
-- other JSON type is refused naming the field.
CREATE OR REPLACE FUNCTION notify_profile_text(profile jsonb, field text, max integer) RETURNS text
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    v jsonb := profile -> field;
    s text;
BEGIN
    IF v IS NULL OR jsonb_typeof(v) = 'null' THEN
        RETURN NULL;
    ELSIF jsonb_typeof(v) <> 'string' THEN
        PERFORM notify_input_error(field, 'want a string, got JSON ' || jsonb_typeof(v));
    END IF;
    s := v #>> '{}';
    IF s = '' THEN
        RETURN NULL;
    ELSIF octet_length(s) > max THEN
        PERFORM notify_input_error(field, format('longer than %s bytes', max));
    END IF;
    RETURN s;
END
$$;
