package notifyd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/stores"
)

// ClientConfig configures a Client. The zero value is valid.
type ClientConfig struct {
	// Config, when set, makes SendTx check the notifier exists, validate params
	// against its schema and enforce max_recipients for inline recipients before
	// writing anything. Without it those checks happen at fan-out, where a failure
	// marks the notification rejected.
	Config *config.Config
	// Logger receives debug lines; nil discards.
	Logger *slog.Logger
}

// Client enqueues notifications from application code. It is safe for
// concurrent use.
type Client struct {
	pool   *pgxpool.Pool
	config *config.Config
	logger *slog.Logger
}

// NewClient returns a Client writing through pool. pool may be nil when only
// SendTx and CancelTx are used (they write through the caller's transaction).
// The pool's search_path must reach notifyd's schema (database.schema).
func NewClient(pool *pgxpool.Pool, cfg ClientConfig) (*Client, error) {
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Client{pool: pool, config: cfg.Config, logger: logger}, nil
}

// SendTx enqueues n inside tx: the notification exists if and only if tx
// commits. It adds exactly one round trip to tx. Sending the same (Tenant,
// Notifier, Key) again returns the first notification's id with Duplicate
// set, and changes nothing, however long after the first send. Keys are per
// tenant: another tenant's notification of the same key is not a duplicate,
// and a notification with no Tenant is in a space of its own.
//
// n.SendAt, when set, must be within 10 years of now (an *InputError on
// send_at otherwise).
//
// It writes through the SQL function notify_send, the SQL API's, so tx's role
// needs no more than the role notifyd_app (docs/sql-enqueue.md): notify_send
// checks the notifier against the published catalog, max_recipients and the
// part of the params schema SQL can check, whatever the client's config.
//
// Errors: *InputError for a malformed notification, ErrUnknownNotifier for a
// notifier that is not in the client's Config or not in the published
// catalog, ErrTooManyRecipients, and *config.ParamsError for params that fail
// the notifier's schema: the whole schema when the client has a Config (before
// anything is sent to the database), its checkable part otherwise.
func (c *Client) SendTx(ctx context.Context, tx pgx.Tx, n Notification) (SendResult, error) {
	row, err := c.prepare(n)
	if err != nil {
		return SendResult{}, err
	}
	id, dup, err := stores.InsertNotification(ctx, tx, row)
	if err != nil {
		return SendResult{}, sendError(err)
	}
	c.logger.DebugContext(ctx, "notification enqueued", "notification_id", id, "notifier", n.Notifier,
		"key", n.Key, "duplicate", dup)
	return SendResult{ID: id, Duplicate: dup}, nil
}

// Send is SendTx in a transaction of its own. The enqueue is one statement
// (the notification's row and its fan-out job, written together), so it
// runs as one, with no BEGIN and COMMIT around it: one round trip instead of
// three.
func (c *Client) Send(ctx context.Context, n Notification) (SendResult, error) {
	if c.pool == nil {
		return SendResult{}, errors.New("notifyd: Send needs a client created with a pool")
	}
	row, err := c.prepare(n)
	if err != nil {
		return SendResult{}, err
	}
	id, dup, err := stores.InsertNotification(ctx, c.pool, row)
	if err != nil {
		return SendResult{}, sendError(err)
	}
	c.logger.DebugContext(ctx, "notification enqueued", "notification_id", id, "notifier", n.Notifier,
		"key", n.Key, "duplicate", dup)
	return SendResult{ID: id, Duplicate: dup}, nil
}

// CancelTx cancels (notifier, key), sent with no tenant, inside tx (see
// CancelTenantTx for a tenant's): deliveries not yet sent become
// cancelled (digest rows digest_dropped), the inbox items are removed, and a
// fan-out still in progress stops at its next chunk. A send already handed to
// a provider finishes and is recorded as it went. A notification of a
// batching notifier leaves its batches and they go on without it: when it
// was a batch's first member the next member carries the batch and takes
// over its in-app item (docs/workflows.md). It returns the number of
// deliveries and inbox items withdrawn, and ErrNotFound when the notification
// does not exist.
//
// It locks the notification's row and those of its unsent batches until tx
// ends (as a fan-out chunk of the notification, or a join of its batches,
// would): keep the transaction short after it.
func (c *Client) CancelTx(ctx context.Context, tx pgx.Tx, notifier, key string) (int, error) {
	return c.CancelTenantTx(ctx, tx, "", notifier, key)
}

// CancelTenantTx is CancelTx for the notification (notifier, key) that was
// sent for tenant ("" for none). Keys are per tenant: another tenant's
// notification of the same key is never touched, and ErrNotFound means that
// tenant sent no such notification.
func (c *Client) CancelTenantTx(ctx context.Context, tx pgx.Tx, tenant, notifier, key string) (int, error) {
	n, err := stores.CancelNotification(ctx, tx, tenant, notifier, key)
	if errors.Is(err, stores.ErrNotFound) {
		return 0, ErrNotFound
	}
	if err != nil {
		return 0, sendError(err)
	}
	return n, nil
}

// Cancel is CancelTx in a transaction of its own.
func (c *Client) Cancel(ctx context.Context, notifier, key string) (int, error) {
	return c.CancelTenant(ctx, "", notifier, key)
}

// CancelTenant is CancelTenantTx in a transaction of its own.
func (c *Client) CancelTenant(ctx context.Context, tenant, notifier, key string) (int, error) {
	if c.pool == nil {
		return 0, errors.New("notifyd: Cancel needs a client created with a pool")
	}
	var n int
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		var err error
		n, err = c.CancelTenantTx(ctx, tx, tenant, notifier, key)
		return err
	})
	return n, err
}

// prepare validates n and turns it into the row SendTx writes. Inline
// recipients are sorted by id (byte order, the fan-out's cursor order), as
// notify_send sorts them; duplicates are kept and collapse to the strongest
// reason at fan-out (the reason precedence is the daemon's config).
func (c *Client) prepare(n Notification) (stores.NewNotification, error) {
	if err := checkText("notifier", n.Notifier, 255); err != nil {
		return stores.NewNotification{}, err
	}
	if err := checkText("key", n.Key, 255); err != nil {
		return stores.NewNotification{}, err
	}
	if n.Actor != "" {
		if err := checkText("actor", n.Actor, 255); err != nil {
			return stores.NewNotification{}, err
		}
	}
	if n.Tenant != "" {
		if err := CheckTenantID("tenant", n.Tenant); err != nil {
			return stores.NewNotification{}, err
		}
	}
	if len(n.Recipients) == 0 && len(n.Topics) == 0 && !c.hasAudience(n.Notifier) {
		return stores.NewNotification{}, &InputError{Field: "recipients", Message: "give at least one recipient or topic"}
	}
	rs := slices.Clone(n.Recipients)
	for i := range rs {
		if err := checkText(fmt.Sprintf("recipients[%d].id", i), rs[i].ID, 255); err != nil {
			return stores.NewNotification{}, err
		}
		if rs[i].Reason == "" {
			rs[i].Reason = DefaultReason
		} else if len(rs[i].Reason) > 64 {
			return stores.NewNotification{}, &InputError{Field: fmt.Sprintf("recipients[%d].reason", i), Message: "longer than 64 bytes"}
		}
	}
	for i, t := range n.Topics {
		if err := checkText(fmt.Sprintf("topics[%d]", i), t, 255); err != nil {
			return stores.NewNotification{}, err
		}
	}
	topics := slices.Clone(n.Topics)
	slices.Sort(topics)
	topics = slices.Compact(topics)
	slices.SortStableFunc(rs, func(a, b Recipient) int { return strings.Compare(a.ID, b.ID) })
	distinct := countDistinct(rs)

	params := n.Params
	if params == nil {
		params = map[string]any{}
	}
	raw, err := json.Marshal(params)
	if err != nil {
		return stores.NewNotification{}, &InputError{Field: "params", Message: "not JSON-encodable: " + err.Error()}
	}
	if c.config != nil {
		nf, ok := c.config.Notifier(n.Notifier)
		if !ok {
			return stores.NewNotification{}, fmt.Errorf("%w %q", ErrUnknownNotifier, n.Notifier)
		}
		// Validate the JSON form: what the fan-out will read back.
		var decoded map[string]any
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		if err := dec.Decode(&decoded); err != nil {
			return stores.NewNotification{}, &InputError{Field: "params", Message: err.Error()}
		}
		if err := nf.ValidateParams(decoded); err != nil {
			return stores.NewNotification{}, err
		}
		if distinct > nf.MaxRecipients {
			return stores.NewNotification{}, fmt.Errorf("%w: %d inline recipients, notifier %s allows %d",
				ErrTooManyRecipients, distinct, n.Notifier, nf.MaxRecipients)
		}
	}
	row := stores.NewNotification{
		Notifier:   n.Notifier,
		Key:        n.Key,
		Actor:      n.Actor,
		Recipients: make([]string, len(rs)),
		Reasons:    make([]string, len(rs)),
		Topics:     topics,
		Params:     raw,
		SendAt:     n.SendAt,
		Tenant:     n.Tenant,
	}
	for i, r := range rs {
		row.Recipients[i], row.Reasons[i] = r.ID, r.Reason
	}
	return row, nil
}

// hasAudience reports whether notifier may be sent without recipients or
// topics: its config names an audience query. Without a Config, notify_send
// decides from the published catalog.
func (c *Client) hasAudience(notifier string) bool {
	if c.config == nil {
		return true
	}
	nf, ok := c.config.Notifier(notifier)
	return ok && nf.Audience != nil
}

// sendError turns what notify_send refused into the Go API's errors.
func sendError(err error) error {
	in, ok := stores.InputErrorOf(err)
	switch {
	case !ok:
		return err
	case in.Field == "notifier" && strings.HasPrefix(in.Message, "unknown notifier"):
		return fmt.Errorf("%w %s (not in the published catalog)", ErrUnknownNotifier, strings.TrimPrefix(in.Message, "unknown notifier "))
	case in.Field == "recipients" && strings.HasPrefix(in.Message, "too many recipients"):
		return fmt.Errorf("%w%s", ErrTooManyRecipients, strings.TrimPrefix(in.Message, "too many recipients"))
	case in.Schema:
		return &config.ParamsError{Details: []config.ParamsDetail{{Pointer: in.Pointer, Message: in.Message}}}
	}
	return &InputError{Field: in.Field, Message: in.Message}
}

func countDistinct(sorted []Recipient) int {
	n := 0
	for i := range sorted {
		if i == 0 || sorted[i].ID != sorted[i-1].ID {
			n++
		}
	}
	return n
}

func checkText(field, s string, max int) error {
	switch {
	case s == "":
		return &InputError{Field: field, Message: "is required"}
	case len(s) > max:
		return &InputError{Field: field, Message: fmt.Sprintf("longer than %d bytes", max)}
	case !utf8.ValidString(s):
		return &InputError{Field: field, Message: "is not valid UTF-8"}
	case strings.ContainsRune(s, 0):
		return &InputError{Field: field, Message: "contains a NUL byte"}
	}
	return nil
}

// checkEncoding refuses text PostgreSQL cannot store, which only Go can see:
// invalid UTF-8 (JSON encoding would silently replace it) and NUL bytes.
// The other rules of a field are the SQL function's that receives it.
func checkEncoding(field, s string) error {
	switch {
	case !utf8.ValidString(s):
		return &InputError{Field: field, Message: "is not valid UTF-8"}
	case strings.ContainsRune(s, 0):
		return &InputError{Field: field, Message: "contains a NUL byte"}
	}
	return nil
}
