package notifyd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/notifyd/notifyd/notifytype"
	"github.com/notifyd/notifyd/stores"
)

// ErrRecipientNotFound is returned by GetRecipient for an id without a
// profile, and by EraseRecipient when nothing of the id exists.
var ErrRecipientNotFound = errors.New("recipient not found")

// Profile is a recipient's profile, as PUT /v1/recipients/{id} takes it: what
// channels need to reach them (Email, WebhookURL), what templates may use
// (Name, Locale, Data) and the time zone their digests are scheduled in. An
// empty field is not set.
type Profile struct {
	Email      string
	Name       string
	Locale     string // a BCP 47 tag: "en", "pt-BR"
	Timezone   string // an IANA name: "Europe/Paris"
	WebhookURL string // an absolute http or https URL
	Phone      string // E.164: "+" and 8 to 15 digits, the first not 0 ("+14155550123")
	// Data is a JSON object for the application's own use (templates see it
	// as .Data); nil is {}.
	Data map[string]any
	// QuietHours holds email, SMS and push deliveries that would be sent
	// inside the window (in Timezone; digest.timezone when it is empty)
	// until the window ends. Unlike the other fields, nil keeps what is
	// stored: the recipient sets quiet hours in the preference center, and
	// a profile write from the application must not undo that.
	QuietHours *QuietHours

	// Set by GetRecipient; PutRecipientTx ignores them.
	//
	// WebhookGoneAt is when the webhook endpoint answered 410 Gone: no
	// webhook goes to WebhookURL until a different one is written.
	WebhookGoneAt *time.Time
	CreatedAt     time.Time
	UpdatedAt     time.Time
}

// profileJSON is p as notify_put_recipient's profile object, replacing the
// whole profile: every field is given (null when empty), but quiet_hours
// only when set (see Profile.QuietHours). What can be checked only in Go is
// checked here: text that is not valid UTF-8 or holds a NUL byte (which
// PostgreSQL cannot store, and JSON encoding would silently alter), and data
// that does not encode as JSON. Every rule of the fields themselves is
// notify_put_recipient's.
func (p Profile) profileJSON() (json.RawMessage, error) {
	m := map[string]any{}
	for _, f := range []struct{ name, value string }{
		{"email", p.Email}, {"name", p.Name}, {"locale", p.Locale}, {"timezone", p.Timezone},
		{"webhook_url", p.WebhookURL}, {"phone", p.Phone},
	} {
		if err := checkEncoding(f.name, f.value); err != nil {
			return nil, err
		}
		m[f.name] = nil
		if f.value != "" {
			m[f.name] = f.value
		}
	}
	data, err := p.data()
	if err != nil {
		return nil, err
	}
	m["data"] = data
	if p.QuietHours != nil {
		m["quiet_hours"] = p.QuietHours
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode profile: %w", err)
	}
	return raw, nil
}

// data is p.Data as the jsonb it is stored as.
func (p Profile) data() (json.RawMessage, error) {
	if p.Data == nil {
		return json.RawMessage("{}"), nil
	}
	raw, err := json.Marshal(p.Data)
	if err != nil {
		return nil, &InputError{Field: "data", Message: "not JSON-encodable: " + err.Error()}
	}
	// jsonb has no place for a NUL character in a string.
	if bytes.Contains(raw, []byte(`\u0000`)) {
		return nil, &InputError{Field: "data", Message: "contains a NUL character"}
	}
	return raw, nil
}

// QuietHours is a recipient's daily quiet window, "HH:MM" to "HH:MM" in
// their timezone; an end before the start crosses midnight.
type QuietHours = notifytype.QuietHours

// PutRecipientTx creates recipient id's profile or replaces it with p (a
// field left empty is cleared) inside tx, so that a profile commits with the
// application's own write (the user row a signup inserts). It runs the SQL
// function notify_put_recipient, which holds the rules of every field (the
// same for PUT /v1/recipients/{id} and for applications calling it from SQL),
// so tx's role needs no more than notifyd_app. A field that breaks a rule is
// refused with an *InputError naming it (Field is the JSON name: `email`,
// `webhook_url`, ...), and nothing is written.
func (c *Client) PutRecipientTx(ctx context.Context, tx pgx.Tx, id string, p Profile) error {
	return putRecipient(ctx, tx, id, p)
}

// PutRecipient is PutRecipientTx in a transaction of its own.
func (c *Client) PutRecipient(ctx context.Context, id string, p Profile) error {
	if c.pool == nil {
		return errors.New("notifyd: PutRecipient needs a client created with a pool")
	}
	return putRecipient(ctx, c.pool, id, p)
}

func putRecipient(ctx context.Context, db stores.DB, id string, p Profile) error {
	if err := checkEncoding("id", id); err != nil {
		return err
	}
	raw, err := p.profileJSON()
	if err != nil {
		return err
	}
	return inputError(stores.WriteRecipient(ctx, db, id, raw))
}

// inputError turns a field an SQL API function refused into an *InputError.
func inputError(err error) error {
	if in, ok := stores.InputErrorOf(err); ok {
		return &InputError{Field: in.Field, Message: in.Message}
	}
	return err
}

// GetRecipient reads recipient id's profile; ErrRecipientNotFound when there
// is none.
func (c *Client) GetRecipient(ctx context.Context, id string) (Profile, error) {
	if err := checkText("id", id, 255); err != nil {
		return Profile{}, err
	}
	sp, err := stores.GetRecipient(ctx, c.pool, id)
	if errors.Is(err, stores.ErrNotFound) {
		return Profile{}, fmt.Errorf("%w: %q", ErrRecipientNotFound, id)
	}
	if err != nil {
		return Profile{}, err
	}
	p := Profile{WebhookGoneAt: sp.WebhookGoneAt, CreatedAt: sp.CreatedAt, UpdatedAt: sp.UpdatedAt}
	for _, f := range []struct {
		dst *string
		src *string
	}{{&p.Email, sp.Email}, {&p.Name, sp.Name}, {&p.Locale, sp.Locale}, {&p.Timezone, sp.Timezone},
		{&p.WebhookURL, sp.WebhookURL}, {&p.Phone, sp.Phone}} {
		if f.src != nil {
			*f.dst = *f.src
		}
	}
	if err := json.Unmarshal(sp.Data, &p.Data); err != nil {
		return Profile{}, fmt.Errorf("recipient %q: data: %w", id, err)
	}
	if p.QuietHours, err = notifytype.ParseQuietHours(sp.QuietHours); err != nil {
		return Profile{}, fmt.Errorf("recipient %q: %w", id, err)
	}
	return p, nil
}

// Erasure reports what EraseRecipient removed.
type Erasure struct {
	// Profile reports whether a profile was deleted.
	Profile bool
	// Inbox and Changes count the deleted inbox items and change-log entries.
	Inbox, Changes int
	// Preferences, Subscriptions and Mutes count the deleted settings,
	// Devices the deleted mobile devices.
	Preferences, Subscriptions, Mutes, Devices int
	// Deliveries counts the recipient's ledger rows, all now kept under a
	// pseudonym; Cancelled is how many of them were still unsent and are
	// now cancelled (digest_dropped for digest rows).
	Deliveries, Cancelled int
	// Notifications counts notifications whose inline recipients or actor
	// named the recipient.
	Notifications int
}

// EraseRecipient erases recipient id (the right to erasure) in a transaction
// of its own, as DELETE /v1/recipients/{id} does: the profile, inbox,
// settings and change log are deleted, the ledger rows kept under a
// pseudonym and what was unsent cancelled (docs/http-api.md, DELETE /v1/recipients/{id}).
// ErrRecipientNotFound when nothing of id existed.
func (c *Client) EraseRecipient(ctx context.Context, id string) (*Erasure, error) {
	if err := checkText("id", id, 255); err != nil {
		return nil, err
	}
	var e *stores.Erasure
	// The erasure locks many rows (inbox, ledger) that cancel and retention
	// also lock, in another order; a deadlock victim rolled back whole and
	// runs again.
	err := stores.RetryDeadlock(func() error {
		return pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
			var err error
			if e, err = stores.EraseRecipient(ctx, tx, id); err != nil {
				return err
			}
			return stores.WriteAudit(ctx, tx) // the operator's audit row, when ctx carries one
		})
	})
	if errors.Is(err, stores.ErrNotFound) {
		return nil, fmt.Errorf("%w: nothing of %q exists", ErrRecipientNotFound, id)
	}
	if err != nil {
		return nil, err
	}
	return &Erasure{Profile: e.Profile, Inbox: e.Inbox, Changes: e.Changes, Preferences: e.Preferences,
		Subscriptions: e.Subscriptions, Mutes: e.Mutes, Devices: e.Devices, Deliveries: e.Deliveries, Cancelled: e.Cancelled,
		Notifications: e.Notifications}, nil
}
