-- notify_check_text applies the Go API's rule for a required text field:
-- present, at most max bytes. (PostgreSQL text is always valid in the
-- database encoding and never holds a NUL, the Go API's two other checks.)
CREATE OR REPLACE FUNCTION notify_check_text(field text, value text, max integer) RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    IF value IS NULL OR value = '' THEN
        PERFORM notify_input_error(field, 'is required');
    ELSIF octet_length(value) > max THEN
        PERFORM notify_input_error(field, format('longer than %s bytes', max));
    END IF;
END
$$;
