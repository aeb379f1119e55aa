package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notifyd/notifyd/internal/httpapi"
	"github.com/notifyd/notifyd/notifytype"
	"github.com/notifyd/notifyd/stores"
)

// readRouter sends the API's read-only queries to a streaming standby
// (database.read_url) while the standby is close enough behind the primary
// (database.max_read_lag), and to the primary otherwise. It decides on a
// timer, never per request: a request asks ReadDB, which is one atomic load.
//
// The lag is measured against the primary's own WAL, not against the
// standby's clock or the time of its last replayed commit (which only says
// something while the primary commits): every check reads the primary's
// flushed WAL position and remembers it with the time it was read, then reads
// how far the standby has replayed. Everything the primary had flushed at a
// remembered time the standby has replayed is older than the standby's
// state; the lag is the time since the newest such sample, so it is at most
// one check interval more than the real lag, and zero when the standby has
// replayed everything the primary had flushed at this check.
type readRouter struct {
	primary, standby *pgxpool.Pool
	maxLag           time.Duration
	every            time.Duration
	logger           *slog.Logger
	now              func() time.Time

	useStandby atomic.Bool

	mu      sync.Mutex
	samples []lsnSample // the primary's flushed WAL positions not yet replayed by the standby, oldest first
	// replayedAt is when the newest position the standby has replayed was
	// read on the primary.
	replayedAt time.Time
	status     httpapi.ReadStatus
}

// lsnSample is the primary's flushed WAL position at a time.
type lsnSample struct {
	lsn uint64
	at  time.Time
}

// readCheckTimeout bounds each check's queries: a standby that does not
// answer in time is treated as down.
const readCheckTimeout = 2 * time.Second

func newReadRouter(primary, standby *pgxpool.Pool, maxLag time.Duration, logger *slog.Logger) *readRouter {
	// A few checks per allowed lag, at most one a second, at least 50 ms apart.
	every := min(max(maxLag/4, 50*time.Millisecond), time.Second)
	return &readRouter{primary: primary, standby: standby, maxLag: maxLag, every: every, logger: logger, now: time.Now,
		status: httpapi.ReadStatus{Configured: true, Reads: "primary", Error: "not checked yet"}}
}

// ReadDB is where a read-only query goes now: the standby or the primary.
func (r *readRouter) ReadDB() stores.DB {
	if r.useStandby.Load() {
		return r.standby
	}
	return r.primary
}

// ReadStatus is the latest check's outcome, for /readyz.
func (r *readRouter) ReadStatus() httpapi.ReadStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.status
}

// run checks the standby every r.every until ctx ends.
func (r *readRouter) run(ctx context.Context) {
	t := time.NewTicker(r.every)
	defer t.Stop()
	for {
		r.check(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// check measures the standby's lag and decides where reads go.
func (r *readRouter) check(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, readCheckTimeout)
	defer cancel()
	lag, err := r.measure(ctx)
	use := err == nil && lag <= r.maxLag
	status := httpapi.ReadStatus{Configured: true, Reads: "primary", Lag: lag, CheckedAt: r.now()}
	switch {
	case err != nil:
		status.Error = err.Error()
	case !use:
		status.Error = fmt.Sprintf("standby is %s behind, more than database.max_read_lag (%s)", lag.Round(time.Millisecond), r.maxLag)
	default:
		status.Reads = "standby"
	}
	if was := r.useStandby.Swap(use); was != use {
		if use {
			r.logger.InfoContext(ctx, "reads go to the standby", "lag", lag)
		} else {
			r.logger.WarnContext(ctx, "reads go to the primary", "reason", status.Error)
		}
	}
	r.mu.Lock()
	r.status = status
	r.mu.Unlock()
}

// measure samples the primary's flushed WAL position, reads the standby's
// replayed position and returns the lag (see readRouter).
func (r *readRouter) measure(ctx context.Context) (time.Duration, error) {
	var primaryLSN string
	if err := r.primary.QueryRow(ctx, `SELECT pg_current_wal_flush_lsn()::text`).Scan(&primaryLSN); err != nil {
		return 0, fmt.Errorf("read the primary's WAL position: %w", err)
	}
	flushed, err := parseLSN(primaryLSN)
	if err != nil {
		return 0, err
	}
	at := r.now()
	var inRecovery bool
	var replayed *string
	if err := r.standby.QueryRow(ctx, `SELECT pg_is_in_recovery(), pg_last_wal_replay_lsn()::text`).Scan(&inRecovery, &replayed); err != nil {
		return 0, fmt.Errorf("standby unreachable: %w", err)
	}
	if !inRecovery || replayed == nil {
		// Promoted, or pointed at a primary: its data may have left this
		// primary's behind, and its reads would not see this primary's writes.
		return 0, errors.New("database.read_url is not a standby in recovery")
	}
	pos, err := parseLSN(*replayed)
	if err != nil {
		return 0, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.samples = append(r.samples, lsnSample{lsn: flushed, at: at})
	for len(r.samples) > 0 && r.samples[0].lsn <= pos {
		r.replayedAt = r.samples[0].at
		r.samples = r.samples[1:]
	}
	if len(r.samples) == 0 {
		return 0, nil // everything the primary had flushed at this check is replayed
	}
	if len(r.samples) > 1000 { // a standby far behind: keep the oldest, which decides
		r.samples = append(r.samples[:1], r.samples[len(r.samples)-999:]...)
	}
	if r.replayedAt.IsZero() {
		// No remembered position replayed yet: behind by at least as long as
		// the oldest has been remembered, and at most a check more.
		return r.now().Sub(r.samples[0].at) + r.every, nil
	}
	return r.now().Sub(r.replayedAt), nil
}

// parseLSN reads a pg_lsn's text form, "16/B374D848".
func parseLSN(s string) (uint64, error) {
	hi, lo, ok := strings.Cut(s, "/")
	h, err1 := strconv.ParseUint(hi, 16, 32)
	l, err2 := strconv.ParseUint(lo, 16, 32)
	if !ok || err1 != nil || err2 != nil {
		return 0, fmt.Errorf("malformed WAL position %q", s)
	}
	return h<<32 | l, nil
}

// TemplateTenant reads tenant id as templates see it (.Tenant: its id, name
// and branding), for `notifyd preview -tenant`. An unknown tenant is an
// error naming it.
func TemplateTenant(ctx context.Context, pool *pgxpool.Pool, id string) (*notifytype.Tenant, error) {
	t, err := stores.GetTenant(ctx, pool, id)
	if errors.Is(err, stores.ErrNotFound) {
		return nil, fmt.Errorf("no tenant %q (PUT /v1/tenants/{id} creates it)", id)
	}
	if err != nil {
		return nil, err
	}
	return t.Template()
}
