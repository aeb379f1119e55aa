-- notify_partition_upper is the upper bound of partition part (NULL for a
-- default partition).
CREATE OR REPLACE FUNCTION notify_partition_upper(part regclass) RETURNS uuid
LANGUAGE sql STABLE
AS $$
SELECT (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'TO \(''([0-9a-f-]+)''\)'))[1]::uuid
FROM pg_class c WHERE c.oid = part
$$;
