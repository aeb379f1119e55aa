-- notify_uuid_floor is the smallest UUIDv7 of the millisecond of ts: the
-- bound of a partition starting at ts.
CREATE OR REPLACE FUNCTION notify_uuid_floor(ts timestamptz) RETURNS uuid
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
SELECT (lpad(to_hex(floor(extract(epoch FROM ts) * 1000)::bigint), 12, '0') || '00000000000000000000')::uuid
$$;
