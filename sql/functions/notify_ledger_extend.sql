-- notify_ledger_extend creates the month partitions (notify_inbox_pYYYYMM,
-- notify_deliveries_pYYYYMM, notify_delivery_attempts_pYYYYMM,
-- notify_delivery_events_pYYYYMM) from the
-- current UTC month through `ahead` months after it that do not exist yet,
-- and returns how many it created. A month below the legacy partition's bound
-- is covered by it; the month the bound falls in gets a partition from the
-- bound to the month's end. A month whose rows already sit in the default
-- partition is left there (creating its partition would have to move them
-- under an exclusive lock): those rows are trimmed by the batched deletes.
CREATE OR REPLACE FUNCTION notify_ledger_extend(ahead integer DEFAULT 2) RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    this_month timestamptz := date_trunc('month', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC';
    m timestamptz;
    t text;
    part text;
    lo uuid;
    hi uuid;
    legacy_hi uuid;
    found_default boolean;
    created integer := 0;
BEGIN
    -- DDL on these tables waits for an exclusive lock; never queue writers
    -- behind it for long. A run that times out is retried by the next one.
    PERFORM set_config('lock_timeout', '5s', true);
    FOREACH t IN ARRAY ARRAY['notify_inbox', 'notify_deliveries', 'notify_delivery_attempts', 'notify_delivery_events'] LOOP
        legacy_hi := CASE WHEN to_regclass(quote_ident(t || '_legacy')) IS NOT NULL
                          THEN notify_partition_upper(to_regclass(quote_ident(t || '_legacy'))) END;
        FOR i IN 0 .. ahead LOOP
            m := this_month + make_interval(months => i);
            part := t || '_p' || to_char(m AT TIME ZONE 'UTC', 'YYYYMM');
            CONTINUE WHEN to_regclass(quote_ident(part)) IS NOT NULL;
            lo := notify_uuid_floor(m);
            hi := notify_uuid_floor(m + interval '1 month');
            CONTINUE WHEN legacy_hi IS NOT NULL AND hi <= legacy_hi;
            lo := greatest(lo, legacy_hi);
            EXECUTE format('SELECT EXISTS (SELECT 1 FROM %I WHERE notification_id >= %L AND notification_id < %L)',
                           t || '_default', lo, hi) INTO found_default;
            CONTINUE WHEN found_default;
            EXECUTE format('CREATE TABLE %I PARTITION OF %I FOR VALUES FROM (%L) TO (%L)', part, t, lo, hi);
            IF t IN ('notify_inbox', 'notify_deliveries') THEN
                EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I PRIMARY KEY (id)', part, part || '_pkey');
            END IF;
            created := created + 1;
        END LOOP;
    END LOOP;
    RETURN created;
END
$$;
