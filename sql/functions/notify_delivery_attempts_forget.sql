SELECT set_config('search_path', quote_ident(current_schema()) || ', pg_temp', true);
-- notify_delivery_attempts_forget, the trigger notify_deliveries_forget_attempts
-- on notify_deliveries, deletes the attempts and the provider events of a
-- delivery whose recipient changed (erasure), by the whole partition key:
-- both may name the address.
CREATE OR REPLACE FUNCTION notify_delivery_attempts_forget() RETURNS trigger
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    DELETE FROM notify_delivery_attempts WHERE delivery_id = NEW.id AND notification_id = NEW.notification_id;
    DELETE FROM notify_delivery_events WHERE delivery_id = NEW.id AND notification_id = NEW.notification_id;
    RETURN NULL;
END
$$;
