package stores

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// RecipientProfile is a recipient's profile: what channels need to reach them
// (email, webhook_url), what templates may use (name, locale, data) and the
// time zone their digests are scheduled in. A nil field is not set.
type RecipientProfile struct {
	ID         string
	Email      *string
	Name       *string
	Locale     *string
	Timezone   *string
	WebhookURL *string
	// Phone is an E.164 number ("+14155550123") for text messages.
	Phone *string
	// Data is a JSON object for the application's own use; nil writes {}.
	Data json.RawMessage
	// WebhookGoneAt is when the webhook endpoint answered 410 Gone; while set,
	// no webhook is sent to WebhookURL. Writing a different WebhookURL clears it.
	// PutRecipient ignores it.
	WebhookGoneAt *time.Time
	// TokensValidAfter revokes the recipient's tokens issued (iat) before
	// it; nil revokes none. PutRecipient writes it only when
	// SetTokensValidAfter is true, and keeps the stored value otherwise, so
	// that a profile write that does not know of it cannot undo a revocation.
	TokensValidAfter    *time.Time
	SetTokensValidAfter bool
	// QuietHours is the profile's quiet_hours JSON ({"start":"22:00",
	// "end":"07:00"}, checked by the caller); nil is none. Like
	// TokensValidAfter, PutRecipient writes it only when SetQuietHours is
	// true: the recipient sets it in the preference center, and a profile
	// write from the application must not undo that.
	QuietHours    json.RawMessage
	SetQuietHours bool
	// CreatedAt and UpdatedAt are set by the database; PutRecipient ignores them.
	CreatedAt time.Time
	UpdatedAt time.Time
}

// putRecipientSQL creates or replaces a profile. It is a full replace (PUT):
// a field given as NULL is cleared. webhook_gone_at survives only while the
// webhook_url stays the same: a new address deserves a new try.
const putRecipientSQL = `
INSERT INTO notify_recipients AS r (id, email, name, locale, timezone, webhook_url, data, tokens_valid_after,
                                     phone, quiet_hours)
VALUES ($1, $2, $3, $4, $5, $6, coalesce($7::jsonb, '{}'), CASE WHEN $9::boolean THEN $8::timestamptz END,
        $10, CASE WHEN $12::boolean THEN $11::jsonb END)
ON CONFLICT (id) DO UPDATE
SET email = EXCLUDED.email,
    name = EXCLUDED.name,
    locale = EXCLUDED.locale,
    timezone = EXCLUDED.timezone,
    webhook_url = EXCLUDED.webhook_url,
    webhook_gone_at = CASE WHEN r.webhook_url IS NOT DISTINCT FROM EXCLUDED.webhook_url THEN r.webhook_gone_at END,
    data = EXCLUDED.data,
    phone = EXCLUDED.phone,
    tokens_valid_after = CASE WHEN $9::boolean THEN EXCLUDED.tokens_valid_after ELSE r.tokens_valid_after END,
    quiet_hours = CASE WHEN $12::boolean THEN EXCLUDED.quiet_hours ELSE r.quiet_hours END,
    updated_at = now()
RETURNING id, email, name, locale, timezone, webhook_url, data, webhook_gone_at, tokens_valid_after, created_at, updated_at,
          phone, quiet_hours`

// PutRecipient creates p.ID's profile or replaces it with p (nil fields are
// cleared) and returns the profile as stored. Validation of the fields is the
// caller's: the database only checks that the id is 1 to 255 bytes.
func PutRecipient(ctx context.Context, db DB, p RecipientProfile) (*RecipientProfile, error) {
	var data any
	if p.Data != nil {
		data = string(p.Data)
	}
	row := db.QueryRow(ctx, putRecipientSQL, p.ID, p.Email, p.Name, p.Locale, p.Timezone, p.WebhookURL, data,
		p.TokensValidAfter, p.SetTokensValidAfter, p.Phone, rawOrNil(p.QuietHours), p.SetQuietHours)
	out, err := scanRecipient(row)
	if err != nil {
		return nil, fmt.Errorf("put recipient %s: %w", p.ID, err)
	}
	return out, nil
}

const getRecipientSQL = `
SELECT id, email, name, locale, timezone, webhook_url, data, webhook_gone_at, tokens_valid_after, created_at, updated_at,
       phone, quiet_hours
FROM notify_recipients
WHERE id = $1`

// GetRecipient reads id's profile; ErrNotFound when there is none.
func GetRecipient(ctx context.Context, db DB, id string) (*RecipientProfile, error) {
	out, err := scanRecipient(db.QueryRow(ctx, getRecipientSQL, id))
	if err != nil {
		return nil, notFound(err)
	}
	return out, nil
}

func scanRecipient(row interface{ Scan(...any) error }) (*RecipientProfile, error) {
	var p RecipientProfile
	if err := row.Scan(&p.ID, &p.Email, &p.Name, &p.Locale, &p.Timezone, &p.WebhookURL, &p.Data,
		&p.WebhookGoneAt, &p.TokensValidAfter, &p.CreatedAt, &p.UpdatedAt, &p.Phone, &p.QuietHours); err != nil {
		return nil, err
	}
	p.WebhookGoneAt, p.TokensValidAfter = utcPtr(p.WebhookGoneAt), utcPtr(p.TokensValidAfter)
	p.CreatedAt, p.UpdatedAt = p.CreatedAt.UTC(), p.UpdatedAt.UTC()
	return &p, nil
}

const tokensValidAfterSQL = `
SELECT tokens_valid_after FROM notify_recipients WHERE id = $1`

// TokensValidAfter reads the time before which recipient's tokens are
// revoked, by primary key: the zero time when none are (no profile, or a
// null tokens_valid_after).
func TokensValidAfter(ctx context.Context, db DB, recipient string) (time.Time, error) {
	var t *time.Time
	err := db.QueryRow(ctx, tokensValidAfterSQL, recipient).Scan(&t)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return time.Time{}, fmt.Errorf("read tokens_valid_after of %s: %w", recipient, err)
	}
	if t == nil {
		return time.Time{}, nil
	}
	return *t, nil
}

// revokedStreamsSQL reads, of recipients $1 each holding tokens issued at or
// after $2 (the oldest iat among its open streams), those whose
// tokens_valid_after is later than that: some of their streams run on a
// revoked token. One primary-key probe per recipient.
const revokedStreamsSQL = `
SELECT r.id, r.tokens_valid_after
FROM unnest($1::text[], $2::timestamptz[]) AS x(id, iat)
JOIN notify_recipients r ON r.id = x.id
WHERE r.tokens_valid_after > x.iat`

// RevokedSince returns, for the recipients whose tokens_valid_after is later
// than their entry in oldest (the oldest iat among tokens in use), that
// tokens_valid_after: every token of theirs issued before it is revoked. The
// stream hub asks it for its open streams.
func RevokedSince(ctx context.Context, db DB, oldest map[string]time.Time) (map[string]time.Time, error) {
	if len(oldest) == 0 {
		return nil, nil
	}
	ids := make([]string, 0, len(oldest))
	iats := make([]time.Time, 0, len(oldest))
	for id, iat := range oldest {
		ids, iats = append(ids, id), append(iats, iat)
	}
	rows, err := db.Query(ctx, revokedStreamsSQL, ids, iats)
	if err != nil {
		return nil, fmt.Errorf("read revoked tokens of %d recipients: %w", len(ids), err)
	}
	defer rows.Close()
	out := map[string]time.Time{}
	for rows.Next() {
		var id string
		var after time.Time
		if err := rows.Scan(&id, &after); err != nil {
			return nil, err
		}
		out[id] = after
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read revoked tokens of %d recipients: %w", len(ids), err)
	}
	return out, nil
}

// rawOrNil is raw as a jsonb parameter: SQL NULL for nil or JSON null.
func rawOrNil(raw json.RawMessage) any {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	return string(raw)
}

// setQuietHoursSQL sets one recipient's quiet hours (the preference
// center's write), creating an otherwise empty profile when there is none,
// and returns them with the recipient's timezone.
const setQuietHoursSQL = `
INSERT INTO notify_recipients AS r (id, quiet_hours) VALUES ($1, $2::jsonb)
ON CONFLICT (id) DO UPDATE SET quiet_hours = EXCLUDED.quiet_hours, updated_at = now()
RETURNING quiet_hours, coalesce(timezone, '')`

// SetQuietHours replaces recipient's quiet hours with raw (checked by the
// caller; nil or JSON null clears them) and returns what is stored and the
// recipient's timezone ("" when unset).
func SetQuietHours(ctx context.Context, db DB, recipient string, raw json.RawMessage) (json.RawMessage, string, error) {
	var out json.RawMessage
	var tz string
	if err := db.QueryRow(ctx, setQuietHoursSQL, recipient, rawOrNil(raw)).Scan(&out, &tz); err != nil {
		return nil, "", fmt.Errorf("set quiet hours of %s: %w", recipient, err)
	}
	return out, tz, nil
}

const getQuietHoursSQL = `SELECT quiet_hours, coalesce(timezone, '') FROM notify_recipients WHERE id = $1`

// QuietHours reads recipient's quiet hours JSON (nil for none, or no
// profile) and timezone.
func QuietHours(ctx context.Context, db DB, recipient string) (json.RawMessage, string, error) {
	var out json.RawMessage
	var tz string
	err := db.QueryRow(ctx, getQuietHoursSQL, recipient).Scan(&out, &tz)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, "", nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("read quiet hours of %s: %w", recipient, err)
	}
	return out, tz, nil
}
