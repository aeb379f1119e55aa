-- notify_check_timezone reports whether name is an IANA time zone name, as
-- a recipient's timezone must be: one the daemon, which reads zones with Go's
-- time.LoadLocation, loads too. PostgreSQL also accepts POSIX rules
-- ("EST5", "<+03>-3"), numeric offsets and names in the wrong case
-- ("europe/paris"); the daemon would not, so they are refused here: the name
-- must look like a zone file's path, PostgreSQL must load it under exactly
-- that name, and a name with digits but no "/" (which could be a POSIX rule)
-- must be in pg_timezone_names ("EST5EDT", "GMT0"). "Local", the daemon's own
-- zone, differs per machine and is refused.
--
-- The zone is loaded by setting TimeZone inside the function; its SET clause
-- restores the caller's TimeZone when it returns.
CREATE OR REPLACE FUNCTION notify_check_timezone(name text) RETURNS boolean
LANGUAGE plpgsql
SET "TimeZone" TO 'UTC'
AS $$
BEGIN
    IF name IS NULL OR name = 'Local' OR name !~ '^[A-Za-z][A-Za-z0-9_+-]*(/[A-Za-z0-9_+-]+)*$' THEN
        RETURN false;
    ELSIF name ~ '[0-9]' AND name !~ '/' THEN
        RETURN EXISTS (SELECT 1 FROM pg_timezone_names z WHERE z.name = notify_check_timezone.name);
    END IF;
    PERFORM set_config('TimeZone', name, true);
    RETURN current_setting('TimeZone') = name;
EXCEPTION WHEN invalid_parameter_value THEN
    RETURN false;
END
$$;
