-- notify_input_error raises SQLSTATE 22023 (invalid_parameter_value) with
-- the message "<field>: <message>", as the HTTP API words it, and the field
-- in the error's COLUMN field for clients that map errors to fields.
CREATE OR REPLACE FUNCTION notify_input_error(field text, message text) RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = field || ': ' || message, COLUMN = field;
END
$$;
