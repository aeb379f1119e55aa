package stores

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// FanoutState is a notification as the fan-out job sees it, read under a
// share lock (a cancel waits for the chunk; other lanes' chunks do not), with
// the lane the job works on, locked for update.
type FanoutState struct {
	ID         string
	Notifier   string
	Key        string
	Actor      string
	Topics     []string
	Params     json.RawMessage
	Status     string
	Normalized bool
	// Tenant is the notification's tenant ("" for none), and TenantRecord
	// the tenant as it is now ({"id", "name", "branding", "preferences"}; nil
	// for none, or for a tenant deleted since the send).
	Tenant       string
	TenantRecord json.RawMessage
	// ForUpdate says the notification row is locked for update (LockFanout
	// asked to), not only shared: the normalisation needs no second lock.
	ForUpdate bool
	// Lane is the job's lane; nil before normalisation.
	Lane *FanoutLane
}

// FanoutLane is one lane's progress (sql/migrations/00003_fanout_lanes.sql).
type FanoutLane struct {
	Lane      int
	Cursor    *string
	InlinePos int
	Done      bool
}

// lockFanoutSQL reads a notification for its fan-out under a share lock;
// lockFanoutForUpdateSQL under the update lock a normalisation needs.
const (
	readFanoutSQL = `
SELECT n.id::text, n.notifier, n.key, coalesce(n.actor, ''), n.topics, n.params, n.status, n.normalized,
       coalesce(n.tenant, ''),
       (SELECT jsonb_build_object('id', t.id, 'name', t.name, 'branding', t.branding, 'preferences', t.preferences)
        FROM notify_tenants t WHERE t.id = n.tenant)
FROM notify_notifications n
WHERE n.id = $1`
	lockFanoutSQL          = readFanoutSQL + ` FOR SHARE OF n`
	lockFanoutForUpdateSQL = readFanoutSQL + ` FOR UPDATE OF n`
)

const lockLaneSQL = `
SELECT lane, cursor, inline_pos, done
FROM notify_fanout_lanes
WHERE notification_id = $1 AND lane = $2
FOR UPDATE`

// LockFanout reads notification id with a share lock (an update lock with
// forUpdate: the caller expects to normalise it) and its lane with an update
// lock, both until tx ends, in one round trip.
func LockFanout(ctx context.Context, tx DB, id string, lane int, forUpdate bool) (*FanoutState, error) {
	s := FanoutState{ForUpdate: forUpdate}
	var found bool
	b := &pgx.Batch{}
	q := lockFanoutSQL
	if forUpdate {
		q = lockFanoutForUpdateSQL
	}
	b.Queue(q, id).QueryRow(func(row pgx.Row) error {
		err := row.Scan(&s.ID, &s.Notifier, &s.Key, &s.Actor, &s.Topics, &s.Params, &s.Status, &s.Normalized,
			&s.Tenant, &s.TenantRecord)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		found = err == nil
		return err
	})
	b.Queue(lockLaneSQL, id, lane).QueryRow(func(row pgx.Row) error {
		var l FanoutLane
		err := row.Scan(&l.Lane, &l.Cursor, &l.InlinePos, &l.Done)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err == nil {
			s.Lane = &l
		}
		return err
	})
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return nil, fmt.Errorf("lock fan-out of %s: %w", id, err)
	}
	if !found {
		return nil, ErrNotFound
	}
	return &s, nil
}

const lockNotificationSQL = `SELECT 1 FROM notify_notifications WHERE id = $1 FOR UPDATE`

// LockNotificationForUpdate takes the update lock on notification id (the
// fan-out's normalisation rewrites the row).
func LockNotificationForUpdate(ctx context.Context, tx DB, id string) error {
	if _, err := tx.Exec(ctx, lockNotificationSQL, id); err != nil {
		return fmt.Errorf("lock notification %s: %w", id, err)
	}
	return nil
}

// normalizeAudienceSQL rewrites the inline recipients once, set-based: sorted
// by id in byte order, one entry per id with its strongest reason ($2 is the
// configured precedence, strongest first; unknown reasons rank last), the actor
// removed unless $3 (notify_actor). It returns the size of the whole audience
// (inline plus topic subscribers, deduplicated) for the max_recipients check,
// the topics, and the recipient ids at the quantiles $4 of the audience in
// byte order: where to split it into lanes.
//
// One sort does the deduplication, and the arrays are aggregated in its
// order. A list SendTx marked sorted (no id twice) is kept as it is, without
// that sort, unless the actor must be taken out of it.
// Without topics the audience is the inline list itself: counted and split by
// position, with no union to hash and no second sort; a single topic without
// inline recipients is counted and split along its subscription index. With
// $5 the notification has an audience, staged in notify_audience_members
// (StageAudience, already without the actor): alone, it is counted and
// split along its primary key like a single topic. Only
// a mix of sources is deduplicated (a hashed union) and sorted for the split.
// A list that was sorted and deduplicated already keeps its stored value: the
// new row version points at the same TOAST data instead of writing a copy.
const normalizeAudienceSQL = `
WITH n AS (
    SELECT id, actor, recipients, reasons, topics,
           inline_sorted AND ($3 OR actor IS NULL OR actor <> ALL(recipients)) AS kept
    FROM notify_notifications WHERE id = $1
), inl AS (
    SELECT DISTINCT ON (r.rid COLLATE "C") r.rid, r.reason
    FROM n, unnest(n.recipients, n.reasons) AS r(rid, reason)
    WHERE NOT n.kept AND ($3 OR n.actor IS NULL OR r.rid <> n.actor)
    ORDER BY r.rid COLLATE "C", coalesce(array_position($2::text[], r.reason), 2147483647), r.reason
), agg AS (
    SELECT n.recipients AS rids, n.reasons AS rsns FROM n WHERE n.kept
    UNION ALL
    SELECT coalesce(array_agg(s.rid), '{}'), coalesce(array_agg(s.reason), '{}')
    FROM (SELECT rid, reason FROM inl ORDER BY rid COLLATE "C") s
    HAVING NOT (SELECT kept FROM n)
), cnt AS (
    SELECT cardinality(agg.rids)::bigint AS audience,
           ARRAY(SELECT agg.rids[floor(q * cardinality(agg.rids))::int + 1] FROM unnest($4::float8[]) AS q) AS bounds
    FROM n, agg
    WHERE cardinality(n.topics) = 0 AND NOT $5
    UNION ALL
    SELECT t.audience,
           ARRAY(SELECT (SELECT s.recipient FROM notify_subscriptions s
                         WHERE s.topic = n.topics[1] AND ($3 OR n.actor IS NULL OR s.recipient <> n.actor)
                         ORDER BY s.recipient OFFSET floor(q * t.audience)::bigint LIMIT 1)
                 FROM unnest($4::float8[]) AS q)
    FROM n, agg, LATERAL (
        SELECT count(*) AS audience FROM notify_subscriptions s
        WHERE s.topic = n.topics[1] AND ($3 OR n.actor IS NULL OR s.recipient <> n.actor)
    ) t
    WHERE cardinality(n.topics) = 1 AND cardinality(agg.rids) = 0 AND NOT $5
    UNION ALL
    SELECT t.audience,
           ARRAY(SELECT (SELECT m.recipient FROM notify_audience_members m
                         WHERE m.notification_id = $1
                         ORDER BY m.recipient OFFSET floor(q * t.audience)::bigint LIMIT 1)
                 FROM unnest($4::float8[]) AS q)
    FROM n, agg, LATERAL (
        SELECT count(*) AS audience FROM notify_audience_members m WHERE m.notification_id = $1
    ) t
    WHERE $5 AND cardinality(n.topics) = 0 AND cardinality(agg.rids) = 0
    UNION ALL
    SELECT u.audience, u.bounds
    FROM (
        SELECT count(*) AS audience,
               coalesce(percentile_disc($4::float8[]) WITHIN GROUP (ORDER BY a.rid COLLATE "C"), '{}') AS bounds
        FROM n, agg, LATERAL (
            SELECT unnest(agg.rids) AS rid
            UNION
            SELECT s.recipient FROM notify_subscriptions s
            WHERE s.topic = ANY(n.topics) AND ($3 OR n.actor IS NULL OR s.recipient <> n.actor)
            UNION
            SELECT m.recipient FROM notify_audience_members m WHERE $5 AND m.notification_id = $1
        ) a
        -- Repeated here so that the union is not even read when not needed.
        WHERE cardinality(n.topics) > 1 OR (cardinality(n.topics) = 1 AND cardinality(agg.rids) > 0)
           OR ($5 AND cardinality(n.topics) + cardinality(agg.rids) > 0)
    ) u, n, agg
    WHERE cardinality(n.topics) > 1 OR (cardinality(n.topics) = 1 AND cardinality(agg.rids) > 0)
       OR ($5 AND cardinality(n.topics) + cardinality(agg.rids) > 0)
)
UPDATE notify_notifications nn
SET recipients = CASE WHEN n.kept OR nn.recipients = agg.rids THEN nn.recipients ELSE agg.rids END,
    reasons = CASE WHEN n.kept OR nn.reasons = agg.rsns THEN nn.reasons ELSE agg.rsns END,
    topics = ARRAY(SELECT DISTINCT t FROM unnest(nn.topics) t ORDER BY t),
    normalized = true, status = 'pending', updated_at = now()
FROM n, agg, cnt
WHERE nn.id = $1
RETURNING cnt.audience, nn.topics, array_remove(cnt.bounds, NULL)`

const setNormalizeWorkMemSQL = `SET LOCAL work_mem = '64MB'`

// Audience is a normalised notification's audience.
type Audience struct {
	// Size counts the distinct recipients, inline and through topics.
	Size int
	// Topics are the notification's topics, deduplicated.
	Topics []string
	// Bounds are the recipient ids at the quantiles NormalizeAudience was
	// asked for, ascending and without duplicates.
	Bounds []string
}

// NormalizeAudience prepares notification id for chunked fan-out and returns
// its audience, with the recipient ids that cut it into lanes ranges of about
// equal size (none for one lane).
//
// With audience, the members StageAudience wrote are part of it.
func NormalizeAudience(ctx context.Context, tx DB, id string, reasons []string, notifyActor bool, lanes int,
	audience bool) (*Audience, error) {
	q := make([]float64, max(lanes-1, 0))
	for i := range q {
		q[i] = float64(i+1) / float64(lanes)
	}
	var a Audience
	var size int64
	// The dedupe sort and the audience count of a large list spill to disk
	// at PostgreSQL's default work_mem; this transaction does nothing else.
	// On its generic plan (see genericBatch): made for each notification,
	// the plan took 0.9 ms to make and 0.1 ms to run for a small audience.
	// One round trip for all of it.
	b := genericBatch()
	b.Queue(setNormalizeWorkMemSQL)
	b.Queue(normalizeAudienceSQL, id, reasons, notifyActor, q, audience).QueryRow(func(row pgx.Row) error {
		return row.Scan(&size, &a.Topics, &a.Bounds)
	})
	if err := sendGeneric(ctx, tx, b); err != nil {
		return nil, fmt.Errorf("normalize audience of %s: %w", id, err)
	}
	a.Size = int(size)
	a.Bounds = slices.Compact(slices.DeleteFunc(a.Bounds, func(b string) bool { return b == "" }))
	return &a, nil
}

const rejectNotificationSQL = `
UPDATE notify_notifications SET status = 'rejected', error = $2, updated_at = now() WHERE id = $1`

// RejectNotification marks id rejected with reason; nothing of it is
// delivered, and what is left of its audience members is deleted.
func RejectNotification(ctx context.Context, tx DB, id, reason string) error {
	b := &pgx.Batch{}
	b.Queue(rejectNotificationSQL, id, reason)
	b.Queue(dropAudienceSQL, id)
	return tx.SendBatch(ctx, b).Close()
}

const deleteLanesSQL = `DELETE FROM notify_fanout_lanes WHERE notification_id = $1`

// createLanesSQL gives notification $1 (without lanes) one lane per range the
// ascending bounds $2 cut (lane 0 from the start, the last to the end), each
// with the positions of its inline entries in the sorted inline list: the
// number of entries before the lane's bounds. The list is sorted in byte
// order and deduplicated, so where a bound is an entry (always, for an
// audience of inline recipients only: the bounds are taken from the list) the
// count is the bound's position less one, which array_position finds with
// byte comparisons and no row per entry, about a tenth of counting. A bound
// from a topic's subscribers that is not an entry is counted.
const createLanesSQL = `
WITH b AS (
    SELECT (i - 1)::int AS lane, lo, lead(lo) OVER (ORDER BY i) AS hi
    FROM unnest(ARRAY[NULL]::text[] || $2::text[]) WITH ORDINALITY AS b(lo, i)
)
INSERT INTO notify_fanout_lanes (notification_id, lane, lo, hi, inline_pos, inline_end)
SELECT $1, b.lane, b.lo, b.hi,
       CASE WHEN b.lo IS NULL THEN 0
            ELSE coalesce(array_position(n.recipients, b.lo) - 1,
                          (SELECT count(*) FROM unnest(n.recipients) r WHERE r < b.lo COLLATE "C")) END,
       CASE WHEN b.hi IS NULL THEN cardinality(n.recipients)
            ELSE coalesce(array_position(n.recipients, b.hi) - 1,
                          (SELECT count(*) FROM unnest(n.recipients) r WHERE r < b.hi COLLATE "C")) END
FROM notify_notifications n, b
WHERE n.id = $1`

// CreateLanes gives normalised notification id one lane per range the
// ascending bounds cut (none: a single lane), replacing any it had.
func CreateLanes(ctx context.Context, tx DB, id string, bounds []string) error {
	b := &pgx.Batch{}
	b.Queue(deleteLanesSQL, id)
	b.Queue(createLanesSQL, id, nonNil(bounds))
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("create fan-out lanes of %s: %w", id, err)
	}
	return nil
}

// finishFanoutSQL marks notification $1 fanned out once all its lanes are
// done.
const finishFanoutSQL = `
UPDATE notify_notifications SET status = 'fanned_out', updated_at = now()
WHERE id = $1 AND status = 'pending'
  AND NOT EXISTS (SELECT 1 FROM notify_fanout_lanes WHERE notification_id = $1 AND NOT done)`

// FinishFanout marks notification id fanned out if every lane is done, and
// reports whether it did. A lane whose last chunk could not tell (another
// lane finished at the same time, uncommitted) calls it after committing:
// of lanes finishing together, the last to commit sees all of them done.
func FinishFanout(ctx context.Context, tx DB, id string) (bool, error) {
	tag, err := tx.Exec(ctx, finishFanoutSQL, id)
	if err != nil {
		return false, fmt.Errorf("finish fan-out of %s: %w", id, err)
	}
	return tag.RowsAffected() == 1, nil
}

// Candidate is one recipient the next fan-out chunk may reach, with what mode
// resolution needs. Source is 0 for the inline list, i for the i-th topic and
// one past the topics for the audience query's members.
type Candidate struct {
	Source     int
	Recipient  string
	Reason     string
	Email      string
	WebhookURL string
	Name       string
	Locale     string
	Timezone   string
	Phone      string
	QuietHours string // the profile's quiet_hours JSON, "" for none
	// Rules are the recipient's rules that can apply to this notifier,
	// [[scope, channel, mode], ...], and, for a notification of a tenant,
	// their rules scoped to it, [scope, channel, mode, "tenant"]; null for
	// none.
	Rules json.RawMessage
	Mutes []string // active mute targets ("notifier:x", "topic:y")
	// Registrations are those of the asked-for registrations the recipient
	// has: RegistrationPushSubscription, RegistrationDevice+platform.
	Registrations []string
}

// The registrations FanoutCandidates can be asked about, as the channels
// name them (channels.PushSubscriptionAddress, channels.DeviceAddress).
const (
	// RegistrationPushSubscription: the recipient has a browser push
	// subscription.
	RegistrationPushSubscription = "push_subscription"
	// RegistrationDevice and a platform: the recipient has a device of
	// that platform.
	RegistrationDevice = "device:"
)

// fanoutCandidatesSQL reads the next window of each audience source within
// lane $4: up to $2 inline entries past the lane's inline position (not past
// its end), and up to $2 subscribers of each topic past the lane's cursor and
// below its upper bound (an index range scan per topic), and as many of the
// notification's audience members the same way, as source $8 (0: it has no
// audience). The caller merges the
// windows and takes what is complete (see jobs.mergeChunk). The inline window
// is an array slice, so a chunk costs the same at the end of a million-entry
// list as at its start; the LIMIT 1 in the profile lookup keeps the planner
// from a merge join that scans the profiles from the first id on every chunk.
// Profile (only with $5: an in_app-only notifier addresses nobody by it), the
// preference rules that can apply ($3: the scopes of this notifier; for a
// notification of a tenant, the recipient's rules scoped to that tenant too,
// by the primary key's prefix), mutes
// active at $6 (the fan-out's clock, which also times its quiet hours and
// delays) and which of the registrations $7 the recipient has (browser push
// subscriptions, devices by platform, registered without a tenant or under
// the notification's; an index probe each, only for a notifier with a
// channel that needs them) come along in the same
// statement: one read per chunk, no per-recipient round trip. (Push
// subscriptions' recipient has the default collation, unlike every other
// recipient id: the probe compares in it, or its index is not used.)
const fanoutCandidatesSQL = `
WITH n AS (
    SELECT nn.recipients, nn.reasons, nn.topics, nn.tenant, l.cursor, l.lo, l.hi, l.inline_pos,
           least(l.inline_pos + $2, l.inline_end) AS inline_to
    FROM notify_notifications nn
    JOIN notify_fanout_lanes l ON l.notification_id = nn.id AND l.lane = $4
    WHERE nn.id = $1
), c AS (
    (SELECT 0 AS source, r.rid AS recipient, r.reason
     FROM n, unnest(n.recipients[n.inline_pos + 1 : n.inline_to],
                    n.reasons[n.inline_pos + 1 : n.inline_to]) AS r(rid, reason))
    UNION ALL
    (SELECT t.idx::int AS source, s.recipient, s.reason
     FROM n, unnest(n.topics) WITH ORDINALITY AS t(topic, idx),
     LATERAL (SELECT sub.recipient, sub.reason FROM notify_subscriptions sub
              WHERE sub.topic = t.topic AND sub.recipient > coalesce(n.cursor, '')
                AND sub.recipient >= coalesce(n.lo, '') AND (n.hi IS NULL OR sub.recipient < n.hi)
              ORDER BY sub.recipient
              LIMIT $2) s)
    UNION ALL
    (SELECT $8::int AS source, m.recipient, m.reason
     FROM n, LATERAL (SELECT am.recipient, am.reason FROM notify_audience_members am
                      WHERE am.notification_id = $1 AND am.recipient > coalesce(n.cursor, '')
                        AND am.recipient >= coalesce(n.lo, '') AND (n.hi IS NULL OR am.recipient < n.hi)
                      ORDER BY am.recipient
                      LIMIT $2) m
     WHERE $8 > 0)
)
SELECT c.source, c.recipient, c.reason,
       coalesce(p.email, ''), CASE WHEN p.webhook_gone_at IS NULL THEN coalesce(p.webhook_url, '') ELSE '' END,
       coalesce(p.name, ''), coalesce(p.locale, ''), coalesce(p.timezone, ''), coalesce(p.phone, ''),
       coalesce(p.quiet_hours::text, ''),
       (SELECT jsonb_agg(r.rule) FROM (
            SELECT jsonb_build_array(pr.scope, pr.channel, pr.mode) AS rule
            FROM notify_preferences pr WHERE pr.recipient = c.recipient AND pr.scope = ANY($3::text[])
            UNION ALL
            SELECT jsonb_build_array(tp.scope, tp.channel, tp.mode, 'tenant')
            FROM n, notify_tenant_preferences tp
            WHERE n.tenant IS NOT NULL AND tp.recipient = c.recipient AND tp.tenant = n.tenant
              AND tp.scope = ANY($3::text[])) r),
       ARRAY(SELECT m.target FROM notify_mutes m
             WHERE m.recipient = c.recipient AND (m.until IS NULL OR m.until > $6)),
       CASE WHEN cardinality($7::text[]) = 0 THEN '{}'::text[] ELSE ARRAY(
           SELECT reg FROM unnest($7::text[]) AS reg
           WHERE CASE WHEN reg = 'push_subscription'
                      THEN EXISTS (SELECT 1 FROM n, notify_push_subscriptions ps
                                   WHERE ps.recipient = c.recipient COLLATE "default"
                                     AND (ps.tenant IS NULL OR ps.tenant = n.tenant))
                      ELSE EXISTS (SELECT 1 FROM n, notify_devices dv
                                   WHERE dv.recipient = c.recipient AND dv.platform = substr(reg, 8)
                                     AND (dv.tenant IS NULL OR dv.tenant = n.tenant)) END) END
FROM c
LEFT JOIN LATERAL (SELECT * FROM notify_recipients p WHERE $5 AND p.id = c.recipient LIMIT 1) p ON true`

// FanoutCandidates reads the next window of lane lane of notification id's
// audience; with profiles, each candidate's profile fields too (left empty
// otherwise). Each candidate's Mutes are those active at now; its
// Registrations are which of registrations (RegistrationPushSubscription,
// RegistrationDevice+platform; none: nothing is read) it has. A positive
// audienceSource reads the notification's audience members too, as that
// source (one past its topics).
func FanoutCandidates(ctx context.Context, tx DB, id string, lane, window int, scopes []string, profiles bool,
	now time.Time, registrations []string, audienceSource int) ([]Candidate, error) {
	// On its generic plan (see genericBatch): made for each notification,
	// the plan took 0.5 ms to make and 0.06 ms to run for a small audience.
	var out []Candidate
	b := genericBatch()
	b.Queue(fanoutCandidatesSQL, id, window, scopes, lane, profiles, now, nonNil(registrations), audienceSource).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var c Candidate
			if err := rows.Scan(&c.Source, &c.Recipient, &c.Reason, &c.Email, &c.WebhookURL, &c.Name, &c.Locale,
				&c.Timezone, &c.Phone, &c.QuietHours, &c.Rules, &c.Mutes, &c.Registrations); err != nil {
				return err
			}
			out = append(out, c)
		}
		return rows.Err()
	})
	if err := sendGeneric(ctx, tx, b); err != nil {
		return nil, fmt.Errorf("fan-out candidates of %s: %w", id, err)
	}
	return out, nil
}

// Chunk is what one fan-out transaction writes.
type Chunk struct {
	NotificationID string
	Notifier       string
	Key            string
	Category       string
	Actor          string
	Title          string
	Body           string
	URL            string
	Params         json.RawMessage
	// Tenant is the notification's tenant, carried by every inbox item and
	// delivery ("" for none).
	Tenant string

	// Inbox items (parallel slices).
	InboxIDs        []string
	InboxRecipients []string
	InboxReasons    []string
	// InboxVariants gives each inbox item its text when recipients read
	// different locales: 0 is Title, Body and URL, k is Variants[k-1]. nil
	// (or shorter than InboxIDs): the rest are 0.
	InboxVariants []int32
	Variants      []InboxText

	// Delivery rows (parallel slices). Recipient "" is a bulk delivery.
	DeliveryIDs        []string
	DeliveryRecipients []string
	DeliveryChannels   []string
	DeliveryReasons    []string
	DeliveryModes      []string
	DeliveryStatuses   []string
	DeliveryErrors     []string
	// DeliveryDue is when a scheduled delivery is due (next_attempt_at;
	// nil for any other), DeliveryUnless its `unless` condition ("" none).
	// Both may be nil for a chunk without workflows: see Workflow.
	DeliveryDue    []*time.Time
	DeliveryUnless []string
	// DeliveryBatch is the batch a delivery carries, DeliveryBatchedInto the
	// delivery that carries a `batched` one ("" none; nil slices: none).
	DeliveryBatch       []string
	DeliveryBatchedInto []string

	// Throttled candidates (parallel slices): deliveries that count against
	// a throttle, each with its limit, window (seconds) and the last_error a
	// refused one gets. A candidate the throttle refuses is written
	// `throttled` instead of its status. See sql/migrations/00015_workflows.sql.
	ThrottleIDs        []string
	ThrottleRecipients []string
	ThrottleChannels   []string
	ThrottleLimits     []int32
	ThrottlePers       []float64
	ThrottleErrors     []string

	// Progress of lane Lane after this chunk (Lane -1: no lane progress, as
	// for the bulk rows written at normalisation). Done finishes the lane.
	Lane      int
	Cursor    *string
	InlinePos int
	Done      bool
}

// InboxText is an inbox item's text as rendered for one locale and zone.
type InboxText struct {
	Title, Body, URL string
}

// variantColumns returns the variants' titles, bodies and urls as arrays.
func variantColumns(v []InboxText) (titles, bodies, urls []string) {
	titles, bodies, urls = make([]string, len(v)), make([]string, len(v)), make([]string, len(v))
	for i, t := range v {
		titles[i], bodies[i], urls[i] = t.Title, t.Body, t.URL
	}
	return titles, bodies, urls
}

// ChunkResult says what a chunk actually inserted (a replayed chunk inserts
// nothing it already wrote).
type ChunkResult struct {
	InboxIDs        []string
	InboxRecipients []string
	// Pending deliveries, which need send jobs.
	PendingIDs      []string
	PendingChannels []string
	// Scheduled deliveries, which need send jobs at their due instants.
	ScheduledIDs []string
	ScheduledDue []time.Time
	// Throttled deliveries (refused by their throttle), by channel.
	ThrottledChannels []string
	// Finished: the chunk finished its lane and every other lane was done
	// already, so the notification is now fanned_out.
	Finished bool
}

// writeChunkSQL writes a chunk's inbox items, delivery rows and its lane's
// progress in one statement, and on the lane's last chunk marks the
// notification fanned_out when the other lanes are done (as this statement
// sees them: see FinishFanout). ON CONFLICT DO NOTHING on both identities
// makes a replay write nothing twice and move no timestamp; only what was
// inserted is returned, so only new pending deliveries get send jobs. Inbox
// items are returned only when some were skipped: normally every one is new,
// and the caller has their ids already.
const writeChunkSQL = `
WITH tc AS (
    SELECT * FROM unnest($24::text[], $25::text[], $26::text[], $27::int[], $28::float8[], $29::text[])
                  AS u(id, recipient, channel, lim, per_s, msg)
), th AS (
    INSERT INTO notify_throttle AS t (recipient, notifier, channel, lim, per, admitted, last_delivery, updated_at)
    SELECT tc.recipient, $2, tc.channel, tc.lim, tc.per_s * interval '1 second', ARRAY[now()], tc.id::uuid, now()
    FROM tc
    ON CONFLICT (recipient, notifier, channel) DO UPDATE
    SET lim = EXCLUDED.lim, per = EXCLUDED.per, updated_at = now(),
        admitted = ARRAY(SELECT a FROM unnest(t.admitted) a WHERE a > now() - EXCLUDED.per ORDER BY a)
                   || CASE WHEN (SELECT count(*) FROM unnest(t.admitted) a WHERE a > now() - EXCLUDED.per) < EXCLUDED.lim
                           THEN ARRAY[now()] ELSE '{}'::timestamptz[] END,
        last_delivery = CASE WHEN (SELECT count(*) FROM unnest(t.admitted) a WHERE a > now() - EXCLUDED.per) < EXCLUDED.lim
                             THEN EXCLUDED.last_delivery ELSE t.last_delivery END
    RETURNING t.last_delivery
), inbox AS (
    INSERT INTO notify_inbox (id, notification_id, recipient, notifier, key, category, reason, actor, title, body, url, params,
                              tenant)
    SELECT u.id::uuid, $1, u.recipient, $2, $3, $4, u.reason, nullif($5, ''),
           coalesce(($35::text[])[u.v], $6), coalesce(($36::text[])[u.v], $7), coalesce(($37::text[])[u.v], $8),
           $9, nullif($34, '')
    FROM unnest($10::text[], $11::text[], $12::text[], $38::int[]) AS u(id, recipient, reason, v)
    ON CONFLICT (notification_id, recipient) DO NOTHING
    RETURNING id, recipient
), dl AS (
    INSERT INTO notify_deliveries (id, notification_id, notifier, key, recipient, channel, reason, mode, status,
                                   last_error, settled_at, next_attempt_at, unless, batch_id, batched_into, tenant)
    SELECT d.id::uuid, $1, $2, $3, nullif(d.recipient, ''), d.channel, d.reason, d.mode,
           CASE WHEN x.refused THEN 'throttled' ELSE d.status END,
           CASE WHEN x.refused THEN tc.msg ELSE nullif(d.err, '') END,
           CASE WHEN d.status IN ('unavailable', 'skipped', 'batched') OR x.refused THEN now() END,
           CASE WHEN x.refused THEN NULL ELSE d.due END, nullif(d.unless, ''),
           nullif(d.batch, '')::uuid, nullif(d.carrier, '')::uuid, nullif($34, '')
    FROM unnest($13::text[], $14::text[], $15::text[], $16::text[], $17::text[], $18::text[], $19::text[],
                $30::timestamptz[], $31::text[], $32::text[], $33::text[])
         AS d(id, recipient, channel, reason, mode, status, err, due, unless, batch, carrier)
    LEFT JOIN tc ON tc.id = d.id
    LEFT JOIN th ON th.last_delivery = d.id::uuid
    CROSS JOIN LATERAL (SELECT tc.id IS NOT NULL AND th.last_delivery IS NULL AS refused) x
    ON CONFLICT (notification_id, channel, coalesce(recipient, '')) DO NOTHING
    RETURNING id, channel, status, next_attempt_at
), progress AS (
    UPDATE notify_fanout_lanes
    SET cursor = $20, inline_pos = $21, done = $22
    WHERE notification_id = $1 AND lane = $23
    RETURNING 1
), fin AS (
    UPDATE notify_notifications
    SET status = 'fanned_out', updated_at = now()
    WHERE id = $1 AND $22 AND status = 'pending'
      AND NOT EXISTS (SELECT 1 FROM notify_fanout_lanes l WHERE l.notification_id = $1 AND l.lane <> $23 AND NOT l.done)
    RETURNING 1
)
SELECT 'n', count(*)::text, '' FROM inbox
UNION ALL
SELECT 'i', id::text, recipient FROM inbox WHERE (SELECT count(*) FROM inbox) < cardinality($10::text[])
UNION ALL
SELECT 'd', id::text, channel FROM dl WHERE status = 'pending'
UNION ALL
SELECT 's', id::text, (extract(epoch FROM next_attempt_at) * 1000000)::bigint::text FROM dl WHERE status = 'scheduled'
UNION ALL
SELECT 't', id::text, channel FROM dl WHERE status = 'throttled'
UNION ALL
SELECT 'f', '', '' FROM fin`

// writeChunkFreshSQL is writeChunkSQL without the ON CONFLICT guards, for a
// chunk whose rows cannot exist yet: the lane's cursor, locked and moved in
// the same transaction, is past everything written before. A speculative
// insert costs about a fifth more than a plain one; the unique indexes still
// refuse a duplicate, and WriteChunk turns that refusal into
// ErrChunkConflict, after which the caller writes the chunk guarded.
var writeChunkFreshSQL = strings.NewReplacer(
	"    ON CONFLICT (notification_id, recipient) DO NOTHING\n", "",
	"    ON CONFLICT (notification_id, channel, coalesce(recipient, '')) DO NOTHING\n", "",
).Replace(writeChunkSQL)

// identityConflict is whether pe (a unique violation) is of an inbox item's
// identity (notification_id, recipient) or of a delivery's
// (notify_deliveries_identity). The tables are
// partitioned (00018_partition_inbox_ledger.sql) and PostgreSQL names the
// partition's index, whose name is derived from the partition's, so the
// violation is recognised by table and by not being the primary key.
func identityConflict(pe *pgconn.PgError) bool {
	return (strings.HasPrefix(pe.TableName, "notify_inbox") || strings.HasPrefix(pe.TableName, "notify_deliveries")) &&
		!strings.HasSuffix(pe.ConstraintName, "_pkey")
}

// ErrChunkConflict is returned (wrapped) by an unguarded WriteChunk that met a
// row already written: the transaction is aborted, and the chunk must be
// written again with guarded set.
var ErrChunkConflict = errors.New("fan-out chunk meets rows already written")

// WriteChunk writes c in tx and reports what was new. Guarded, rows that exist
// already are skipped (a replay writes nothing twice); unguarded, they fail
// the statement with ErrChunkConflict and nothing is written.
func WriteChunk(ctx context.Context, tx DB, c *Chunk, guarded bool) (*ChunkResult, error) {
	params := c.Params
	if params == nil {
		params = json.RawMessage("{}")
	}
	sql := writeChunkSQL
	if !guarded {
		sql = writeChunkFreshSQL
	}
	titles, bodies, urls := variantColumns(c.Variants)
	rows, err := tx.Query(ctx, sql, c.NotificationID, c.Notifier, c.Key, c.Category, c.Actor,
		c.Title, c.Body, c.URL, string(params),
		nonNil(c.InboxIDs), nonNil(c.InboxRecipients), nonNil(c.InboxReasons),
		nonNil(c.DeliveryIDs), nonNil(c.DeliveryRecipients), nonNil(c.DeliveryChannels), nonNil(c.DeliveryReasons),
		nonNil(c.DeliveryModes), nonNil(c.DeliveryStatuses), nonNil(c.DeliveryErrors),
		c.Cursor, c.InlinePos, c.Done, c.Lane,
		nonNil(c.ThrottleIDs), nonNil(c.ThrottleRecipients), nonNil(c.ThrottleChannels), nonNilOf(c.ThrottleLimits),
		nonNilOf(c.ThrottlePers), nonNil(c.ThrottleErrors), dues(c), padded(c, c.DeliveryUnless),
		padded(c, c.DeliveryBatch), padded(c, c.DeliveryBatchedInto), c.Tenant,
		titles, bodies, urls, nonNilOf(c.InboxVariants))
	if err != nil {
		return nil, fmt.Errorf("write fan-out chunk of %s: %w", c.NotificationID, err)
	}
	defer rows.Close()
	res := &ChunkResult{}
	inserted := -1
	for rows.Next() {
		var kind, id, extra string
		if err := rows.Scan(&kind, &id, &extra); err != nil {
			return nil, err
		}
		switch kind {
		case "n":
			if inserted, err = strconv.Atoi(id); err != nil {
				return nil, fmt.Errorf("write fan-out chunk of %s: inbox count %q", c.NotificationID, id)
			}
		case "i":
			res.InboxIDs = append(res.InboxIDs, id)
			res.InboxRecipients = append(res.InboxRecipients, extra)
		case "d":
			res.PendingIDs = append(res.PendingIDs, id)
			res.PendingChannels = append(res.PendingChannels, extra)
		case "s":
			us, err := strconv.ParseInt(extra, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("write fan-out chunk of %s: due instant %q", c.NotificationID, extra)
			}
			res.ScheduledIDs = append(res.ScheduledIDs, id)
			res.ScheduledDue = append(res.ScheduledDue, time.UnixMicro(us))
		case "t":
			res.ThrottledChannels = append(res.ThrottledChannels, extra)
		case "f":
			res.Finished = true
		}
	}
	if err := rows.Err(); err != nil {
		if pe := (*pgconn.PgError)(nil); errors.As(err, &pe) && pe.Code == "23505" && identityConflict(pe) {
			err = fmt.Errorf("%w (%s)", ErrChunkConflict, pe.ConstraintName)
		}
		return nil, fmt.Errorf("write fan-out chunk of %s: %w", c.NotificationID, err)
	}
	if inserted == len(c.InboxIDs) {
		// None skipped: every item is new.
		res.InboxIDs, res.InboxRecipients = c.InboxIDs, c.InboxRecipients
	}
	return res, nil
}

// logCreatedSQL appends one "created" change per new inbox item.
const logCreatedSQL = `
INSERT INTO notify_inbox_changes (recipient, kind, item_ids)
SELECT u.recipient, 'created', ARRAY[u.id::uuid]
FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS u(id, recipient, ord)
ORDER BY u.ord`

// logCreatedManySQL appends one "created" change naming many items, each of a
// different recipient (sql/migrations/00004_change_log_chunks.sql).
const logCreatedManySQL = `
INSERT INTO notify_inbox_changes (recipients, kind, item_ids)
VALUES ($2::text[], 'created', $1::text[]::uuid[])`

// LogInboxCreated appends the change log's record of new inbox items: one row
// naming them all when their recipients are distinct (a fan-out chunk's are),
// one row per item otherwise, and notifies InboxChangesChannel, so stream
// hubs read the new items the moment tx commits. It takes no lock. The
// notification makes this commit wait for other notifying commits (River's
// job inserts notify too); a fan-out commits once per chunk of recipients,
// so that costs little, and inbox marks, by far the most frequent writers,
// do not notify.
func LogInboxCreated(ctx context.Context, tx DB, ids, recipients []string) error {
	if len(ids) == 0 {
		return nil
	}
	sql := logCreatedSQL
	if len(ids) > 1 && distinct(recipients) {
		sql = logCreatedManySQL
	}
	b := &pgx.Batch{}
	b.Queue(sql, ids, recipients)
	b.Queue(wakeInboxStreamsSQL)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("log inbox changes: %w", err)
	}
	return nil
}

// distinct reports whether no string occurs twice in s (sorted input, as a
// fan-out chunk's, is checked without allocating).
func distinct(s []string) bool {
	if slices.IsSorted(s) {
		for i := 1; i < len(s); i++ {
			if s[i] == s[i-1] {
				return false
			}
		}
		return true
	}
	seen := make(map[string]struct{}, len(s))
	for _, v := range s {
		if _, dup := seen[v]; dup {
			return false
		}
		seen[v] = struct{}{}
	}
	return true
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func nonNilOf[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// dues is c.DeliveryDue, one entry per delivery (all null when unset).
func dues(c *Chunk) []*time.Time {
	if len(c.DeliveryDue) == len(c.DeliveryIDs) {
		return c.DeliveryDue
	}
	return make([]*time.Time, len(c.DeliveryIDs))
}

// padded is one of c's optional per-delivery slices, one entry per
// delivery ("" when unset).
func padded(c *Chunk, s []string) []string {
	if len(s) == len(c.DeliveryIDs) {
		return s
	}
	return append(slices.Clip(s), make([]string, len(c.DeliveryIDs)-len(s))...)
}
