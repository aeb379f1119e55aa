SELECT set_config('search_path', quote_ident(current_schema()) || ', pg_catalog, pg_temp', true);
-- notify_unsubscribe removes recipient's subscription to topic and returns
-- whether there was one. The Go API's UnsubscribeTx calls it. It runs as its
-- owner (SECURITY DEFINER), search_path pinned like notify_send's.
CREATE OR REPLACE FUNCTION notify_unsubscribe(topic text, recipient text) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
#variable_conflict use_column
BEGIN
    PERFORM notify_check_text('topic', notify_unsubscribe.topic, 255);
    PERFORM notify_check_text('recipient', notify_unsubscribe.recipient, 255);
    DELETE FROM notify_subscriptions s
    WHERE s.topic = notify_unsubscribe.topic AND s.recipient = notify_unsubscribe.recipient;
    RETURN FOUND;
END
$$;
