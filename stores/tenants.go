package stores

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/notifyd/notifyd/notifytype"
	"github.com/notifyd/notifyd/stores/uuidv7"
)

// Tenant is one row of notify_tenants (sql/migrations/00025_tenants.sql).
type Tenant struct {
	ID   string
	Name string
	// Branding is the JSON object {"logo_url", "primary_color",
	// "email_from"} as stored ({} for none).
	Branding json.RawMessage
	// Preferences are the tenant's default rules: the layer between a
	// recipient's global rules and the notifier's defaults.
	Preferences []PreferenceRule
	CreatedAt   time.Time
	UpdatedAt   time.Time
}

// Template is t as templates see it (.Tenant).
func (t *Tenant) Template() (*notifytype.Tenant, error) {
	out := &notifytype.Tenant{ID: t.ID, Name: t.Name}
	if len(t.Branding) > 0 {
		if err := json.Unmarshal(t.Branding, &out.Branding); err != nil {
			return nil, fmt.Errorf("tenant %s: stored branding: %w", t.ID, err)
		}
	}
	return out, nil
}

// putTenantSQL creates or replaces tenant $1; xmax = 0 tells a new row.
const putTenantSQL = `
INSERT INTO notify_tenants AS t (id, name, branding, preferences)
VALUES ($1, $2, $3, $4)
ON CONFLICT (id) DO UPDATE
SET name = EXCLUDED.name, branding = EXCLUDED.branding, preferences = EXCLUDED.preferences, updated_at = now()
RETURNING t.created_at, t.updated_at, (t.xmax = 0)`

// PutTenant creates or replaces t (its name, branding and default rules)
// and reports whether it was created. CreatedAt and UpdatedAt are set.
func PutTenant(ctx context.Context, db DB, t *Tenant) (created bool, err error) {
	branding := t.Branding
	if len(branding) == 0 {
		branding = json.RawMessage("{}")
	}
	prefs, err := json.Marshal(rulesJSON(t.Preferences))
	if err != nil {
		return false, err
	}
	err = db.QueryRow(ctx, putTenantSQL, t.ID, t.Name, string(branding), string(prefs)).
		Scan(&t.CreatedAt, &t.UpdatedAt, &created)
	if err != nil {
		return false, fmt.Errorf("put tenant %s: %w", t.ID, err)
	}
	return created, nil
}

type ruleJSON struct {
	Scope   string `json:"scope"`
	Channel string `json:"channel"`
	Mode    string `json:"mode"`
}

func rulesJSON(rules []PreferenceRule) []ruleJSON {
	out := make([]ruleJSON, len(rules))
	for i, r := range rules {
		out[i] = ruleJSON(r)
	}
	return out
}

const getTenantSQL = `
SELECT id, name, branding, preferences, created_at, updated_at FROM notify_tenants WHERE id = $1`

// GetTenant reads tenant id, or ErrNotFound.
func GetTenant(ctx context.Context, db DB, id string) (*Tenant, error) {
	rows, err := db.Query(ctx, getTenantSQL, id)
	if err != nil {
		return nil, fmt.Errorf("get tenant %s: %w", id, err)
	}
	ts, err := scanTenants(rows)
	if err != nil {
		return nil, fmt.Errorf("get tenant %s: %w", id, err)
	}
	if len(ts) == 0 {
		return nil, ErrNotFound
	}
	return &ts[0], nil
}

const listTenantsSQL = `
SELECT id, name, branding, preferences, created_at, updated_at FROM notify_tenants
WHERE id > $1 ORDER BY id LIMIT $2`

// ListTenants reads up to limit tenants after id after ("" from the first),
// in id order.
func ListTenants(ctx context.Context, db DB, after string, limit int) ([]Tenant, error) {
	rows, err := db.Query(ctx, listTenantsSQL, after, limit)
	if err != nil {
		return nil, fmt.Errorf("list tenants: %w", err)
	}
	ts, err := scanTenants(rows)
	if err != nil {
		return nil, fmt.Errorf("list tenants: %w", err)
	}
	return ts, nil
}

func scanTenants(rows pgx.Rows) ([]Tenant, error) {
	defer rows.Close()
	out := []Tenant{}
	for rows.Next() {
		var t Tenant
		var prefs []byte
		if err := rows.Scan(&t.ID, &t.Name, &t.Branding, &prefs, &t.CreatedAt, &t.UpdatedAt); err != nil {
			return nil, err
		}
		var rs []ruleJSON
		if err := json.Unmarshal(prefs, &rs); err != nil {
			return nil, fmt.Errorf("tenant %s: stored preferences: %w", t.ID, err)
		}
		t.Preferences = make([]PreferenceRule, len(rs))
		for i, r := range rs {
			t.Preferences[i] = PreferenceRule(r)
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// TenantRule is a recipient's preference rule scoped to one tenant.
type TenantRule struct {
	Tenant string
	PreferenceRule
}

// listTenantPreferencesSQL reads a recipient's tenant-scoped rules, of
// tenant $2 only unless it is NULL.
const listTenantPreferencesSQL = `
SELECT tenant, scope, channel, mode
FROM notify_tenant_preferences
WHERE recipient = $1 AND ($2::text IS NULL OR tenant = $2)
ORDER BY tenant, scope COLLATE "C", channel COLLATE "C"`

// ListTenantPreferences returns recipient's rules scoped to tenant (every
// tenant's for ""), by tenant, least specific scope first.
func ListTenantPreferences(ctx context.Context, db DB, recipient, tenant string) ([]TenantRule, error) {
	rows, err := db.Query(ctx, listTenantPreferencesSQL, recipient, nullIfEmpty(tenant))
	if err != nil {
		return nil, fmt.Errorf("list tenant preferences of %s: %w", recipient, err)
	}
	defer rows.Close()
	out := []TenantRule{}
	for rows.Next() {
		var r TenantRule
		if err := rows.Scan(&r.Tenant, &r.Scope, &r.Channel, &r.Mode); err != nil {
			return nil, fmt.Errorf("list tenant preferences of %s: %w", recipient, err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list tenant preferences of %s: %w", recipient, err)
	}
	return out, nil
}

const (
	deleteTenantPreferencesSQL = `
DELETE FROM notify_tenant_preferences WHERE recipient = $1 AND ($2::text IS NULL OR tenant = $2)`

	insertTenantPreferencesSQL = `
INSERT INTO notify_tenant_preferences (recipient, tenant, scope, channel, mode)
SELECT $1, u.tenant, u.scope, u.channel, u.mode
FROM unnest($2::text[], $3::text[], $4::text[], $5::text[]) AS u(tenant, scope, channel, mode)`
)

// ReplaceTenantPreferences replaces recipient's rules scoped to tenant
// (every tenant-scoped rule for "") with rules, each of which must be of
// that tenant when one is given. Call it in a transaction after the
// recipient lock (ReplacePreferences takes it; LockRecipient otherwise).
func ReplaceTenantPreferences(ctx context.Context, tx DB, recipient, tenant string, rules []TenantRule) error {
	n := len(rules)
	tenants, scopes, chans, modes := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	for i, r := range rules {
		tenants[i], scopes[i], chans[i], modes[i] = r.Tenant, r.Scope, r.Channel, r.Mode
	}
	b := &pgx.Batch{}
	b.Queue(deleteTenantPreferencesSQL, recipient, nullIfEmpty(tenant))
	if n > 0 {
		b.Queue(insertTenantPreferencesSQL, recipient, tenants, scopes, chans, modes)
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("replace tenant preferences of %s: %w", recipient, err)
	}
	return nil
}

// LockRecipient takes the recipient lock (RecipientLockClass) until tx ends.
func LockRecipient(ctx context.Context, tx DB, recipient string) error {
	if _, err := tx.Exec(ctx, lockRecipientSQL, RecipientLockClass, recipient); err != nil {
		return fmt.Errorf("lock recipient %s: %w", recipient, err)
	}
	return nil
}

const missingTenantsSQL = `
SELECT u.id FROM unnest($1::text[]) AS u(id)
WHERE NOT EXISTS (SELECT 1 FROM notify_tenants t WHERE t.id = u.id)
ORDER BY u.id`

// MissingTenants returns those of ids that are not tenants.
func MissingTenants(ctx context.Context, db DB, ids []string) ([]string, error) {
	rows, err := db.Query(ctx, missingTenantsSQL, nonNil(ids))
	if err != nil {
		return nil, fmt.Errorf("check tenants: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("check tenants: %w", err)
	}
	return out, nil
}

// TenantKey is a tenant API key as stored: never the key, only its hash.
type TenantKey struct {
	ID        string
	Tenant    string
	Rate      *float64 // requests per second; nil: the configured default
	Burst     *int
	CreatedAt time.Time
	RevokedAt *time.Time
}

// HashTenantKey is what notify_tenant_keys stores of a key: its SHA-256. A
// key is 32 random bytes, so no slow hash is needed against guessing.
func HashTenantKey(key string) []byte {
	sum := sha256.Sum256([]byte(key))
	return sum[:]
}

const createTenantKeySQL = `
INSERT INTO notify_tenant_keys (id, tenant, hash, rate, burst)
SELECT $1, t.id, $3, $4, $5 FROM notify_tenants t WHERE t.id = $2
RETURNING created_at`

// CreateTenantKey stores the hash of key for tenant, with its own rate
// limit (nil: the default), and returns the key's id; ErrNotFound when the
// tenant does not exist.
func CreateTenantKey(ctx context.Context, db DB, tenant, key string, rate *float64, burst *int) (*TenantKey, error) {
	k := &TenantKey{ID: uuidv7.String(), Tenant: tenant, Rate: rate, Burst: burst}
	err := db.QueryRow(ctx, createTenantKeySQL, k.ID, tenant, HashTenantKey(key), rate, burst).Scan(&k.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("create key of tenant %s: %w", tenant, err)
	}
	return k, nil
}

const revokeTenantKeySQL = `
UPDATE notify_tenant_keys SET revoked_at = coalesce(revoked_at, now())
WHERE tenant = $1 AND id = $2::uuid
RETURNING id`

// RevokeTenantKey revokes key id of tenant; ErrNotFound when the tenant has
// no such key. Revoking twice is not an error.
func RevokeTenantKey(ctx context.Context, db DB, tenant, id string) error {
	if !uuidv7.Valid(id) {
		return ErrNotFound
	}
	var got string
	err := db.QueryRow(ctx, revokeTenantKeySQL, tenant, id).Scan(&got)
	if err != nil {
		return notFound(err)
	}
	return nil
}

const listTenantKeysSQL = `
SELECT id::text, tenant, rate, burst, created_at, revoked_at FROM notify_tenant_keys
WHERE tenant = $1 ORDER BY id`

// ListTenantKeys lists tenant's keys, revoked ones too, oldest first.
func ListTenantKeys(ctx context.Context, db DB, tenant string) ([]TenantKey, error) {
	rows, err := db.Query(ctx, listTenantKeysSQL, tenant)
	if err != nil {
		return nil, fmt.Errorf("list keys of tenant %s: %w", tenant, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (TenantKey, error) {
		var k TenantKey
		err := row.Scan(&k.ID, &k.Tenant, &k.Rate, &k.Burst, &k.CreatedAt, &k.RevokedAt)
		return k, err
	})
	if err != nil {
		return nil, fmt.Errorf("list keys of tenant %s: %w", tenant, err)
	}
	return out, nil
}

const lookupTenantKeySQL = `
SELECT id::text, tenant, rate, burst, created_at, revoked_at FROM notify_tenant_keys WHERE hash = $1`

// LookupTenantKey finds the key whose hash is HashTenantKey(key), revoked
// or not; ErrNotFound when there is none.
func LookupTenantKey(ctx context.Context, db DB, key string) (*TenantKey, error) {
	var k TenantKey
	err := db.QueryRow(ctx, lookupTenantKeySQL, HashTenantKey(key)).
		Scan(&k.ID, &k.Tenant, &k.Rate, &k.Burst, &k.CreatedAt, &k.RevokedAt)
	if err != nil {
		return nil, notFound(err)
	}
	return &k, nil
}

// TenantErasure counts what EraseTenant removed.
type TenantErasure struct {
	// Tenant reports whether the notify_tenants row existed.
	Tenant        bool `json:"tenant"`
	Keys          int  `json:"keys"`
	Preferences   int  `json:"preferences"`
	Inbox         int  `json:"inbox"`
	Deliveries    int  `json:"deliveries"`
	Notifications int  `json:"notifications"`
	// Cancelled counts the tenant's notifications whose fan-out had not
	// finished: cancelled first, so no chunk writes after the erasure.
	Cancelled int `json:"cancelled"`
}

// Empty reports whether nothing of the tenant existed.
func (e *TenantErasure) Empty() bool {
	return !e.Tenant && e.Keys == 0 && e.Preferences == 0 && e.Inbox == 0 && e.Deliveries == 0 &&
		e.Notifications == 0
}

// startTenantErasureSQL deletes tenant $1's row and keys (new sends for it
// fail from here on, and its keys stop working), the push subscriptions and
// devices registered under it (a tenant made again with the same id is not
// pushed to them), and cancels its
// notifications whose fan-out has not finished: the UPDATE waits for a
// chunk in flight (which share-locks its notification) and every later
// chunk finds the notification cancelled and writes nothing.
const startTenantErasureSQL = `
WITH t AS (
    DELETE FROM notify_tenants WHERE id = $1 RETURNING 1
), k AS (
    DELETE FROM notify_tenant_keys WHERE tenant = $1 RETURNING 1
), ps AS (
    DELETE FROM notify_push_subscriptions WHERE tenant = $1
), dv AS (
    DELETE FROM notify_devices WHERE tenant = $1
), c AS (
    UPDATE notify_notifications SET status = 'cancelled', updated_at = now()
    WHERE tenant = $1 AND status IN ('scheduled', 'pending')
    RETURNING 1
)
SELECT (SELECT count(*) FROM t) > 0, (SELECT count(*) FROM k)::int, (SELECT count(*) FROM c)::int`

// The batches of an erasure: each deletes at most $2 rows of tenant $1.
// Rows are named by the whole primary key of the partitioned tables, found
// through their tenant indexes.
const (
	eraseTenantPreferencesSQL = `
WITH gone AS (
    DELETE FROM notify_tenant_preferences
    WHERE (recipient, tenant, scope, channel) IN (SELECT recipient, tenant, scope, channel FROM notify_tenant_preferences
                                                 WHERE tenant = $1 LIMIT $2)
    RETURNING 1
)
SELECT count(*)::int FROM gone`

	eraseTenantInboxSQL = `
DELETE FROM notify_inbox
WHERE (id, notification_id) IN (SELECT id, notification_id FROM notify_inbox WHERE tenant = $1 LIMIT $2)
  AND tenant = $1
RETURNING id::text, recipient`

	eraseTenantDeliveriesSQL = `
WITH gone AS (
    DELETE FROM notify_deliveries
    WHERE (id, notification_id) IN (SELECT id, notification_id FROM notify_deliveries WHERE tenant = $1 LIMIT $2)
      AND tenant = $1
    RETURNING id, notification_id
), attempts AS (
    DELETE FROM notify_delivery_attempts a
    WHERE a.delivery_id = ANY(ARRAY(SELECT id FROM gone))
      AND (a.delivery_id, a.notification_id) IN (SELECT id, notification_id FROM gone)
)
SELECT count(*)::int FROM gone`

	// A notification goes once nothing of it is left (its inbox items and
	// deliveries are deleted first), with its fan-out lanes.
	eraseTenantNotificationsSQL = `
WITH gone AS (
    DELETE FROM notify_notifications n
    WHERE n.id IN (SELECT id FROM notify_notifications WHERE tenant = $1 LIMIT $2)
    RETURNING n.id
), lanes AS (
    DELETE FROM notify_fanout_lanes l WHERE l.notification_id IN (SELECT id FROM gone)
)
SELECT count(*)::int FROM gone`
)

// EraseTenantBatchSize is how many rows one statement of EraseTenant
// deletes at most.
const EraseTenantBatchSize = 1000

// EraseTenant deletes tenant id and everything scoped to it: its keys, its
// recipients' tenant-scoped rules, its inbox items (their deletion logged
// for the streams), deliveries with their attempts, and notifications. Each
// step is its own transaction on pool deleting at most batch rows (0:
// EraseTenantBatchSize), as retention does, so no statement holds an
// unbounded number of locks; a crash leaves a partial erasure that running
// it again finishes. The first transaction deletes the tenant row and
// cancels its unfinished fan-outs, so nothing new is written for it.
func EraseTenant(ctx context.Context, pool interface {
	DB
	Begin(context.Context) (pgx.Tx, error)
}, id string, batch int) (*TenantErasure, error) {
	if batch <= 0 {
		batch = EraseTenantBatchSize
	}
	e := &TenantErasure{}
	if err := pool.QueryRow(ctx, startTenantErasureSQL, id).Scan(&e.Tenant, &e.Keys, &e.Cancelled); err != nil {
		return nil, fmt.Errorf("erase tenant %s: %w", id, err)
	}
	loop := func(what string, n *int, step func() (int, error)) error {
		for {
			got, err := step()
			if err != nil {
				return fmt.Errorf("erase tenant %s: %s: %w", id, what, err)
			}
			*n += got
			if got < batch {
				return nil
			}
		}
	}
	count := func(sql string) func() (int, error) {
		return func() (int, error) {
			var n int
			err := pool.QueryRow(ctx, sql, id, batch).Scan(&n)
			return n, err
		}
	}
	if err := loop("preferences", &e.Preferences, count(eraseTenantPreferencesSQL)); err != nil {
		return e, err
	}
	inbox := func() (int, error) {
		var n int
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, eraseTenantInboxSQL, id, batch)
			if err != nil {
				return err
			}
			var ids, recipients []string
			var itemID, recipient string
			if _, err := pgx.ForEachRow(rows, []any{&itemID, &recipient}, func() error {
				ids, recipients = append(ids, itemID), append(recipients, recipient)
				return nil
			}); err != nil {
				return err
			}
			n = len(ids)
			return LogInboxDeleted(ctx, tx, ids, recipients, id)
		})
		return n, err
	}
	if err := loop("inbox", &e.Inbox, inbox); err != nil {
		return e, err
	}
	if e.Inbox > 0 {
		if err := WakeInboxStreams(ctx, pool); err != nil {
			return e, err
		}
	}
	if err := loop("deliveries", &e.Deliveries, count(eraseTenantDeliveriesSQL)); err != nil {
		return e, err
	}
	if err := loop("notifications", &e.Notifications, count(eraseTenantNotificationsSQL)); err != nil {
		return e, err
	}
	return e, nil
}

func nullIfEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

const tenantItemsSQL = `
SELECT id::text FROM notify_inbox WHERE recipient = $1 AND tenant = $2 AND id = ANY($3::text[]::uuid[])`

// TenantItems returns those of recipient's inbox items ids that are of
// tenant (in no particular order): what a stream confined to the tenant may
// name of a change.
func TenantItems(ctx context.Context, db DB, recipient, tenant string, ids []string) ([]string, error) {
	rows, err := db.Query(ctx, tenantItemsSQL, recipient, tenant, nonNil(ids))
	if err != nil {
		return nil, fmt.Errorf("tenant items of %s: %w", recipient, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("tenant items of %s: %w", recipient, err)
	}
	return out, nil
}
