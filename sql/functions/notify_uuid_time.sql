-- notify_uuid_time is the instant in the first 48 bits of a UUIDv7.
CREATE OR REPLACE FUNCTION notify_uuid_time(u uuid) RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
SELECT to_timestamp(('x' || lpad(left(replace(u::text, '-', ''), 12), 16, '0'))::bit(64)::bigint / 1000.0)
$$;
