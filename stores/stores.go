// Package stores is notifyd's PostgreSQL access: every SQL statement the daemon
// and the Go API run lives here, one constant each, written out in full so an
// operator can run the statement they saw in a log.
//
// Functions take a DB, which a pgx.Tx, a *pgx.Conn and a *pgxpool.Pool all
// satisfy; the caller decides the transaction. pgx.ErrNoRows is converted to
// ErrNotFound at this boundary.
package stores

import (
	"context"
	"errors"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DB is what every store function needs: a pool, a connection or a transaction.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// ErrNotFound is returned when a looked-up row does not exist (or, for a
// recipient-scoped lookup, belongs to somebody else).
var ErrNotFound = errors.New("not found")

// RetryDeadlock runs fn (a whole transaction) again, up to 3 times in all,
// when PostgreSQL aborted it as a deadlock victim. A mark and a cancel lock
// the same item rows in their own orders; an erasure locks inbox and ledger
// rows that both also lock. The victim has rolled back cleanly, so running it
// again is safe.
func RetryDeadlock(fn func() error) error {
	var err error
	for range 3 {
		err = fn()
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "40P01" {
			return err
		}
	}
	return err
}

// protectedStatuses are the delivery statuses a send claim never takes
// (claimSQL): a live claim (sending, digest_sending), the terminal statuses,
// and digest_pending, whose rows the digest jobs own. The SQL function
// notify_cancel spells out the same list for the rows a cancel leaves alone,
// except that it drops digest_pending rows; keep the two in step. It is written
// as the list of statuses that must NOT be touched, so a status this version
// does not know is treated as not sent: it never suppresses a send.
var protectedStatuses = []string{
	"sending", "digest_sending", "sent", "refused", "expired", "unavailable", "skipped", "cancelled",
	"digest_pending", "digest_sent", "digest_failed", "digest_dropped",
	"batched", "throttled", "suppressed", // workflows and deliverability: terminal (00015_workflows.sql)
	"delivered", "bounced", "complained", // sent, then reported by its provider (00045_delivery_events.sql)
}

func notFound(err error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrNotFound
	}
	return err
}

// SQLInputError is what a notifyd SQL function refused (SQLSTATE 22023,
// invalid_parameter_value): Field is the error's COLUMN (`email`,
// "recipients[2].id", "params", "notifier"), Message the rest of the message
// after "<field>: " when it starts so, else the whole message. For params
// that fail the notifier's schema ("<notifier>: params <pointer>: <message>"),
// Pointer is the JSON pointer of the failing value (the error's DETAIL) and
// Message what is wrong with it.
type SQLInputError struct {
	Field   string
	Message string
	// Schema is set for params that fail the notifier's JSON Schema; Pointer
	// is then the failing value's JSON pointer ("" for the params object).
	Schema  bool
	Pointer string
}

// InputErrorOf returns the SQLInputError err carries, if it is a 22023
// error naming a field, as notify_send, notify_put_recipient and the other
// SQL API functions raise for bad input.
func InputErrorOf(err error) (SQLInputError, bool) {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "22023" || pgErr.ColumnName == "" {
		return SQLInputError{}, false
	}
	e := SQLInputError{Field: pgErr.ColumnName, Message: pgErr.Message}
	if rest, ok := strings.CutPrefix(pgErr.Message, pgErr.ColumnName+": "); ok {
		e.Message = rest
	}
	if e.Field == "params" && strings.Contains(pgErr.Message, ": params") {
		// "<notifier>: params <pointer>: <message>"
		e.Schema, e.Pointer = true, pgErr.Detail
		prefix := "params: "
		if e.Pointer != "" {
			prefix = "params " + e.Pointer + ": "
		}
		if _, rest, ok := strings.Cut(pgErr.Message, prefix); ok {
			e.Message = rest
		}
	}
	return e, true
}
