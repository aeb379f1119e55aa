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

// putRecipientSQL runs notify_put_recipient (sql/functions/
// notify_put_recipient.sql), the one definition of a profile write and its
// rules: PUT /v1/recipients/{id}, the Go API and applications calling it from
// SQL all write through it. A key absent from the profile object keeps what
// is stored, null clears it, and webhook_gone_at survives only while the
// webhook_url stays the same. An invalid field is SQLSTATE 22023 naming it
// (see InputErrorOf).
const putRecipientSQL = `SELECT notify_put_recipient($1, $2::jsonb)`

// profileJSON is p as notify_put_recipient's profile object, with PUT's
// replace: every text field and data are given (null when nil), so what p
// leaves unset is cleared; tokens_valid_after and quiet_hours are given only
// when their Set flag is, so a write that does not know of them keeps them.
func (p RecipientProfile) profileJSON() (json.RawMessage, error) {
	m := map[string]any{"email": p.Email, "name": p.Name, "locale": p.Locale, "timezone": p.Timezone,
		"webhook_url": p.WebhookURL, "phone": p.Phone, "data": p.Data}
	if p.Data == nil {
		m["data"] = nil
	}
	if p.SetTokensValidAfter {
		m["tokens_valid_after"] = nil
		if p.TokensValidAfter != nil {
			m["tokens_valid_after"] = p.TokensValidAfter.UTC().Format(time.RFC3339Nano)
		}
	}
	if p.SetQuietHours {
		m["quiet_hours"] = nil
		if len(p.QuietHours) > 0 {
			m["quiet_hours"] = p.QuietHours
		}
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("recipient %s: encode profile: %w", p.ID, err)
	}
	return raw, nil
}

// PutRecipient creates p.ID's profile or replaces it with p (nil fields are
// cleared; see profileJSON) and returns the profile as stored. The rules are
// notify_put_recipient's: an invalid field is a 22023 error naming it.
func PutRecipient(ctx context.Context, db DB, p RecipientProfile) (*RecipientProfile, error) {
	raw, err := p.profileJSON()
	if err != nil {
		return nil, err
	}
	return PutRecipientJSON(ctx, db, p.ID, raw)
}

// PutRecipientJSON writes profile (notify_put_recipient's profile object:
// absent keys kept, null clears) for recipient id and reads the profile back,
// in one round trip and one implicit transaction.
func PutRecipientJSON(ctx context.Context, db DB, id string, profile json.RawMessage) (*RecipientProfile, error) {
	b := &pgx.Batch{}
	b.Queue(putRecipientSQL, id, string(profile))
	b.Queue(getRecipientSQL, id)
	br := db.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return nil, fmt.Errorf("put recipient %s: %w", id, err)
	}
	out, err := scanRecipient(br.QueryRow())
	if err != nil {
		return nil, fmt.Errorf("put recipient %s: read back: %w", id, err)
	}
	return out, nil
}

// WriteRecipient writes profile for recipient id and reads nothing back:
// what a role granted only notifyd_app, which may not read
// notify_recipients, can do (PutRecipientTx).
func WriteRecipient(ctx context.Context, db DB, id string, profile json.RawMessage) error {
	if _, err := db.Exec(ctx, putRecipientSQL, id, string(profile)); err != nil {
		return fmt.Errorf("put recipient %s: %w", id, err)
	}
	return nil
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

// SetQuietHours replaces recipient's quiet hours with raw (nil or JSON null
// clears them) through notify_put_recipient, creating an otherwise empty
// profile when there is none, and returns what is stored and the
// recipient's timezone ("" when unset), in one round trip and one implicit
// transaction. A malformed raw is a 22023 error naming quiet_hours.
func SetQuietHours(ctx context.Context, db DB, recipient string, raw json.RawMessage) (json.RawMessage, string, error) {
	q := json.RawMessage("null")
	if len(raw) > 0 {
		q = raw
	}
	profile, err := json.Marshal(map[string]json.RawMessage{"quiet_hours": q})
	if err != nil {
		return nil, "", fmt.Errorf("set quiet hours of %s: %w", recipient, err)
	}
	b := &pgx.Batch{}
	b.Queue(putRecipientSQL, recipient, string(profile))
	b.Queue(getQuietHoursSQL, recipient)
	br := db.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return nil, "", fmt.Errorf("set quiet hours of %s: %w", recipient, err)
	}
	var out json.RawMessage
	var tz string
	if err := br.QueryRow().Scan(&out, &tz); err != nil {
		return nil, "", fmt.Errorf("set quiet hours of %s: read back: %w", recipient, err)
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
