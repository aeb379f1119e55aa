-- notify_enqueue writes a validated notification and, unless the fan-out
-- claimers take it, its notify.fanout River job in one statement, and reports
-- the id and whether (tenant, notifier, key) already existed (no tenant is a
-- space of its own), in which case nothing was written. A small notification
-- (1 to 100 inline recipients, no topics) gets no job: it is written with
-- batch_fanout set, and the daemon's fan-out claimers take it with others in
-- one transaction (jobs.FanoutClaimer); a scheduled one when send_at is due.
-- recipients and reasons
-- are parallel; inline_sorted promises recipients are in byte order with no
-- id twice (the fan-out then keeps the list as written); tenant is the
-- checked tenant or NULL. It is the one
-- definition of what a send writes: both notify_send overloads (and so
-- SendTx, which calls one) end in it.
--
-- ON CONFLICT ... DO UPDATE with a no-op assignment returns the existing row
-- even when a concurrent transaction inserted it first (DO NOTHING would
-- return no row under READ COMMITTED); xmax = 0 tells a fresh insert from a
-- duplicate, and only a fresh insert gets a job. The job's kind, queue,
-- attempts and priority come from notify_fanout_job.
--
-- The wake: a fresh job that is due now sends River's insert notification
-- (<schema>.river_insert, {"queue": ...}), which the daemons' wake listeners
-- turn into a fetch of that queue, so an idle fan-out queue starts within
-- milliseconds of the commit instead of at its next poll
-- (queues.fetch_poll_interval). But a transaction that notifies takes a
-- database-wide lock at commit: a notification per send serialised the
-- commits of every application transaction that sent (20-40% of enqueue
-- throughput at 8 connections). So a session wakes at most once per 20 ms
-- (the time of its last wake is the session setting notifyd.fanout_woke_at,
-- in Unix milliseconds; a rolled-back transaction's wake and setting go with
-- it), as River's own inserts notify at most once per queue and cooldown. A
-- send within 20 ms of its session's last wake finds the queue woken by it
-- or by another session, or waits for the poll. A wake is harmless if
-- forged: it only makes a queue fetch sooner. A value of the setting that is
-- not a time, or is in the future, counts as no wake.
--
-- It trusts its arguments, so only notify_send, which validates, calls it:
-- no role but its owner may execute it. It has no search_path of its own and
-- runs in its caller's, notify_send's, which is pinned to notifyd's schema.
CREATE OR REPLACE FUNCTION notify_enqueue(p_id uuid, p_notifier text, p_key text, p_actor text,
                                          p_recipients text[], p_reasons text[], p_topics text[],
                                          p_params jsonb, p_send_at timestamptz, p_inline_sorted boolean,
                                          p_tenant text, OUT id uuid, OUT duplicate boolean)
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
DECLARE
    wake_queue text;
    woke_at    text;
    now_ms     numeric;
BEGIN
    WITH ins AS (
        INSERT INTO notify_notifications AS n (id, notifier, key, actor, recipients, reasons, topics, params,
                                               send_at, status, inline_sorted, tenant, batch_fanout)
        VALUES (p_id, p_notifier, p_key, nullif(p_actor, ''), coalesce(p_recipients, '{}'),
                coalesce(p_reasons, '{}'), coalesce(p_topics, '{}'), coalesce(p_params, '{}'), p_send_at,
                CASE WHEN p_send_at > now() THEN 'scheduled' ELSE 'pending' END, coalesce(p_inline_sorted, false),
                p_tenant,
                coalesce(cardinality(p_recipients), 0) BETWEEN 1 AND 100 AND coalesce(cardinality(p_topics), 0) = 0)
        ON CONFLICT ((coalesce(tenant, '')), notifier, key) DO UPDATE SET notifier = EXCLUDED.notifier
        RETURNING n.id, (n.xmax = 0) AS inserted, n.batch_fanout
    ), job AS (
        INSERT INTO river_job (args, kind, max_attempts, priority, queue, state, scheduled_at, tags, metadata)
        SELECT jsonb_build_object('notification_id', ins.id), f.kind, f.max_attempts, f.priority, f.queue,
               (CASE WHEN p_send_at > now() THEN 'scheduled' ELSE 'available' END)::river_job_state,
               coalesce(p_send_at, now()), '{}'::varchar(255)[], '{}'::jsonb
        FROM ins
        CROSS JOIN notify_fanout_job f
        WHERE ins.inserted AND NOT ins.batch_fanout
        RETURNING river_job.queue, river_job.state
    )
    -- A due job wakes its queue; a due small notification, which has no
    -- job, wakes the fan-out queue's name, which the claimers listen for too.
    SELECT ins.id, NOT ins.inserted,
           coalesce((SELECT job.queue FROM job WHERE job.state = 'available'),
                    (SELECT f.queue FROM notify_fanout_job f
                     WHERE ins.inserted AND ins.batch_fanout AND coalesce(p_send_at <= now(), true)))
    INTO id, duplicate, wake_queue
    FROM ins;
    IF wake_queue IS NOT NULL THEN
        woke_at := current_setting('notifyd.fanout_woke_at', true);
        now_ms := extract(epoch FROM clock_timestamp()) * 1000;
        IF woke_at IS NULL OR woke_at !~ '^[0-9]{1,15}(\.[0-9]*)?$'
           OR now_ms - woke_at::numeric >= 20 OR woke_at::numeric > now_ms THEN
            PERFORM pg_notify(current_schema() || '.river_insert', json_build_object('queue', wake_queue)::text);
            PERFORM set_config('notifyd.fanout_woke_at', now_ms::text, false);
        END IF;
    END IF;
END
$$;
