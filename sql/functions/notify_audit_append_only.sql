-- notify_audit_append_only keeps notify_audit append-only for every role
-- that is not a superuser, the daemon's own included: an UPDATE is refused,
-- and a DELETE too unless the row is older than 30 days (what an
-- operator's retention may remove). TRUNCATE is refused. The
-- triggers that call it are created here with it, since they need it.
CREATE OR REPLACE FUNCTION notify_audit_append_only() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    IF TG_OP = 'DELETE' AND OLD.at < now() - interval '30 days' THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'notify_audit is append-only: % refused', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END
$$;

CREATE OR REPLACE TRIGGER notify_audit_append_only
    BEFORE UPDATE OR DELETE ON notify_audit
    FOR EACH ROW EXECUTE FUNCTION notify_audit_append_only();

CREATE OR REPLACE TRIGGER notify_audit_no_truncate
    BEFORE TRUNCATE ON notify_audit
    FOR EACH STATEMENT EXECUTE FUNCTION notify_audit_append_only();
