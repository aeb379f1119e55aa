package stores

import (
	"context"
	"fmt"
	"time"

	"github.com/notifyd/notifyd/stores/uuidv7"
)

// ProviderEvent is one thing a provider reported about a message after it
// accepted it (POST /v1/providers/{kind}/events), already verified and
// mapped to notifyd's words.
type ProviderEvent struct {
	// Source is the provider kind that reported it: ses, sendgrid,
	// postmark, mailgun or twilio.
	Source string
	// Key is the provider's own id of the event, unique per delivery: the
	// same event posted again records nothing. Required.
	Key string
	// Type is delivered, deferred, bounced, complained, opened, clicked,
	// unsubscribed or dropped.
	Type string
	At   time.Time
	// DeliveryID is the delivery a verified delivery tag names; "" when the
	// event carried none. It is tried before MessageID.
	DeliveryID string
	// MessageID is the provider's id of the message, as the send stored it
	// in the delivery's provider_message_id; "" when the event has none.
	MessageID string
	// Address is the recipient's address the event is about: a hard bounce
	// or a complaint suppresses it on the delivery's channel, a soft bounce
	// counts it. "" suppresses nothing.
	Address string
	// Hard tells a hard bounce (the mailbox does not exist) from a soft one.
	Hard bool
	// Detail is what the provider said: a bounce's diagnostic, a clicked URL.
	Detail string
	// Machine is set for an open or click made by a machine (a mail privacy
	// proxy, a link scanner) rather than a person.
	Machine bool
}

// EventsResult counts what RecordProviderEvents did.
type EventsResult struct {
	// Matched is how many events named a known delivery; the others
	// changed nothing.
	Matched int
	// Recorded is how many were new (not seen before for their delivery).
	Recorded int
	// Moved is how many deliveries changed status.
	Moved int
	// Suppressed is how many addresses a hard bounce or complaint put on
	// the suppression list.
	Suppressed int
}

// recordProviderEventsSQL is one webhook call's events in one statement:
//
//   - matched: each event's delivery, by its delivery tag (the primary key)
//     or else by the provider's message id (notify_deliveries_provider_message_idx);
//     an event that matches none goes no further;
//   - ins: the events appended to the delivery's history; one seen before
//     (the same event key on the same delivery) is skipped, and only the new
//     ones have effects, so a provider's retry or a replay changes nothing;
//   - moved: a sent delivery moves on to delivered, bounced or complained,
//     only ever up that order (complained > bounced > delivered > sent), so
//     events arriving out of order or twice converge on the same status;
//     a delivery in any other status keeps it (the event is still recorded);
//   - sup: a hard bounce or a complaint suppresses the event's address on
//     the delivery's channel, as POST /v1/bounces does;
//   - soft: a soft bounce counts the address in notify_soft_bounces.
const recordProviderEventsSQL = `
WITH ev AS (
    SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[], $5::text[], $6::text[],
                         $7::text[], $8::boolean[], $9::boolean[], $10::text[])
        AS e(delivery_id, message_id, type, at, detail, event_key, address, hard, machine, source)
), matched AS (
    SELECT e.*, d.id AS did, d.notification_id AS nid, d.channel
    FROM ev e
    CROSS JOIN LATERAL (
        (SELECT x.id, x.notification_id, x.channel FROM notify_deliveries x
         WHERE e.delivery_id <> '' AND x.id = nullif(e.delivery_id, '')::uuid)
        UNION ALL
        (SELECT x.id, x.notification_id, x.channel FROM notify_deliveries x
         WHERE e.message_id <> '' AND x.provider_message_id = e.message_id)
        LIMIT 1) d
), ins AS (
    INSERT INTO notify_delivery_events (delivery_id, notification_id, type, at, source, detail, event_key, machine, created_at)
    SELECT DISTINCT ON (did, event_key) did, nid, type, at, source, detail, event_key, machine, $11
    FROM matched
    ORDER BY did, event_key
    ON CONFLICT (notification_id, delivery_id, event_key) DO NOTHING
    RETURNING delivery_id, notification_id, event_key
), fresh AS (
    SELECT DISTINCT ON (m.did, m.event_key) m.*
    FROM matched m JOIN ins ON ins.delivery_id = m.did AND ins.notification_id = m.nid AND ins.event_key = m.event_key
    ORDER BY m.did, m.event_key
), ranked AS (
    SELECT did, nid, max(CASE type WHEN 'delivered' THEN 1 WHEN 'bounced' THEN 2 WHEN 'complained' THEN 3 END) AS r
    FROM fresh WHERE type IN ('delivered', 'bounced', 'complained')
    GROUP BY did, nid
), moved AS (
    UPDATE notify_deliveries d
    SET status = CASE r.r WHEN 1 THEN 'delivered' WHEN 2 THEN 'bounced' ELSE 'complained' END, updated_at = $11
    FROM ranked r
    WHERE d.id = r.did AND d.notification_id = r.nid
      AND d.status IN ('sent', 'delivered', 'bounced', 'complained')
      AND r.r > CASE d.status WHEN 'sent' THEN 0 WHEN 'delivered' THEN 1 WHEN 'bounced' THEN 2 ELSE 3 END
    RETURNING d.id
), sup AS (
    INSERT INTO notify_suppressions AS s (channel, address, reason, created_at, updated_at)
    SELECT DISTINCT ON (channel, a) channel, a,
           left(CASE WHEN type = 'complained' THEN 'complaint' ELSE 'hard' END || ' (' || source || ')'
                || CASE WHEN detail <> '' THEN ': ' || detail ELSE '' END, 1000), $11, $11
    FROM (SELECT f.*, lower(btrim(f.address)) AS a FROM fresh f) f
    WHERE (type = 'complained' OR (type = 'bounced' AND hard)) AND octet_length(a) BETWEEN 1 AND 320
    ORDER BY channel, a, at DESC
    ON CONFLICT (channel, address) DO UPDATE SET reason = EXCLUDED.reason, updated_at = EXCLUDED.updated_at
    RETURNING 1
), soft AS (
    INSERT INTO notify_soft_bounces AS b (channel, address, count, first_at, last_at)
    SELECT channel, a, count(*), $11, $11
    FROM (SELECT f.channel, lower(btrim(f.address)) AS a FROM fresh f WHERE f.type = 'bounced' AND NOT f.hard) f
    WHERE octet_length(a) BETWEEN 1 AND 320
    GROUP BY channel, a
    ON CONFLICT (channel, address) DO UPDATE SET count = b.count + EXCLUDED.count, last_at = EXCLUDED.last_at
    RETURNING 1
)
SELECT (SELECT count(*) FROM matched), (SELECT count(*) FROM ins), (SELECT count(*) FROM moved), (SELECT count(*) FROM sup)`

// maxEventDetail bounds the detail stored with an event.
const maxEventDetail = 1000

// RecordProviderEvents appends evs to their deliveries' event histories and
// applies their effects (status, suppressions, soft-bounce counts) in one
// statement, so one webhook call is one transaction whatever it carries; the
// caller verified the events and makes no provider call around it. Events
// that match no delivery, or were recorded before, change nothing. A
// DeliveryID that is not a delivery id is ignored (the MessageID is tried).
func RecordProviderEvents(ctx context.Context, db DB, evs []ProviderEvent, now time.Time) (EventsResult, error) {
	var r EventsResult
	if len(evs) == 0 {
		return r, nil
	}
	n := len(evs)
	ids, msgs, types, details, keys, addrs, sources := make([]string, n), make([]string, n), make([]string, n),
		make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	ats, hard, machine := make([]time.Time, n), make([]bool, n), make([]bool, n)
	for i, e := range evs {
		if uuidv7.Valid(e.DeliveryID) {
			ids[i] = e.DeliveryID
		}
		msgs[i], types[i], details[i], keys[i], addrs[i], sources[i] = e.MessageID, e.Type, clipUTF8(e.Detail, maxEventDetail),
			e.Key, e.Address, e.Source
		ats[i], hard[i], machine[i] = e.At, e.Hard, e.Machine
		if ats[i].IsZero() {
			ats[i] = now
		}
	}
	err := db.QueryRow(ctx, recordProviderEventsSQL, ids, msgs, types, ats, details, keys, addrs, hard, machine, sources, now).
		Scan(&r.Matched, &r.Recorded, &r.Moved, &r.Suppressed)
	if err != nil {
		return r, fmt.Errorf("record %d provider events: %w", n, err)
	}
	return r, nil
}

// DeliveryEvent is one event of a delivery's history (GET /v1/deliveries/{id}).
type DeliveryEvent struct {
	Type    string
	At      time.Time
	Source  string
	Detail  string
	Machine bool
}

const listDeliveryEventsSQL = `
SELECT type, at, source, detail, machine
FROM notify_delivery_events
WHERE delivery_id = $1
ORDER BY at, created_at
LIMIT $2`

// maxEvents bounds the events GetDelivery reads.
const maxEvents = 1000

// clipUTF8 cuts s to at most n bytes without splitting a UTF-8 sequence.
func clipUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n]
}

// inboxClickedSQL records a click on recipient's inbox item as a `clicked`
// event of the item's delivery on the inbox channel, once per item: the
// same funnel as a tracked email link. $5 is the tenant the caller is
// confined to ("" for none). It returns whether the item is the
// recipient's (and the tenant's) and whether the event is new.
const inboxClickedSQL = `
WITH item AS (
    SELECT i.notification_id, i.url FROM notify_inbox i
    WHERE i.id = $2::uuid AND i.recipient = $1 AND ($5 = '' OR i.tenant = $5)
), ins AS (
    INSERT INTO notify_delivery_events (delivery_id, notification_id, type, at, source, detail, event_key, created_at)
    SELECT d.id, d.notification_id, 'clicked', $4, $3, left(it.url, 1000), 'notifyd:inbox-click', $4
    FROM item it
    JOIN notify_deliveries d ON d.notification_id = it.notification_id AND d.recipient = $1 AND d.channel = $3
    ON CONFLICT (notification_id, delivery_id, event_key) DO NOTHING
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM item), EXISTS (SELECT 1 FROM ins)`

// InboxClicked records that recipient clicked inbox item id (of tenant,
// when not "") as a `clicked` event, with the item's url, on the item's
// delivery on channel (the inbox channel); a second click records nothing.
// found is false when the item is not the recipient's (or the tenant's).
func InboxClicked(ctx context.Context, db DB, recipient, id, tenant, channel string, at time.Time) (found, recorded bool, err error) {
	if !uuidv7.Valid(id) {
		return false, false, nil
	}
	err = db.QueryRow(ctx, inboxClickedSQL, recipient, id, channel, at, tenant).Scan(&found, &recorded)
	if err != nil {
		return false, false, fmt.Errorf("record inbox click: %w", err)
	}
	return found, recorded, nil
}
