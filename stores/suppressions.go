package stores

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Suppression is an address a channel never sends to again: Reason is hard,
// complaint, manual, or the SMTP reply that suppressed it.
type Suppression struct {
	Channel   string
	Address   string
	Reason    string
	CreatedAt time.Time
	UpdatedAt time.Time
}

// NormalizeAddress is how addresses are stored and compared on the
// suppression list: trimmed and lower-cased. An email address's local part
// is case-sensitive in theory and never in practice; lower-casing means
// Ann@Example.test and ann@example.test are one suppression.
func NormalizeAddress(a string) string { return strings.ToLower(strings.TrimSpace(a)) }

// AddressFields pairs each channel whose deliveries go to a profile address
// with the profile field it reads (its Plugin.Address): the suppression
// check compares that field with the list. The registry knows the pairs
// (Plugin.Address); stores only uses them.
type AddressFields struct {
	Channels []string
	Fields   []string
}

// putSuppressionsSQL adds addresses to the list, or updates the reason of
// those already on it (keeping created_at: when it was first suppressed).
const putSuppressionsSQL = `
INSERT INTO notify_suppressions (channel, address, reason, created_at, updated_at)
SELECT u.channel, u.address, u.reason, $4, $4
FROM unnest($1::text[], $2::text[], $3::text[]) AS u(channel, address, reason)
ON CONFLICT (channel, address) DO UPDATE SET reason = EXCLUDED.reason, updated_at = EXCLUDED.updated_at`

// PutSuppressions adds ss to the list in one statement (addresses are
// normalised; an empty address is skipped; the same address twice in ss
// keeps the last reason) at time now.
func PutSuppressions(ctx context.Context, db DB, ss []Suppression, now time.Time) error {
	seen := make(map[[2]string]int, len(ss))
	var chans, addrs, reasons []string
	for _, s := range ss {
		a := NormalizeAddress(s.Address)
		if a == "" || s.Channel == "" {
			continue
		}
		reason := s.Reason
		if len(reason) > 1000 {
			reason = reason[:1000]
		}
		if i, dup := seen[[2]string{s.Channel, a}]; dup {
			reasons[i] = reason
			continue
		}
		seen[[2]string{s.Channel, a}] = len(chans)
		chans, addrs, reasons = append(chans, s.Channel), append(addrs, a), append(reasons, reason)
	}
	if len(chans) == 0 {
		return nil
	}
	if _, err := db.Exec(ctx, putSuppressionsSQL, chans, addrs, reasons, now); err != nil {
		return fmt.Errorf("put %d suppressions: %w", len(chans), err)
	}
	return nil
}

const getSuppressionSQL = `
SELECT channel, address, reason, created_at, updated_at FROM notify_suppressions WHERE channel = $1 AND address = $2`

// GetSuppression returns the suppression of (channel, address), ErrNotFound
// when the address is not suppressed.
func GetSuppression(ctx context.Context, db DB, channel, address string) (*Suppression, error) {
	var s Suppression
	err := db.QueryRow(ctx, getSuppressionSQL, channel, NormalizeAddress(address)).
		Scan(&s.Channel, &s.Address, &s.Reason, &s.CreatedAt, &s.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get suppression: %w", err)
	}
	return &s, nil
}

const deleteSuppressionSQL = `DELETE FROM notify_suppressions WHERE channel = $1 AND address = $2`

// DeleteSuppression lifts the suppression of (channel, address): later
// deliveries to it are sent again. It reports whether there was one.
func DeleteSuppression(ctx context.Context, db DB, channel, address string) (bool, error) {
	tag, err := db.Exec(ctx, deleteSuppressionSQL, channel, NormalizeAddress(address))
	if err != nil {
		return false, fmt.Errorf("delete suppression: %w", err)
	}
	return tag.RowsAffected() > 0, nil
}

// listSuppressionsSQL is one keyset page in (channel, address) order: $1
// channel ("" any), $2 address ("" any), after ($3, $4), at most $5 rows.
const listSuppressionsSQL = `
SELECT channel, address, reason, created_at, updated_at
FROM notify_suppressions
WHERE ($1 = '' OR channel = $1)
  AND ($2 = '' OR address = $2)
  AND (channel, address) > ($3, $4)
ORDER BY channel, address
LIMIT $5`

// ListSuppressions returns at most limit suppressions after the key
// (afterChannel, afterAddress) ("", "" for the first page), of channel
// ("" any) and address ("" any, else exact after normalising), in
// (channel, address) order.
func ListSuppressions(ctx context.Context, db DB, channel, address, afterChannel, afterAddress string, limit int) ([]Suppression, error) {
	rows, err := db.Query(ctx, listSuppressionsSQL, channel, NormalizeAddress(address), afterChannel, afterAddress, limit)
	if err != nil {
		return nil, fmt.Errorf("list suppressions: %w", err)
	}
	defer rows.Close()
	out := []Suppression{}
	for rows.Next() {
		var s Suppression
		if err := rows.Scan(&s.Channel, &s.Address, &s.Reason, &s.CreatedAt, &s.UpdatedAt); err != nil {
			return nil, fmt.Errorf("list suppressions: %w", err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list suppressions: %w", err)
	}
	return out, nil
}

// SoftBounce is the count of soft bounces reported for an address.
type SoftBounce struct {
	Channel, Address string
	Count            int64
	FirstAt, LastAt  time.Time
}

const recordSoftBounceSQL = `
INSERT INTO notify_soft_bounces AS b (channel, address, count, first_at, last_at)
VALUES ($1, $2, 1, $3, $3)
ON CONFLICT (channel, address) DO UPDATE SET count = b.count + 1, last_at = EXCLUDED.last_at
RETURNING channel, address, count, first_at, last_at`

// RecordSoftBounce counts one soft bounce of (channel, address) at now. A
// soft bounce (mailbox full, greylisted) never suppresses: the next
// delivery is tried as usual.
func RecordSoftBounce(ctx context.Context, db DB, channel, address string, now time.Time) (*SoftBounce, error) {
	var b SoftBounce
	err := db.QueryRow(ctx, recordSoftBounceSQL, channel, NormalizeAddress(address), now).
		Scan(&b.Channel, &b.Address, &b.Count, &b.FirstAt, &b.LastAt)
	if err != nil {
		return nil, fmt.Errorf("record soft bounce: %w", err)
	}
	return &b, nil
}

// deleteRecipientSuppressionsSQL lifts the suppressions of the addresses in
// recipient $1's profile, for each (channel $2[k], profile field $3[k]), and
// their soft-bounce counts; it returns how many suppressions it deleted.
const deleteRecipientSuppressionsSQL = `
WITH a AS (
    SELECT a.channel, lower(btrim(CASE a.field WHEN 'email' THEN p.email WHEN 'webhook_url' THEN p.webhook_url WHEN 'phone' THEN p.phone
                                              WHEN 'name' THEN p.name WHEN 'locale' THEN p.locale
                                              WHEN 'timezone' THEN p.timezone END)) AS address
    FROM notify_recipients p, unnest($2::text[], $3::text[]) AS a(channel, field)
    WHERE p.id = $1
), soft AS (
    DELETE FROM notify_soft_bounces b USING a WHERE b.channel = a.channel AND b.address = a.address
)
DELETE FROM notify_suppressions s USING a WHERE s.channel = a.channel AND s.address = a.address`

// DeleteRecipientSuppressions lifts the suppressions (and soft-bounce
// counts) of the addresses recipient's profile holds now, for the channels
// of fields. Erasure calls it only when the operator asks: by default an
// erased person's address stays suppressed, which is what stops notifyd
// mailing it again if the application re-creates the recipient.
func DeleteRecipientSuppressions(ctx context.Context, db DB, recipient string, fields AddressFields) (int, error) {
	tag, err := db.Exec(ctx, deleteRecipientSuppressionsSQL, recipient, fields.Channels, fields.Fields)
	if err != nil {
		return 0, fmt.Errorf("delete suppressions of %s: %w", recipient, err)
	}
	return int(tag.RowsAffected()), nil
}
