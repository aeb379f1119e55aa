package stores

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/notifyd/notifyd/stores/uuidv7"
)

// Operator is a person who signs in to the console: id is their sign-in
// identity (the email or subject single sign-on gives). Empty Tenants
// reach every tenant.
type Operator struct {
	ID        string
	Name      string
	Role      string
	Tenants   []string
	CreatedAt time.Time
	UpdatedAt time.Time
}

const putOperatorSQL = `
INSERT INTO notify_operators (id, name, role, tenants) VALUES ($1, $2, $3, $4)
ON CONFLICT (id) DO UPDATE SET name = excluded.name, role = excluded.role, tenants = excluded.tenants, updated_at = now()
RETURNING created_at, updated_at, (xmax = 0)`

// PutOperator creates or replaces the operator o.ID and reports whether it
// was created.
func PutOperator(ctx context.Context, db DB, o *Operator) (created bool, err error) {
	if o.Tenants == nil {
		o.Tenants = []string{}
	}
	err = db.QueryRow(ctx, putOperatorSQL, o.ID, o.Name, o.Role, o.Tenants).Scan(&o.CreatedAt, &o.UpdatedAt, &created)
	if err != nil {
		return false, fmt.Errorf("put operator %s: %w", o.ID, err)
	}
	return created, nil
}

const getOperatorSQL = `
SELECT id, name, role, tenants, created_at, updated_at FROM notify_operators WHERE id = $1`

// GetOperator reads one operator; ErrNotFound when there is none.
func GetOperator(ctx context.Context, db DB, id string) (*Operator, error) {
	var o Operator
	err := db.QueryRow(ctx, getOperatorSQL, id).Scan(&o.ID, &o.Name, &o.Role, &o.Tenants, &o.CreatedAt, &o.UpdatedAt)
	if err != nil {
		return nil, notFound(err)
	}
	return &o, nil
}

const listOperatorsSQL = `
SELECT id, name, role, tenants, created_at, updated_at FROM notify_operators ORDER BY id`

// ListOperators lists every operator by id.
func ListOperators(ctx context.Context, db DB) ([]Operator, error) {
	rows, err := db.Query(ctx, listOperatorsSQL)
	if err != nil {
		return nil, fmt.Errorf("list operators: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Operator, error) {
		var o Operator
		err := row.Scan(&o.ID, &o.Name, &o.Role, &o.Tenants, &o.CreatedAt, &o.UpdatedAt)
		return o, err
	})
	if err != nil {
		return nil, fmt.Errorf("list operators: %w", err)
	}
	return out, nil
}

const deleteOperatorSQL = `DELETE FROM notify_operators WHERE id = $1 RETURNING role`

// DeleteOperator removes an operator (their open sessions end with their
// next request); ErrNotFound when there is none.
func DeleteOperator(ctx context.Context, db DB, id string) error {
	var role string
	return notFound(db.QueryRow(ctx, deleteOperatorSQL, id).Scan(&role))
}

// OperatorToken is an operator API token as stored: never the token, only
// its hash. Empty Tenants reach every tenant; a nil ExpiresAt never
// expires.
type OperatorToken struct {
	ID         string
	Name       string
	Role       string
	Tenants    []string
	CreatedBy  string
	CreatedAt  time.Time
	ExpiresAt  *time.Time
	LastUsedAt *time.Time
	RevokedAt  *time.Time
}

// HashOperatorToken is what notify_operator_tokens stores of a token: its
// SHA-256 (a token is 32 random bytes, so no slow hash is needed).
func HashOperatorToken(token string) []byte {
	sum := sha256.Sum256([]byte(token))
	return sum[:]
}

const createOperatorTokenSQL = `
INSERT INTO notify_operator_tokens (id, name, hash, role, tenants, created_by, expires_at)
VALUES ($1, $2, $3, $4, $5, $6, $7)
RETURNING created_at`

// CreateOperatorToken stores the hash of token with t's name, role,
// tenants, creator and expiry, and fills in t's id and creation time.
func CreateOperatorToken(ctx context.Context, db DB, t *OperatorToken, token string) error {
	t.ID = uuidv7.String()
	if t.Tenants == nil {
		t.Tenants = []string{}
	}
	err := db.QueryRow(ctx, createOperatorTokenSQL, t.ID, t.Name, HashOperatorToken(token), t.Role, t.Tenants,
		t.CreatedBy, t.ExpiresAt).Scan(&t.CreatedAt)
	if err != nil {
		return fmt.Errorf("create operator token: %w", err)
	}
	return nil
}

const operatorTokenColumns = `id::text, name, role, tenants, created_by, created_at, expires_at, last_used_at, revoked_at`

func scanOperatorToken(row pgx.Row) (OperatorToken, error) {
	var t OperatorToken
	err := row.Scan(&t.ID, &t.Name, &t.Role, &t.Tenants, &t.CreatedBy, &t.CreatedAt, &t.ExpiresAt, &t.LastUsedAt, &t.RevokedAt)
	return t, err
}

const listOperatorTokensSQL = `SELECT ` + operatorTokenColumns + ` FROM notify_operator_tokens ORDER BY id`

// ListOperatorTokens lists every operator token, revoked and expired ones
// too, oldest first.
func ListOperatorTokens(ctx context.Context, db DB) ([]OperatorToken, error) {
	rows, err := db.Query(ctx, listOperatorTokensSQL)
	if err != nil {
		return nil, fmt.Errorf("list operator tokens: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (OperatorToken, error) { return scanOperatorToken(row) })
	if err != nil {
		return nil, fmt.Errorf("list operator tokens: %w", err)
	}
	return out, nil
}

const revokeOperatorTokenSQL = `
UPDATE notify_operator_tokens SET revoked_at = coalesce(revoked_at, $2)
WHERE id = $1::uuid
RETURNING ` + operatorTokenColumns

// RevokeOperatorToken revokes token id at now and returns it; ErrNotFound
// when there is none. Revoking twice keeps the first time.
func RevokeOperatorToken(ctx context.Context, db DB, id string, now time.Time) (*OperatorToken, error) {
	if !uuidv7.Valid(id) {
		return nil, ErrNotFound
	}
	t, err := scanOperatorToken(db.QueryRow(ctx, revokeOperatorTokenSQL, id, now))
	if err != nil {
		return nil, notFound(err)
	}
	return &t, nil
}

// useOperatorTokenSQL reads the token and, when it is valid at $2, sets its
// last_used_at, at most once a minute: a script calling many times a second
// does not rewrite the row on every call.
const useOperatorTokenSQL = `
WITH used AS (
    UPDATE notify_operator_tokens SET last_used_at = $2
    WHERE hash = $1 AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > $2)
      AND (last_used_at IS NULL OR last_used_at < $2 - interval '1 minute')
    RETURNING id
)
SELECT ` + operatorTokenColumns + ` FROM notify_operator_tokens WHERE hash = $1`

// UseOperatorToken finds the token whose hash is HashOperatorToken(token),
// revoked or expired or not (the caller says why it is refused), and
// records its use at now when it is valid; ErrNotFound when there is none.
// The LastUsedAt returned is the one before this use.
func UseOperatorToken(ctx context.Context, db DB, token string, now time.Time) (*OperatorToken, error) {
	t, err := scanOperatorToken(db.QueryRow(ctx, useOperatorTokenSQL, HashOperatorToken(token), now))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("look up operator token: %w", err)
	}
	return &t, nil
}
