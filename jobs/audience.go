package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/riverqueue/river"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/notifytype"
	"github.com/notifyd/notifyd/stores"
)

// defaultAudienceReason is the reason of an audience row without one, as
// for an inline recipient without one (notifyd.DefaultReason).
const defaultAudienceReason = "direct"

// normalizeWithAudience is lane 0's normalisation of a notification whose
// notifier has an audience query. The query runs first, read-only, with the
// notifier's statement timeout, its rows written once into the fan-out's
// staging by a transaction of its own (stores.StageAudience); the
// normalisation then runs as for any notification. No row of the audience
// passes through the daemon.
//
// A query the database refuses (a missing table, a statement timeout, a
// write the read-only transaction forbids, no id column) rejects the
// notification with the database's message: it would fail again. A lost
// connection or a cancelled context is returned, and the job retries.
func (w *FanoutWorker) normalizeWithAudience(ctx context.Context, job *river.Job[FanoutArgs], st *stores.FanoutState,
	nf *config.Notifier, item channels.InboxItem, off conditions, guarded bool, log *slog.Logger) (done bool, err error) {
	d := w.Deps
	conn, err := d.Pool.Acquire(ctx)
	if err != nil {
		return false, err
	}
	defer conn.Release()

	q, argErr := w.audienceQuery(st, nf)
	var qErr error
	if argErr != nil {
		qErr = argErr
	} else if size, err := stores.StageAudience(ctx, conn.Conn(), st.ID, q); err != nil {
		if !audienceRefused(ctx, err) {
			return false, fmt.Errorf("audience query of %s: %w", nf.Name, err)
		}
		qErr = err
	} else {
		log.DebugContext(ctx, "audience query staged", "rows", size)
	}

	tx, err := conn.Begin(ctx)
	if err != nil {
		return false, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	// The lock was let go while the query ran: take it again and look.
	id := st.ID
	st, err = stores.LockFanout(ctx, tx, id, 0, true)
	if errors.Is(err, stores.ErrNotFound) {
		// What the staging wrote has no notification left to read it.
		if err := stores.DropAudience(ctx, tx, id); err != nil {
			return false, err
		}
		return true, w.complete(ctx, tx)
	}
	if err != nil {
		return false, err
	}
	switch notifytype.NotificationStatus(st.Status) {
	case notifytype.NotificationCancelled, notifytype.NotificationRejected, notifytype.NotificationFannedOut:
		// Ended while the query ran: the staging is not needed.
		if err := stores.DropAudience(ctx, tx, id); err != nil {
			return false, err
		}
		return true, w.complete(ctx, tx)
	}
	if st.Normalized {
		// Another run normalised it meanwhile; the next step goes on from there.
		return false, tx.Commit(ctx)
	}
	if qErr != nil {
		return true, w.reject(ctx, tx, job, st, "audience query failed: "+audienceMessage(qErr))
	}
	return w.normalize(ctx, tx, job, st, nf, item, off, guarded, log)
}

// audienceQuery is nf's audience query for the notification st, its args
// bound from the params.
func (w *FanoutWorker) audienceQuery(st *stores.FanoutState, nf *config.Notifier) (stores.AudienceQuery, error) {
	params, err := decodeParams(st.Params)
	if err != nil {
		return stores.AudienceQuery{}, err
	}
	q := stores.AudienceQuery{Query: nf.Audience.Query, Timeout: nf.AudienceTimeout.D(), Actor: st.Actor,
		NotifyActor: nf.NotifyActor, Reasons: w.Deps.Config.Reasons, DefaultReason: defaultAudienceReason}
	for _, name := range nf.Audience.Args {
		q.Args = append(q.Args, params[name])
	}
	return q, nil
}

// audienceRefused reports whether err, from running an audience query, is
// the database refusing the query (reject the notification) rather than
// the connection or the job's context failing (retry).
func audienceRefused(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	if errors.Is(err, stores.ErrAudienceShape) || errors.Is(err, stores.ErrAudienceArg) {
		return true
	}
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return false
	}
	switch {
	case strings.HasPrefix(pe.Code, "08"), // connection exception
		strings.HasPrefix(pe.Code, "40"),                           // serialization failure, deadlock
		strings.HasPrefix(pe.Code, "53"),                           // insufficient resources
		strings.HasPrefix(pe.Code, "58"),                           // system error
		pe.Code == "57P01", pe.Code == "57P02", pe.Code == "57P03": // shutdown, crash, cannot connect now
		return false
	}
	return true
}

// audienceMessage is the database's message for a refused audience query,
// with its detail and hint when it gave them.
func audienceMessage(err error) string {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return err.Error()
	}
	msg := pe.Error()
	if pe.Detail != "" {
		msg += "; " + pe.Detail
	}
	if pe.Hint != "" {
		msg += " (hint: " + pe.Hint + ")"
	}
	return msg
}

// conditions are the channels a notification leaves out: their `if` did not
// render "true".
type conditions map[string]bool

// conditionsOf renders every `if` of nf's channels once over params.
func conditionsOf(nf *config.Notifier, params map[string]any) (conditions, error) {
	var off conditions
	for name, nc := range nf.Channels {
		if nc == nil || nc.IfTmpl == nil {
			continue
		}
		ok, err := nf.Condition(name, params)
		if err != nil {
			return nil, err
		}
		if !ok {
			if off == nil {
				off = conditions{}
			}
			off[name] = true
		}
	}
	return off, nil
}
