package notifyd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/mail"
	"net/url"
	"regexp"
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

// Profile field limits, in bytes.
const (
	maxEmail      = 254
	maxName       = 255
	maxLocale     = 35
	maxTimezone   = 64
	maxWebhookURL = 2048
	maxPhone      = 16
)

// phoneRE is E.164: a "+", a country code that does not start with 0, and at
// most 15 digits in all. Eight digits is the shortest real number with its
// country code; spaces, dashes and brackets are refused rather than
// stripped, so the stored number is the one text messages go to.
var phoneRE = regexp.MustCompile(`^\+[1-9][0-9]{7,14}$`)

func checkPhone(s string) string {
	if !phoneRE.MatchString(s) {
		return "want an E.164 phone number such as +14155550123 (a +, the country code, no spaces)"
	}
	return ""
}

var localeRE = regexp.MustCompile(`^[A-Za-z]{2,8}(-[A-Za-z0-9]{1,8})*$`)

// Validate checks p as the HTTP API does and returns the first field that
// breaks a rule as an *InputError (Field is the JSON name: "email",
// "webhook_url", ...).
func (p Profile) Validate() error {
	if err := p.validateText(); err != nil {
		return err
	}
	if err := p.validateQuietHours(); err != nil {
		return err
	}
	_, err := p.data()
	return err
}

// validateText checks the text fields.
func (p Profile) validateText() error {
	for _, f := range []struct {
		name, value string
		limit       int
		check       func(string) string
	}{
		{"email", p.Email, maxEmail, checkEmail},
		{"name", p.Name, maxName, nil},
		{"locale", p.Locale, maxLocale, checkLocale},
		{"timezone", p.Timezone, maxTimezone, checkTimezone},
		{"webhook_url", p.WebhookURL, maxWebhookURL, checkWebhookURL},
		{"phone", p.Phone, maxPhone, checkPhone},
	} {
		if f.value == "" {
			continue
		}
		if err := checkText(f.name, f.value, f.limit); err != nil {
			return err
		}
		if f.check != nil {
			if msg := f.check(f.value); msg != "" {
				return &InputError{Field: f.name, Message: msg}
			}
		}
	}
	return nil
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

// validateQuietHours checks p.QuietHours (nil is fine).
func (p Profile) validateQuietHours() error {
	if p.QuietHours == nil {
		return nil
	}
	if err := p.QuietHours.Validate(); err != nil {
		return &InputError{Field: "quiet_hours", Message: err.Error()}
	}
	return nil
}

func checkEmail(s string) string {
	a, err := mail.ParseAddress(s)
	if err != nil || a.Name != "" || a.Address != s {
		return "want a bare email address such as ada@example.com"
	}
	return ""
}

func checkLocale(s string) string {
	if !localeRE.MatchString(s) {
		return "want a BCP 47 language tag such as en or pt-BR"
	}
	return ""
}

func checkTimezone(s string) string {
	// "Local" would mean the daemon's own zone, which differs per replica.
	if s == "Local" {
		return "want an IANA time zone such as Europe/Paris"
	}
	if _, err := time.LoadLocation(s); err != nil {
		return "unknown time zone; want an IANA name such as Europe/Paris"
	}
	return ""
}

func checkWebhookURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Opaque != "" {
		return "want an absolute http or https URL"
	}
	return ""
}

// PutRecipientTx creates recipient id's profile or replaces it with p (a
// field left empty is cleared) inside tx, so that a profile commits with the
// application's own write (the user row a signup inserts). A profile that
// fails Validate is refused with an *InputError and nothing is written.
func (c *Client) PutRecipientTx(ctx context.Context, tx pgx.Tx, id string, p Profile) error {
	return putRecipient(ctx, tx, id, p)
}

// PutRecipient is PutRecipientTx in a transaction of its own.
func (c *Client) PutRecipient(ctx context.Context, id string, p Profile) error {
	return putRecipient(ctx, c.pool, id, p)
}

func putRecipient(ctx context.Context, db stores.DB, id string, p Profile) error {
	if err := checkText("id", id, 255); err != nil {
		return err
	}
	// Validate, with the data encoded once.
	if err := p.validateText(); err != nil {
		return err
	}
	if err := p.validateQuietHours(); err != nil {
		return err
	}
	data, err := p.data()
	if err != nil {
		return err
	}
	sp := stores.RecipientProfile{ID: id, Email: optional(p.Email),
		Name: optional(p.Name), Locale: optional(p.Locale), Timezone: optional(p.Timezone),
		WebhookURL: optional(p.WebhookURL), Phone: optional(p.Phone), Data: data}
	if p.QuietHours != nil {
		sp.QuietHours, _ = json.Marshal(p.QuietHours)
		sp.SetQuietHours = true
	}
	_, err = stores.PutRecipient(ctx, db, sp)
	return err
}

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
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
			e, err = stores.EraseRecipient(ctx, tx, id)
			return err
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
