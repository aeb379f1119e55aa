SELECT set_config('search_path', quote_ident(current_schema()) || ', pg_catalog, pg_temp', true);
-- notify_put_recipient creates recipient id's profile or changes it, inside
-- the caller's transaction, with the rules of PUT /v1/recipients/{id}, which
-- calls it too (as do the Go API's PutRecipient and PutRecipientTx). profile
-- is a JSON object of the fields to write: a key that is absent keeps what is
-- stored; null (or "" for a text field) clears it (data: back to {}). The
-- fields:
--
--   email        a bare address such as ada@example.com (at most 254 bytes)
--   name         at most 255 bytes
--   locale       a BCP 47 language tag such as en or pt-BR (35 bytes)
--   timezone     an IANA time zone name such as Europe/Paris (64 bytes)
--   webhook_url  an absolute http or https URL (2048 bytes); a new one clears
--                webhook_gone_at. Private destinations are refused when a
--                webhook is sent, not here.
--   phone        E.164: "+", the country code, at most 15 digits, no spaces
--   data         a JSON object for the application's own use, at most
--                http.max_body bytes as JSON text (notify_api_limits)
--   quiet_hours  {"start": "HH:MM", "end": "HH:MM"}, two different times
--   tokens_valid_after  an RFC 3339 time: the recipient's tokens issued
--                before it are refused
--
-- An invalid field, or a key that is none of these, raises SQLSTATE 22023
-- with the message "<field>: <what is wrong>" and the field in COLUMN, and
-- nothing is written. The checks run in the order of the list above.
--
-- It runs as its owner (SECURITY DEFINER), search_path pinned like
-- notify_send's: notifyd_app may call it, and may not read or write
-- notify_recipients itself.
CREATE OR REPLACE FUNCTION notify_put_recipient(id text, profile jsonb) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
#variable_conflict use_column
DECLARE
    p jsonb := coalesce(notify_put_recipient.profile, '{}');
    v_unknown text;
    v_email text;
    v_name text;
    v_locale text;
    v_timezone text;
    v_webhook_url text;
    v_phone text;
    v_data jsonb;
    v_quiet jsonb;
    v_start text;
    v_end text;
    v_after timestamptz;
BEGIN
    PERFORM notify_check_text('id', notify_put_recipient.id, 255);
    IF jsonb_typeof(p) = 'null' THEN
        p := '{}';
    ELSIF jsonb_typeof(p) <> 'object' THEN
        PERFORM notify_input_error('profile', 'want a JSON object, got JSON ' || jsonb_typeof(p));
    END IF;
    IF p - ARRAY['email', 'name', 'locale', 'timezone', 'webhook_url', 'phone', 'data', 'quiet_hours',
                 'tokens_valid_after'] <> '{}' THEN
        SELECT min(k COLLATE "C") INTO v_unknown
        FROM jsonb_object_keys(p - ARRAY['email', 'name', 'locale', 'timezone', 'webhook_url', 'phone', 'data',
                                         'quiet_hours', 'tokens_valid_after']) AS k;
        PERFORM notify_input_error(v_unknown, 'unknown field');
    END IF;

    v_email := notify_profile_text(p, 'email', 254);
    IF v_email !~ ('^([A-Za-z0-9!#$%&''*+/=?^_`{|}~-]|[^\x01-\x7f])+(\.([A-Za-z0-9!#$%&''*+/=?^_`{|}~-]|[^\x01-\x7f])+)*'
                   '@(([A-Za-z0-9!#$%&''*+/=?^_`{|}~-]|[^\x01-\x7f])+(\.([A-Za-z0-9!#$%&''*+/=?^_`{|}~-]|[^\x01-\x7f])+)*'
                   '|\[[!-Z^-~]*\])$') THEN
        PERFORM notify_input_error('email', 'want a bare email address such as ada@example.com');
    END IF;
    v_name := notify_profile_text(p, 'name', 255);
    v_locale := notify_profile_text(p, 'locale', 35);
    IF v_locale !~ '^[A-Za-z]{2,8}(-[A-Za-z0-9]{1,8})*$' THEN
        PERFORM notify_input_error('locale', 'want a BCP 47 language tag such as en or pt-BR');
    END IF;
    v_timezone := notify_profile_text(p, 'timezone', 64);
    IF v_timezone = 'Local' THEN
        PERFORM notify_input_error('timezone', 'want an IANA time zone such as Europe/Paris');
    ELSIF v_timezone IS NOT NULL AND NOT notify_check_timezone(v_timezone) THEN
        PERFORM notify_input_error('timezone', 'unknown time zone; want an IANA name such as Europe/Paris');
    END IF;
    v_webhook_url := notify_profile_text(p, 'webhook_url', 2048);
    IF v_webhook_url !~ ('^[Hh][Tt][Tt][Pp][Ss]?://([^/?#@[:space:][:cntrl:]]*@)?'
                         '([A-Za-z0-9._~!$&''()*+,;=%-]+|\[[0-9A-Fa-f:.]+\])(:[0-9]*)?'
                         '([/?#][^[:space:][:cntrl:]]*)?$') THEN
        PERFORM notify_input_error('webhook_url', 'want an absolute http or https URL');
    END IF;
    v_phone := notify_profile_text(p, 'phone', 16);
    IF v_phone !~ '^\+[1-9][0-9]{7,14}$' THEN
        PERFORM notify_input_error('phone', 'want an E.164 phone number such as +14155550123 (a +, the country code, no spaces)');
    END IF;

    v_data := p -> 'data';
    IF jsonb_typeof(v_data) = 'null' THEN
        v_data := '{}';
    ELSIF jsonb_typeof(v_data) <> 'object' THEN
        PERFORM notify_input_error('data', 'want a JSON object, got JSON ' || jsonb_typeof(v_data));
    ELSIF v_data IS NOT NULL AND octet_length(v_data::text) > (SELECT l.max_body FROM notify_api_limits l) THEN
        PERFORM notify_input_error('data', format('larger than %s bytes as JSON (http.max_body)',
                                                  (SELECT l.max_body FROM notify_api_limits l)));
    END IF;

    v_quiet := p -> 'quiet_hours';
    IF jsonb_typeof(v_quiet) = 'null' THEN
        v_quiet := NULL;
    ELSIF v_quiet IS NOT NULL THEN
        IF jsonb_typeof(v_quiet) <> 'object' OR v_quiet - 'start' - 'end' <> '{}' THEN
            PERFORM notify_input_error('quiet_hours', 'want {"start": "HH:MM", "end": "HH:MM"} or null');
        END IF;
        v_start := CASE WHEN jsonb_typeof(v_quiet -> 'start') = 'string' THEN v_quiet ->> 'start' END;
        v_end := CASE WHEN jsonb_typeof(v_quiet -> 'end') = 'string' THEN v_quiet ->> 'end' END;
        IF v_start IS NULL OR v_start !~ '^([01][0-9]|2[0-3]):[0-5][0-9]$' THEN
            PERFORM notify_input_error('quiet_hours', format('start: want HH:MM (24-hour), got %s',
                                                             coalesce((v_quiet -> 'start')::text, 'nothing')));
        ELSIF v_end IS NULL OR v_end !~ '^([01][0-9]|2[0-3]):[0-5][0-9]$' THEN
            PERFORM notify_input_error('quiet_hours', format('end: want HH:MM (24-hour), got %s',
                                                             coalesce((v_quiet -> 'end')::text, 'nothing')));
        ELSIF v_start = v_end THEN
            PERFORM notify_input_error('quiet_hours', 'start and end are the same time (omit quiet_hours for none)');
        END IF;
        v_quiet := jsonb_build_object('start', v_start, 'end', v_end);
    END IF;

    IF jsonb_typeof(p -> 'tokens_valid_after') = 'string' AND p ->> 'tokens_valid_after'
           ~ '^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt]([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]+)?([Zz]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$' THEN
        BEGIN
            v_after := (p ->> 'tokens_valid_after')::timestamptz;
        EXCEPTION WHEN datetime_field_overflow OR invalid_datetime_format THEN
            PERFORM notify_input_error('tokens_valid_after', 'want an RFC 3339 time or null');
        END;
    ELSIF jsonb_typeof(p -> 'tokens_valid_after') <> 'null' THEN
        PERFORM notify_input_error('tokens_valid_after', 'want an RFC 3339 time or null');
    END IF;

    INSERT INTO notify_recipients AS r (id, email, name, locale, timezone, webhook_url, phone, data, quiet_hours,
                                        tokens_valid_after)
    VALUES (notify_put_recipient.id, v_email, v_name, v_locale, v_timezone, v_webhook_url, v_phone,
            coalesce(v_data, '{}'), v_quiet, v_after)
    ON CONFLICT (id) DO UPDATE
    SET email = CASE WHEN p ? 'email' THEN EXCLUDED.email ELSE r.email END,
        name = CASE WHEN p ? 'name' THEN EXCLUDED.name ELSE r.name END,
        locale = CASE WHEN p ? 'locale' THEN EXCLUDED.locale ELSE r.locale END,
        timezone = CASE WHEN p ? 'timezone' THEN EXCLUDED.timezone ELSE r.timezone END,
        webhook_url = CASE WHEN p ? 'webhook_url' THEN EXCLUDED.webhook_url ELSE r.webhook_url END,
        -- A gone endpoint stays gone while the address stays the same: a new
        -- address deserves a new try.
        webhook_gone_at = CASE WHEN NOT p ? 'webhook_url' OR r.webhook_url IS NOT DISTINCT FROM EXCLUDED.webhook_url
                               THEN r.webhook_gone_at END,
        phone = CASE WHEN p ? 'phone' THEN EXCLUDED.phone ELSE r.phone END,
        data = CASE WHEN p ? 'data' THEN EXCLUDED.data ELSE r.data END,
        quiet_hours = CASE WHEN p ? 'quiet_hours' THEN EXCLUDED.quiet_hours ELSE r.quiet_hours END,
        tokens_valid_after = CASE WHEN p ? 'tokens_valid_after' THEN EXCLUDED.tokens_valid_after
                                  ELSE r.tokens_valid_after END,
        updated_at = now();
END
$$;
