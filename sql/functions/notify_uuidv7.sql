-- notify_uuidv7 returns an RFC 9562 version 7 UUID (48-bit Unix millisecond
-- timestamp, then random bits), the id format of every row notifyd writes:
-- a random version 4 UUID with its first six bytes replaced by the time and
-- its version nibble turned from 4 (0100) into 7 (0111).
CREATE OR REPLACE FUNCTION notify_uuidv7() RETURNS uuid
LANGUAGE sql VOLATILE PARALLEL SAFE
AS $$
SELECT encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid())
    PLACING substring(int8send((extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3)
    FROM 1 FOR 6), 52, 1), 53, 1), 'hex')::uuid
$$;
