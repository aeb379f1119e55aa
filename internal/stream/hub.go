// Package stream is the realtime inbox stream (GET /v1/inbox/stream):
// a Hub per process that turns change-log commits into in-memory events for
// the connected clients, and the Server-Sent Events handler those clients
// talk to.
//
// The change log (notify_inbox_changes, see stores.ChangesAfter) is the
// truth. Its writers take no lock, and inbox marks and cancels send no
// notification in their transactions (either would serialise every inbox
// write of every replica), so the Hub of every replica polls the head of the
// log, two small statements every livePoll while it has clients, and reads
// what is new for its clients in one query when the head moved. A
// notification on stores.InboxChangesChannel (a fan-out chunk's commit, or
// stores.WakeInboxStreams after any commit) makes it look at once; a missed
// one costs latency, never an event. What a reader may pass is bounded by
// the log's watermark (stores.MaxChangeSeq): a change committed behind an
// older transaction still running waits for it, and the Hub looks every
// heldPoll meanwhile.
//
// Positions in the log are only numbers, and another database reaches the
// same ones: every event id, and so every cursor a client sends back, names
// the log's epoch too (stores.ChangeLogEpoch, cursor.go). A cursor of another
// epoch gets a reset, and a Hub that finds the epoch changed under it (the
// database was restored, or the daemon's address now leads to another one)
// drops every stream, whose clients then reconnect and reset. A failover to
// a promoted standby keeps the epoch (it is the same log) and the streams.
package stream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notifyd/notifyd/stores"
)

const (
	// livePoll is how often a Hub with clients looks at the head of the log:
	// the bound on how late a change reaches a stream when nobody wakes the
	// Hub (what a change waits for on top of that is the watermark: see
	// stores.MaxChangeSeq).
	livePoll = 10 * time.Millisecond
	// heldPoll is how often it looks while committed changes wait behind an
	// older transaction (stores.ChangeHead), for up to heldFast of waiting:
	// they are due the moment it ends. A wait longer than heldWarn is
	// logged, once: a long transaction is holding every stream back.
	heldPoll = 2 * time.Millisecond
	heldFast = time.Second
	heldWarn = 10 * time.Second
	// idlePoll is how often a Hub without clients moves its head on, so a
	// new subscription starts close to it.
	idlePoll = 2 * time.Second
	// revokeCheck is how often a Hub with clients asks whether any of their
	// tokens was revoked (tokens_valid_after moved past its iat): the bound
	// on how long a stream runs on a revoked token. One statement per check,
	// a primary-key probe per connected recipient.
	revokeCheck = 5 * time.Second
	// listenCheck is how long the listener waits for a notification before
	// it pings its connection, so a dead TCP connection is noticed.
	listenCheck = 30 * time.Second
	// pingTimeout bounds that ping.
	pingTimeout = 5 * time.Second
	// hubPage bounds one read of the log (rows), and so the memory of one
	// fan-out step.
	hubPage = 1000
	// Backoff between failed attempts to connect the listener or to read.
	minBackoff = 100 * time.Millisecond
	maxBackoff = 10 * time.Second
)

// ErrHubStopped is returned to a stream that asks a Hub whose Run has
// returned to subscribe.
var ErrHubStopped = errors.New("stream hub stopped")

// Hub fans the inbox change log out to connected stream clients. It holds one
// dedicated LISTEN connection (taken from the pool and kept out of it) and
// does at most one read of the log at a time: wakes that arrive during a read
// are coalesced into one more read after it.
//
// Create it with NewHub and start Run before serving streams; handlers wait
// for Run to have read the head of the log before they start.
type Hub struct {
	pool   *pgxpool.Pool
	logger *slog.Logger

	wake  chan struct{} // capacity 1: a pending wake, coalesced
	ready chan struct{} // closed once Run has read the head of the log
	done  chan struct{} // closed when Run returns

	// recheck asks Run to read the epoch again before its next read: the
	// listener lost its connection or made a new one, or a read failed, so
	// the database may be another one.
	recheck atomic.Bool
	// epoch is that of the log the positions below are in; only Run's
	// goroutine reads and writes it.
	epoch string
	// revokeEvery is how often revocations are checked (revokeCheck; tests
	// shorten it before Run).
	revokeEvery time.Duration

	mu      sync.Mutex
	subs    map[string]map[*subscription]struct{} // by recipient
	clients int
	// last is the newest seq the Hub knows to be committed: a subscription
	// that starts now needs nothing at or below it from the Hub (its handler
	// reads the database after subscribing and sees all of it).
	last    int64
	started bool
	stopped bool
}

// NewHub returns a Hub that reads pool and logs to logger (nil discards). It
// does nothing until Run.
func NewHub(pool *pgxpool.Pool, logger *slog.Logger) *Hub {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Hub{
		pool:   pool,
		logger: logger,
		wake:   make(chan struct{}, 1),
		ready:  make(chan struct{}),
		done:   make(chan struct{}),
		subs:   map[string]map[*subscription]struct{}{},

		revokeEvery: revokeCheck,
	}
}

// Clients returns the number of connected stream clients (for a gauge).
func (h *Hub) Clients() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.clients
}

// Run listens and fans out until ctx is done, then closes every stream and
// returns nil. Database failures are logged and retried with backoff (the
// listener reconnects; a failed read is read again), so the only error is a
// second call. Streams served before Run has started wait for it; streams
// served after it returned get 503.
func (h *Hub) Run(ctx context.Context) error {
	h.mu.Lock()
	if h.started {
		h.mu.Unlock()
		return errors.New("stream hub: Run called twice")
	}
	h.started = true
	h.mu.Unlock()
	defer h.stop()

	// The epoch and the head first: subscriptions start from the head.
	for backoff := minBackoff; ; backoff = nextBackoff(backoff) {
		epoch, err := stores.ChangeLogEpoch(ctx, h.pool)
		var head int64
		if err == nil {
			head, err = stores.MaxChangeSeq(ctx, h.pool)
		}
		if err == nil {
			h.epoch = epoch
			h.mu.Lock()
			h.last = head
			h.mu.Unlock()
			break
		}
		if ctx.Err() != nil {
			return nil
		}
		h.logger.WarnContext(ctx, "stream hub: cannot read the change log; retrying", "err", err, "retry_in", backoff)
		if !sleep(ctx, backoff) {
			return nil
		}
	}
	close(h.ready)

	var wg sync.WaitGroup
	wg.Go(func() { h.listen(ctx) })
	wg.Go(func() { h.watchRevocations(ctx) })
	defer wg.Wait()

	poll := time.NewTimer(livePoll)
	defer poll.Stop()
	var retry <-chan time.Time
	backoff := minBackoff
	lastRead := time.Now()
	var heldSince time.Time // zero: nothing held back at the last read
	warned := false
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-h.wake:
		case <-poll.C:
			if h.Clients() == 0 && time.Since(lastRead) < idlePoll {
				poll.Reset(livePoll)
				continue
			}
		case <-retry:
		}
		retry = nil
		lastRead = time.Now()
		held, err := h.read(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			// Nothing is lost: the subscriptions keep their positions and
			// the next read starts from them. A read that failed may have
			// lost the database: the epoch is read again first.
			h.recheck.Store(true)
			h.logger.WarnContext(ctx, "stream hub: cannot read the change log; retrying", "err", err, "retry_in", backoff)
			retry = time.After(backoff)
			backoff = nextBackoff(backoff)
			continue
		}
		backoff = minBackoff
		next := livePoll
		switch {
		case !held:
			heldSince, warned = time.Time{}, false
		case heldSince.IsZero():
			heldSince, next = lastRead, heldPoll
		case lastRead.Sub(heldSince) < heldFast:
			next = heldPoll
		case lastRead.Sub(heldSince) > heldWarn && !warned:
			warned = true
			h.logger.WarnContext(ctx, "stream hub: committed inbox changes wait for an older transaction of the database still running; streams are held back until it ends",
				"waiting", lastRead.Sub(heldSince).Round(time.Second))
		}
		poll.Reset(next)
	}
}

// read checks the epoch first when recheck is set (the listener lost or made
// its connection, or the last read failed), then fans out.
func (h *Hub) read(ctx context.Context) (held bool, err error) {
	if h.recheck.Swap(false) {
		if err := h.checkEpoch(ctx); err != nil {
			h.recheck.Store(true) // again before the next read
			return false, err
		}
	}
	return h.fanOut(ctx)
}

// checkEpoch reads the epoch of the database the pool now reaches. When it
// is another than the one the Hub's positions are in, those positions mean
// nothing there (the database was restored, or replaced by another one under
// the same address): the Hub starts again from the new head, and drops every
// subscription, whose streams carry ids of the old epoch. Their clients
// reconnect with those ids and get a reset. A subscription made after this
// starts from the new head; one made before it whose handler already read the
// new epoch is dropped too, and its client resumes with a cursor of the new
// epoch. The same epoch is the same log, on the same server or on a standby
// promoted in its place (a failover keeps the epoch: stores.ChangeLogEpoch),
// and the streams go on.
func (h *Hub) checkEpoch(ctx context.Context) error {
	epoch, err := stores.ChangeLogEpoch(ctx, h.pool)
	if err != nil || epoch == h.epoch {
		return err
	}
	head, err := stores.MaxChangeSeq(ctx, h.pool)
	if err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.logger.WarnContext(ctx, "stream hub: the database is not the one the streams were reading (restored, or another one); closing every stream, whose clients will reset",
		"epoch", epoch, "was", h.epoch, "streams", h.clients)
	h.epoch = epoch
	h.last = head
	for _, subs := range h.subs {
		for s := range subs {
			h.removeLocked(s)
			close(s.dropped)
		}
	}
	return nil
}

// watchRevocations ends, every revokeEvery, the streams whose token was
// revoked after they opened: a recipient's tokens_valid_after moved past the
// token's iat (PUT /v1/recipients/{id}, on any replica). Each gets revoked
// closed (its handler sends "reauth" and ends it, as at expiry); the
// recipient's other streams, on tokens issued later, run on. A failed check
// is logged and made again at the next tick.
func (h *Hub) watchRevocations(ctx context.Context) {
	t := time.NewTicker(h.revokeEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		h.mu.Lock()
		oldest := make(map[string]time.Time, len(h.subs))
		for r, subs := range h.subs {
			for s := range subs {
				if o, ok := oldest[r]; !ok || s.issuedAt.Before(o) {
					oldest[r] = s.issuedAt
				}
			}
		}
		h.mu.Unlock()
		if len(oldest) == 0 {
			continue
		}
		revoked, err := stores.RevokedSince(ctx, h.pool, oldest)
		if err != nil {
			if ctx.Err() == nil {
				h.logger.WarnContext(ctx, "stream hub: cannot check for revoked tokens; checking again later", "err", err)
			}
			continue
		}
		h.mu.Lock()
		for r, after := range revoked {
			for s := range h.subs[r] {
				if s.issuedAt.Before(after) {
					h.logger.InfoContext(ctx, "stream token revoked; closing its stream", "recipient", r,
						"tokens_valid_after", after)
					h.removeLocked(s)
					close(s.revoked)
				}
			}
		}
		h.mu.Unlock()
	}
}

// signal asks for one more read of the log. It never blocks: a wake already
// pending covers this one.
func (h *Hub) signal() {
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// listen keeps a LISTEN connection open and turns its notifications into
// wakes, reconnecting with backoff when it fails. Every (re)connection is a
// wake too: what committed while nobody listened is read at once.
func (h *Hub) listen(ctx context.Context) {
	backoff := minBackoff
	for ctx.Err() == nil {
		conn, err := h.connect(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			h.logger.WarnContext(ctx, "stream hub: cannot LISTEN; retrying", "err", err, "retry_in", backoff)
			if !sleep(ctx, backoff) {
				return
			}
			backoff = nextBackoff(backoff)
			continue
		}
		backoff = minBackoff
		h.recheck.Store(true)
		h.signal()
		err = h.wait(ctx, conn)
		// The connection is gone, and with it perhaps the database: the
		// next read waits for the epoch to be read again, so nothing of
		// another database reaches a stream meanwhile.
		h.recheck.Store(true)
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pingTimeout)
		_ = conn.Close(closeCtx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		h.logger.WarnContext(ctx, "stream hub: LISTEN connection lost; reconnecting", "err", err)
	}
}

// connect takes a connection out of the pool for good (it would be useless
// to anyone else while it waits for notifications) and listens on it.
func (h *Hub) connect(ctx context.Context) (*pgx.Conn, error) {
	pc, err := h.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	conn := pc.Hijack()
	if err := stores.ListenInboxChanges(ctx, conn); err != nil {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pingTimeout)
		_ = conn.Close(closeCtx)
		cancel()
		return nil, err
	}
	return conn, nil
}

// wait turns notifications into wakes until the connection fails or ctx is
// done. A quiet connection is pinged every listenCheck.
func (h *Hub) wait(ctx context.Context, conn *pgx.Conn) error {
	for {
		waitCtx, cancel := context.WithTimeout(ctx, listenCheck)
		_, err := conn.WaitForNotification(waitCtx)
		cancel()
		switch {
		case err == nil:
			h.signal()
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, context.DeadlineExceeded) && !conn.IsClosed():
			pingCtx, cancel := context.WithTimeout(ctx, pingTimeout)
			err = conn.Ping(pingCtx)
			cancel()
			if err != nil {
				return fmt.Errorf("ping: %w", err)
			}
		default:
			return err
		}
	}
}

// fanOut reads what is new for the connected recipients and hands it to
// their subscriptions, page by page.
//
// Positions are kept per subscription (sub.from: everything of its recipient
// up to from has been handed to it, or is older than the subscription), and
// a read starts at the smallest; when the head has not moved past it there is
// nothing to read. A read covers the recipients connected when it began; a
// subscription that arrives during a read keeps its position and is served by
// the next read. A subscription whose recipient was covered moves to the end
// of what was read: a page that is not full has seen every row of those
// recipients up to the head read before it, since the head is below the
// watermark (stores.MaxChangeSeq) and nothing can be added below that.
//
// It reports whether committed changes wait behind an older transaction
// (they are due when it ends: look again soon).
func (h *Hub) fanOut(ctx context.Context) (held bool, err error) {
	ch, err := stores.ReadChangeHead(ctx, h.pool)
	if err != nil {
		return false, err
	}
	head, held := ch.Seq, ch.Newest > ch.Seq
	h.mu.Lock()
	recipients := make([]string, 0, len(h.subs))
	after := int64(-1)
	for r, subs := range h.subs {
		recipients = append(recipients, r)
		for s := range subs {
			if after < 0 || s.from < after {
				after = s.from
			}
		}
	}
	if len(recipients) == 0 || after >= head {
		h.last = max(h.last, head)
		h.mu.Unlock()
		return held, nil
	}
	h.mu.Unlock()
	slices.Sort(recipients)

	for {
		page, err := stores.ChangesAfterFor(ctx, h.pool, recipients, after, hubPage)
		if err != nil {
			return false, err
		}
		byRecipient := map[string][]stores.Change{}
		for _, c := range page.Changes {
			byRecipient[c.Recipient] = append(byRecipient[c.Recipient], c)
		}
		var counts map[string]stores.InboxCounts
		if len(byRecipient) > 0 {
			changed := make([]string, 0, len(byRecipient))
			for r := range byRecipient {
				changed = append(changed, r)
			}
			// Read after the changes, so the counts include them.
			if counts, err = stores.CountInboxes(ctx, h.pool, changed); err != nil {
				return false, err
			}
		}
		reached := page.Last
		if !page.More {
			reached = max(reached, head)
		}
		h.deliver(recipients, byRecipient, counts, reached)
		if !page.More {
			return held, nil
		}
		after = page.Last
	}
}

// deliver hands each subscription of the covered recipients the changes it
// has not had, with its recipient's counts, and moves it to reached. A
// subscription whose buffer is full is dropped: its client reconnects and
// replays from the database, and nobody else waits for it.
func (h *Hub) deliver(recipients []string, byRecipient map[string][]stores.Change, counts map[string]stores.InboxCounts, reached int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range recipients {
		changes := byRecipient[r]
		for s := range h.subs[r] {
			// changes are in seq order: skip what s already had.
			i, _ := slices.BinarySearchFunc(changes, s.from, func(c stores.Change, from int64) int {
				if c.Seq <= from {
					return -1
				}
				return 1
			})
			if news := changes[i:]; len(news) > 0 {
				select {
				case s.c <- batch{changes: news, counts: counts[r]}:
				default:
					h.logger.Info("stream client too slow; closing its stream", "recipient", r, "buffer", cap(s.c))
					h.removeLocked(s)
					close(s.dropped)
					continue
				}
			}
			s.from = max(s.from, reached)
		}
	}
	h.last = max(h.last, reached)
}

// batch is what one read of the log has for one subscription: its new
// changes in seq order (never empty) and its recipient's counts after them.
type batch struct {
	changes []stores.Change
	counts  stores.InboxCounts
}

// subscription is one connected stream.
type subscription struct {
	hub       *Hub
	recipient string
	c         chan batch
	// dropped is closed when the Hub drops the subscription for being slow.
	dropped chan struct{}
	// issuedAt is the iat of the stream's token; revoked is closed when the
	// recipient's tokens_valid_after moves past it (watchRevocations).
	issuedAt time.Time
	revoked  chan struct{}
	from     int64 // guarded by hub.mu
	removed  bool  // guarded by hub.mu
}

// subscribe registers a stream of recipient, on a token issued at issuedAt,
// with room for buffer pending batches. It waits until Run has read the head
// of the log (or ctx ends, or the Hub stops). From then on, every change of
// recipient that commits is handed to the subscription; changes committed
// before subscribe returned may be handed to it too, and the caller reads the
// database for those.
func (h *Hub) subscribe(ctx context.Context, recipient string, issuedAt time.Time, buffer int) (*subscription, error) {
	select {
	case <-h.ready:
	case <-h.done:
		return nil, ErrHubStopped
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped {
		return nil, ErrHubStopped
	}
	s := &subscription{hub: h, recipient: recipient, c: make(chan batch, buffer), dropped: make(chan struct{}),
		issuedAt: issuedAt, revoked: make(chan struct{}), from: h.last}
	if h.subs[recipient] == nil {
		h.subs[recipient] = map[*subscription]struct{}{}
	}
	h.subs[recipient][s] = struct{}{}
	h.clients++
	return s, nil
}

// close unregisters s; it is safe to call more than once and after a drop.
func (s *subscription) close() {
	s.hub.mu.Lock()
	defer s.hub.mu.Unlock()
	s.hub.removeLocked(s)
}

func (h *Hub) removeLocked(s *subscription) {
	if s.removed {
		return
	}
	s.removed = true
	h.clients--
	delete(h.subs[s.recipient], s)
	if len(h.subs[s.recipient]) == 0 {
		delete(h.subs, s.recipient)
	}
}

// stop marks the Hub stopped and tells every stream (they watch done).
func (h *Hub) stop() {
	h.mu.Lock()
	h.stopped = true
	h.mu.Unlock()
	close(h.done)
}

func nextBackoff(d time.Duration) time.Duration {
	return min(2*d, maxBackoff)
}

// sleep waits d or until ctx is done; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
