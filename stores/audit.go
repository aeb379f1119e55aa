package stores

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/notifyd/notifyd/stores/uuidv7"
)

// AuditEntry is one row of the audit log: who (Actor, an operator's or a
// token's id, "admin_token" or "cli:<user>", of ActorKind) did what (Action,
// on Object) when (At), from where (IP), with a Summary of before and after
// that holds no secret and no message body.
type AuditEntry struct {
	ID        string          `json:"id"`
	At        time.Time       `json:"at"`
	Actor     string          `json:"actor"`
	ActorKind string          `json:"actor_kind"`
	Action    string          `json:"action"`
	Object    string          `json:"object"`
	Summary   json.RawMessage `json:"summary"`
	IP        string          `json:"ip"`
}

type auditKey struct{}

// WithAudit returns ctx carrying e: the operation run with it writes e in
// its own transaction (WriteAudit), so the row exists exactly when the
// change does.
func WithAudit(ctx context.Context, e *AuditEntry) context.Context {
	return context.WithValue(ctx, auditKey{}, e)
}

// AuditOf is the entry ctx carries, nil for none.
func AuditOf(ctx context.Context) *AuditEntry {
	e, _ := ctx.Value(auditKey{}).(*AuditEntry)
	return e
}

// AddAuditField sets key to v in the summary of the audit row ctx carries
// (nothing without one): what an operation learns inside its transaction,
// such as the status a delivery had before its retry.
func AddAuditField(ctx context.Context, key string, v any) {
	e := AuditOf(ctx)
	if e == nil {
		return
	}
	m := map[string]any{}
	_ = json.Unmarshal(e.Summary, &m)
	m[key] = v
	if b, err := json.Marshal(m); err == nil {
		e.Summary = b
	}
}

const insertAuditSQL = `
INSERT INTO notify_audit (id, at, actor, actor_kind, action, object, summary, ip)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`

// WriteAudit writes the entry ctx carries (WithAudit) with tx, the
// transaction of the change it records; nothing when ctx carries none.
// Call it in every transaction of an audited operation, before commit.
func WriteAudit(ctx context.Context, tx DB) error {
	e := AuditOf(ctx)
	if e == nil {
		return nil
	}
	return InsertAudit(ctx, tx, e)
}

// InsertAudit writes e (its ID is set when empty; a zero At is now).
func InsertAudit(ctx context.Context, tx DB, e *AuditEntry) error {
	if e.ID == "" {
		e.ID = uuidv7.String()
	}
	if e.At.IsZero() {
		e.At = time.Now()
	}
	if len(e.Summary) == 0 {
		e.Summary = json.RawMessage(`{}`)
	}
	if _, err := tx.Exec(ctx, insertAuditSQL, e.ID, e.At, e.Actor, e.ActorKind, e.Action, e.Object, e.Summary, e.IP); err != nil {
		return fmt.Errorf("write audit row %s: %w", e.Action, err)
	}
	return nil
}

// AuditFilter selects audit rows: each set field must match (Action and
// Object exactly, Actor exactly), rows at or after Since; After is the
// keyset cursor (rows after that id, oldest first).
type AuditFilter struct {
	Since  time.Time
	Actor  string
	Action string
	Object string
	After  string
	Limit  int
}

const listAuditSQL = `
SELECT id::text, at, actor, actor_kind, action, object, summary, ip FROM notify_audit
WHERE ($1::timestamptz IS NULL OR at >= $1)
  AND ($2 = '' OR actor = $2)
  AND ($3 = '' OR action = $3)
  AND ($4 = '' OR object = $4)
  AND ($5::uuid IS NULL OR id > $5::uuid)
ORDER BY id
LIMIT $6`

// ListAudit reads the audit rows f selects, oldest first (ids are UUIDv7,
// in time order).
func ListAudit(ctx context.Context, db DB, f AuditFilter) ([]AuditEntry, error) {
	var since *time.Time
	if !f.Since.IsZero() {
		since = &f.Since
	}
	var after *string
	if f.After != "" {
		if !uuidv7.Valid(f.After) {
			return nil, ErrNotFound
		}
		after = &f.After
	}
	rows, err := db.Query(ctx, listAuditSQL, since, f.Actor, f.Action, f.Object, after, f.Limit)
	if err != nil {
		return nil, fmt.Errorf("list audit: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (AuditEntry, error) {
		var e AuditEntry
		err := row.Scan(&e.ID, &e.At, &e.Actor, &e.ActorKind, &e.Action, &e.Object, &e.Summary, &e.IP)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("list audit: %w", err)
	}
	return out, nil
}
