SELECT set_config('search_path', quote_ident(current_schema()) || ', pg_catalog, pg_temp', true);
-- notify_subscribe subscribes recipient to topic for reason (an upsert:
-- subscribing again changes the reason and keeps created_at). It returns
-- true when the subscription is new. The Go API's SubscribeTx calls it. It
-- runs as its owner (SECURITY DEFINER), search_path pinned like notify_send's.
CREATE OR REPLACE FUNCTION notify_subscribe(topic text, recipient text, reason text DEFAULT 'subscribed') RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
#variable_conflict use_column
DECLARE
    v_reason text := coalesce(nullif(notify_subscribe.reason, ''), 'subscribed');
    v_new boolean;
BEGIN
    PERFORM notify_check_text('topic', notify_subscribe.topic, 255);
    PERFORM notify_check_text('recipient', notify_subscribe.recipient, 255);
    IF v_reason !~ '^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$' THEN
        PERFORM notify_input_error('reason', 'want one word of letters, digits, ''-'', ''_'' or ''.'', at most 64 bytes');
    END IF;
    INSERT INTO notify_subscriptions AS s (topic, recipient, reason)
    VALUES (notify_subscribe.topic, notify_subscribe.recipient, v_reason)
    ON CONFLICT (topic, recipient) DO UPDATE SET reason = EXCLUDED.reason
    RETURNING (s.xmax = 0) INTO v_new;
    RETURN v_new;
END
$$;
