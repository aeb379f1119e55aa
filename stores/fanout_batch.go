package stores

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// ClaimedNotification is a small notification a fan-out claimer took
// (ClaimSmallNotifications): what its fan-out needs, read in the claim.
type ClaimedNotification struct {
	FanoutState
	// Recipients and Reasons are the inline recipients as sent (parallel;
	// not yet deduplicated, the actor not yet removed).
	Recipients []string
	Reasons    []string
}

// claimSmallSQL takes up to $1 due notifications that have no River job of
// their own (batch_fanout: notify_enqueue wrote them so), oldest due first,
// through their partial index, skipping those another claimer holds: two
// claimers (replicas, or loops of one) split the waiting work instead of
// queueing on each other's locks. A scheduled notification is due at
// send_at. The lock is held until the claimer's transaction ends: a crash
// before its commit rolls everything back and leaves the notifications to be
// claimed again. $2 names one notification (a claimer retrying a failed batch
// one by one); NULL takes any.
const claimSmallSQL = `
SELECT n.id::text, n.notifier, n.key, coalesce(n.actor, ''), n.topics, n.params, n.status, n.normalized,
       coalesce(n.tenant, ''),
       (SELECT jsonb_build_object('id', t.id, 'name', t.name, 'branding', t.branding, 'preferences', t.preferences)
        FROM notify_tenants t WHERE t.id = n.tenant),
       n.recipients, n.reasons
FROM notify_notifications n
WHERE n.batch_fanout AND n.status IN ('pending', 'scheduled') AND coalesce(n.send_at, n.created_at) <= now()
  AND ($2::uuid IS NULL OR n.id = $2::uuid)
ORDER BY coalesce(n.send_at, n.created_at), n.id
LIMIT $1
FOR UPDATE OF n SKIP LOCKED`

// ClaimSmallNotifications locks and reads up to limit due small
// notifications in tx (only id, when id is not ""), skipping any another
// transaction holds. They stay locked until tx ends.
func ClaimSmallNotifications(ctx context.Context, tx DB, limit int, id string) ([]ClaimedNotification, error) {
	var only *string
	if id != "" {
		only = &id
	}
	var out []ClaimedNotification
	// On its generic plan (see genericBatch): the same plan every time,
	// never made again per call or per pooled connection.
	b := genericBatch()
	b.Queue(claimSmallSQL, limit, only).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var c ClaimedNotification
			s := &c.FanoutState
			if err := rows.Scan(&s.ID, &s.Notifier, &s.Key, &s.Actor, &s.Topics, &s.Params, &s.Status, &s.Normalized,
				&s.Tenant, &s.TenantRecord, &c.Recipients, &c.Reasons); err != nil {
				return err
			}
			s.ForUpdate = true
			out = append(out, c)
		}
		return rows.Err()
	})
	if err := sendGeneric(ctx, tx, b); err != nil {
		return nil, fmt.Errorf("claim small notifications: %w", err)
	}
	return out, nil
}

// BatchCandidates names the recipients of several notifications whose
// candidates one statement reads (parallel slices, one entry per recipient of
// a notification; Notification indexes the per-notification slices).
type BatchCandidates struct {
	// Per notification.
	Notifiers  []string
	Categories []string
	Tenants    []string
	// Per recipient.
	Notification []int32
	Recipients   []string
	Reasons      []string
}

// batchCandidatesSQL is fanoutCandidatesSQL for the recipients of many
// small notifications at once: each (notification, recipient) pair with the
// recipient's profile, the rules that can apply to its notification's
// notifier (the scopes "*", "notifier:<name>" and, with a category,
// "category:<category>"; for a notification of a tenant its rules scoped to
// that tenant too), the mutes active at $8 and which of the registrations $9
// it has (registered without a tenant, or under the notification's). Rows come
// back in the order given.
const batchCandidatesSQL = `
WITH nt AS (
    SELECT t.ni::int AS ni, t.notifier, t.tenant,
           ARRAY['*', 'notifier:' || t.notifier,
                 CASE WHEN t.category <> '' THEN 'category:' || t.category END] AS scopes
    FROM unnest($1::text[], $2::text[], $3::text[]) WITH ORDINALITY AS t(notifier, category, tenant, ni)
), c AS (
    SELECT u.ord, u.ni, (u.recipient COLLATE "C") AS recipient, u.reason, nt.scopes, nt.tenant
    FROM unnest($4::int[], $5::text[], $6::text[]) WITH ORDINALITY AS u(ni, recipient, reason, ord)
    JOIN nt ON nt.ni = u.ni + 1
)
SELECT c.ni, c.recipient, c.reason,
       coalesce(p.email, ''), CASE WHEN p.webhook_gone_at IS NULL THEN coalesce(p.webhook_url, '') ELSE '' END,
       coalesce(p.name, ''), coalesce(p.locale, ''), coalesce(p.timezone, ''), coalesce(p.phone, ''),
       coalesce(p.quiet_hours::text, ''),
       (SELECT jsonb_agg(r.rule) FROM (
            SELECT jsonb_build_array(pr.scope, pr.channel, pr.mode) AS rule
            FROM notify_preferences pr WHERE pr.recipient = c.recipient AND pr.scope = ANY(c.scopes)
            UNION ALL
            SELECT jsonb_build_array(tp.scope, tp.channel, tp.mode, 'tenant')
            FROM notify_tenant_preferences tp
            WHERE c.tenant <> '' AND tp.recipient = c.recipient AND tp.tenant = c.tenant
              AND tp.scope = ANY(c.scopes)) r),
       ARRAY(SELECT m.target FROM notify_mutes m
             WHERE m.recipient = c.recipient AND (m.until IS NULL OR m.until > $7)),
       CASE WHEN cardinality($8::text[]) = 0 THEN '{}'::text[] ELSE ARRAY(
           SELECT reg FROM unnest($8::text[]) AS reg
           WHERE CASE WHEN reg = 'push_subscription'
                      THEN EXISTS (SELECT 1 FROM notify_push_subscriptions ps
                                   WHERE ps.recipient = c.recipient COLLATE "default"
                                     AND (ps.tenant IS NULL OR ps.tenant = nullif(c.tenant, '')))
                      ELSE EXISTS (SELECT 1 FROM notify_devices dv
                                   WHERE dv.recipient = c.recipient AND dv.platform = substr(reg, 8)
                                     AND (dv.tenant IS NULL OR dv.tenant = nullif(c.tenant, ''))) END) END
FROM c
LEFT JOIN LATERAL (SELECT * FROM notify_recipients p WHERE p.id = c.recipient LIMIT 1) p ON true
ORDER BY c.ord`

// FanoutBatchCandidates reads the candidates of every recipient in q in one
// statement, in q's order: out[i] is the candidate of q.Recipients[i], of
// notification q.Notification[i]. Mutes are those active at now;
// registrations are asked as in FanoutCandidates.
func FanoutBatchCandidates(ctx context.Context, tx DB, q *BatchCandidates, now time.Time,
	registrations []string) ([]Candidate, error) {
	out := make([]Candidate, 0, len(q.Recipients))
	b := genericBatch()
	b.Queue(batchCandidatesSQL, nonNil(q.Notifiers), nonNil(q.Categories), nonNil(q.Tenants),
		nonNilOf(q.Notification), nonNil(q.Recipients), nonNil(q.Reasons), now, nonNil(registrations)).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var c Candidate
			var ni int32
			if err := rows.Scan(&ni, &c.Recipient, &c.Reason, &c.Email, &c.WebhookURL, &c.Name, &c.Locale,
				&c.Timezone, &c.Phone, &c.QuietHours, &c.Rules, &c.Mutes, &c.Registrations); err != nil {
				return err
			}
			out = append(out, c)
		}
		return rows.Err()
	})
	if err := sendGeneric(ctx, tx, b); err != nil {
		return nil, fmt.Errorf("fan-out candidates of %d notifications: %w", len(q.Notifiers), err)
	}
	if len(out) != len(q.Recipients) {
		return nil, fmt.Errorf("fan-out candidates of %d notifications: %d rows for %d recipients",
			len(q.Notifiers), len(out), len(q.Recipients))
	}
	return out, nil
}

// FanoutBatch is what one claimer transaction writes for the small
// notifications it fans out: every chunk's inbox items and delivery rows
// (a Chunk per notification, each without throttles, batches or lanes), and
// the notifications it rejects.
type FanoutBatch struct {
	Chunks []*Chunk
	// Rejected notifications and why (parallel).
	RejectedIDs     []string
	RejectedReasons []string
	// HandedOff notifications get a notify.fanout job of their own (inserted
	// by the caller in the same transaction): the batch does not fan out
	// what needs an audience query, notifier batching, a throttle or a bulk
	// channel.
	HandedOffIDs []string
}

// FanoutBatchResult says what a batch wrote.
type FanoutBatchResult struct {
	// InboxIDs and InboxRecipients are every new inbox item, chunk by chunk.
	InboxIDs        []string
	InboxRecipients []string
	// Pending deliveries, which need send jobs.
	PendingIDs []string
	// Scheduled deliveries and when they are due.
	ScheduledIDs []string
	ScheduledDue []time.Time
}

// writeBatchSQL writes the inbox items and delivery rows of many small
// notifications in one statement and marks each fanned out, normalised and
// out of the claimers' index; it also marks the rejected ones rejected and
// the handed-off ones as a River job's ($25; their jobs are the caller's). The
// notifications are locked by the claim and have written nothing yet (their
// fan-out is one transaction, committed whole or not at all), so the inserts
// are plain: a duplicate is an error, not a replay. Per-notification values
// ($1-$10) are joined to each row by its notification's index.
const writeBatchSQL = `
WITH nt AS (
    SELECT t.id::uuid AS id, t.notifier, t.key, t.category, t.actor, t.title, t.body, t.url, t.params::jsonb AS params,
           t.tenant, t.ni::int AS ni
    FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[],
                $9::text[], $10::text[]) WITH ORDINALITY
         AS t(id, notifier, key, category, actor, title, body, url, params, tenant, ni)
), inbox AS (
    INSERT INTO notify_inbox (id, notification_id, recipient, notifier, key, category, reason, actor, title, body, url, params,
                              tenant)
    SELECT u.id::uuid, nt.id, u.recipient, nt.notifier, nt.key, nt.category, u.reason, nullif(nt.actor, ''),
           coalesce(($29::text[])[u.v], nt.title), coalesce(($30::text[])[u.v], nt.body),
           coalesce(($31::text[])[u.v], nt.url), nt.params, nullif(nt.tenant, '')
    FROM unnest($11::text[], $12::int[], $13::text[], $14::text[], $28::int[]) AS u(id, ni, recipient, reason, v)
    JOIN nt ON nt.ni = u.ni + 1
), dl AS (
    INSERT INTO notify_deliveries (id, notification_id, notifier, key, recipient, channel, reason, mode, status,
                                   last_error, settled_at, next_attempt_at, unless, tenant)
    SELECT d.id::uuid, nt.id, nt.notifier, nt.key, nullif(d.recipient, ''), d.channel, d.reason, d.mode, d.status,
           nullif(d.err, ''), CASE WHEN d.status IN ('unavailable', 'skipped', 'batched') THEN now() END,
           d.due, nullif(d.unless, ''), nullif(nt.tenant, '')
    FROM unnest($15::text[], $16::int[], $17::text[], $18::text[], $19::text[], $20::text[], $21::text[], $22::text[],
                $23::timestamptz[], $24::text[])
         AS d(id, ni, recipient, channel, reason, mode, status, err, due, unless)
    JOIN nt ON nt.ni = d.ni + 1
    RETURNING id, status, next_attempt_at
), fin AS (
    UPDATE notify_notifications n
    SET status = 'fanned_out', normalized = true, batch_fanout = false, updated_at = now()
    FROM nt WHERE n.id = nt.id
    RETURNING 1
), rej AS (
    UPDATE notify_notifications n
    SET status = 'rejected', error = r.reason, batch_fanout = false, updated_at = now()
    FROM unnest($26::text[], $27::text[]) AS r(id, reason)
    WHERE n.id = r.id::uuid
    RETURNING 1
), handed AS (
    UPDATE notify_notifications n
    SET batch_fanout = false, updated_at = now()
    WHERE n.id = ANY($25::text[]::uuid[])
    RETURNING 1
-- Every data-modifying WITH runs whether or not the query reads it.
)
SELECT 'd', id::text, '' FROM dl WHERE status = 'pending'
UNION ALL
SELECT 's', id::text, (extract(epoch FROM next_attempt_at) * 1000000)::bigint::text FROM dl WHERE status = 'scheduled'`

// WriteFanoutBatch writes b in tx (see writeBatchSQL) and reports what it
// inserted.
func WriteFanoutBatch(ctx context.Context, tx DB, b *FanoutBatch) (*FanoutBatchResult, error) {
	var (
		nIDs, nNotifiers, nKeys, nCategories, nActors, nTitles, nBodies, nURLs, nParams, nTenants []string

		iIDs, iRecipients, iReasons []string
		iNotification, iVariants    []int32
		variants                    []InboxText

		dIDs, dRecipients, dChannels, dReasons, dModes, dStatuses, dErrors, dUnless []string
		dNotification                                                               []int32
		dDue                                                                        []*time.Time
	)
	res := &FanoutBatchResult{}
	for i, c := range b.Chunks {
		params := c.Params
		if params == nil {
			params = json.RawMessage("{}")
		}
		nIDs = append(nIDs, c.NotificationID)
		nNotifiers = append(nNotifiers, c.Notifier)
		nKeys = append(nKeys, c.Key)
		nCategories = append(nCategories, c.Category)
		nActors = append(nActors, c.Actor)
		nTitles = append(nTitles, c.Title)
		nBodies = append(nBodies, c.Body)
		nURLs = append(nURLs, c.URL)
		nParams = append(nParams, string(params))
		nTenants = append(nTenants, c.Tenant)
		for j := range c.InboxIDs {
			iIDs = append(iIDs, c.InboxIDs[j])
			iNotification = append(iNotification, int32(i))
			iRecipients = append(iRecipients, c.InboxRecipients[j])
			iReasons = append(iReasons, c.InboxReasons[j])
			// A chunk's variant k is variants[base+k-1] of the batch.
			v := int32(0)
			if j < len(c.InboxVariants) && c.InboxVariants[j] > 0 {
				v = c.InboxVariants[j] + int32(len(variants))
			}
			iVariants = append(iVariants, v)
		}
		variants = append(variants, c.Variants...)
		due, unless := dues(c), padded(c, c.DeliveryUnless)
		for j := range c.DeliveryIDs {
			dIDs = append(dIDs, c.DeliveryIDs[j])
			dNotification = append(dNotification, int32(i))
			dRecipients = append(dRecipients, c.DeliveryRecipients[j])
			dChannels = append(dChannels, c.DeliveryChannels[j])
			dReasons = append(dReasons, c.DeliveryReasons[j])
			dModes = append(dModes, c.DeliveryModes[j])
			dStatuses = append(dStatuses, c.DeliveryStatuses[j])
			dErrors = append(dErrors, c.DeliveryErrors[j])
			dDue = append(dDue, due[j])
			dUnless = append(dUnless, unless[j])
		}
		res.InboxIDs = append(res.InboxIDs, c.InboxIDs...)
		res.InboxRecipients = append(res.InboxRecipients, c.InboxRecipients...)
	}
	titles, bodies, urls := variantColumns(variants)
	rows, err := tx.Query(ctx, writeBatchSQL,
		nonNil(nIDs), nonNil(nNotifiers), nonNil(nKeys), nonNil(nCategories), nonNil(nActors), nonNil(nTitles),
		nonNil(nBodies), nonNil(nURLs), nonNil(nParams), nonNil(nTenants),
		nonNil(iIDs), nonNilOf(iNotification), nonNil(iRecipients), nonNil(iReasons),
		nonNil(dIDs), nonNilOf(dNotification), nonNil(dRecipients), nonNil(dChannels), nonNil(dReasons), nonNil(dModes),
		nonNil(dStatuses), nonNil(dErrors), nonNilOf(dDue), nonNil(dUnless),
		nonNil(b.HandedOffIDs), nonNil(b.RejectedIDs), nonNil(b.RejectedReasons),
		nonNilOf(iVariants), titles, bodies, urls)
	if err != nil {
		return nil, fmt.Errorf("write fan-out batch of %d notifications: %w", len(b.Chunks), err)
	}
	defer rows.Close()
	for rows.Next() {
		var kind, id, extra string
		if err := rows.Scan(&kind, &id, &extra); err != nil {
			return nil, err
		}
		switch kind {
		case "d":
			res.PendingIDs = append(res.PendingIDs, id)
		case "s":
			us, err := strconv.ParseInt(extra, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("write fan-out batch: due instant %q", extra)
			}
			res.ScheduledIDs = append(res.ScheduledIDs, id)
			res.ScheduledDue = append(res.ScheduledDue, time.UnixMicro(us))
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("write fan-out batch of %d notifications: %w", len(b.Chunks), err)
	}
	return res, nil
}
