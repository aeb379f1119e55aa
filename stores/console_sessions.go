package stores

import (
	"context"
	"crypto/sha256"
	"fmt"
	"time"
)

// ConsoleSession is a person signed in to the console with single sign-on:
// the operator (their sign-in identity), the role and tenants they were
// given at sign-in, and when the session ends.
type ConsoleSession struct {
	Operator   string
	Name       string
	Role       string
	Tenants    []string
	CreatedAt  time.Time
	LastSeenAt time.Time
	ExpiresAt  time.Time
	// CSRFHash is the SHA-256 of the session's CSRF token.
	CSRFHash []byte
}

const createConsoleSessionSQL = `
INSERT INTO notify_console_sessions (hash, csrf_hash, operator, name, role, tenants, created_at, last_seen_at, expires_at)
VALUES (sha256($1::bytea), sha256($2::bytea), $3, $4, $5, $6, $7, $7, $8)`

// CreateConsoleSession stores s under the SHA-256 of the session token tok
// and of its CSRF token csrf; neither token is stored.
func CreateConsoleSession(ctx context.Context, db DB, s *ConsoleSession, tok, csrf string) error {
	if s.Tenants == nil {
		s.Tenants = []string{}
	}
	s.LastSeenAt = s.CreatedAt
	sum := sha256.Sum256([]byte(csrf))
	s.CSRFHash = sum[:]
	if _, err := db.Exec(ctx, createConsoleSessionSQL, []byte(tok), []byte(csrf), s.Operator, s.Name, s.Role, s.Tenants,
		s.CreatedAt, s.ExpiresAt); err != nil {
		return fmt.Errorf("create console session: %w", err)
	}
	return nil
}

// touchConsoleSessionSQL finds a live session and marks it used, in one
// statement: a session past expires_at, or unused for longer than the idle
// timeout ($3), matches nothing.
const touchConsoleSessionSQL = `
UPDATE notify_console_sessions SET last_seen_at = $2
WHERE hash = sha256($1::bytea) AND expires_at > $2 AND last_seen_at > $2 - make_interval(secs => $3::float8)
RETURNING operator, name, role, tenants, created_at, last_seen_at, expires_at, csrf_hash`

// UseConsoleSession returns the live session of token tok and records its
// use at now; ErrNotFound for a token that names no session, or one that
// expired or sat idle longer than idle.
func UseConsoleSession(ctx context.Context, db DB, tok string, now time.Time, idle time.Duration) (*ConsoleSession, error) {
	var s ConsoleSession
	err := db.QueryRow(ctx, touchConsoleSessionSQL, []byte(tok), now, idle.Seconds()).Scan(&s.Operator, &s.Name, &s.Role, &s.Tenants,
		&s.CreatedAt, &s.LastSeenAt, &s.ExpiresAt, &s.CSRFHash)
	if err != nil {
		return nil, notFound(err)
	}
	return &s, nil
}

const deleteConsoleSessionSQL = `
DELETE FROM notify_console_sessions WHERE hash = sha256($1::bytea) RETURNING operator`

// DeleteConsoleSession ends the session of token tok (sign-out) and returns
// whose it was; ErrNotFound for none.
func DeleteConsoleSession(ctx context.Context, db DB, tok string) (string, error) {
	var op string
	if err := db.QueryRow(ctx, deleteConsoleSessionSQL, []byte(tok)).Scan(&op); err != nil {
		return "", notFound(err)
	}
	return op, nil
}

const deleteEndedConsoleSessionsSQL = `
DELETE FROM notify_console_sessions WHERE expires_at <= $1 OR last_seen_at <= $1 - make_interval(secs => $2::float8)`

// DeleteEndedConsoleSessions removes sessions that can no longer be used.
func DeleteEndedConsoleSessions(ctx context.Context, db DB, now time.Time, idle time.Duration) (int64, error) {
	tag, err := db.Exec(ctx, deleteEndedConsoleSessionsSQL, now, idle.Seconds())
	if err != nil {
		return 0, fmt.Errorf("delete ended console sessions: %w", err)
	}
	return tag.RowsAffected(), nil
}
