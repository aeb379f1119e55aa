package stream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/internal/metrics"
	"github.com/notifyd/notifyd/internal/wire"
	"github.com/notifyd/notifyd/stores"
)

// Handler defaults.
const (
	// DefaultHeartbeat is how often an idle stream gets a ": ping" comment,
	// which keeps proxies from closing it and lets clients notice a dead one.
	DefaultHeartbeat = 15 * time.Second
	// DefaultBuffer is how many batches of events (one per read of the log)
	// a stream may have waiting in memory before the Hub drops it.
	DefaultBuffer = 64
	// DefaultWriteTimeout bounds every write to a client.
	DefaultWriteTimeout = 30 * time.Second
	// streamsRetryAfter is the Retry-After, in seconds, of a stream refused
	// for one too many: streams end when their page closes, not on a clock,
	// so it is only a pace for the client's retries.
	streamsRetryAfter = 5
	// replayPage is how many change-log rows a resuming stream reads at a
	// time: replay memory is bounded by one page, however long the gap.
	replayPage = 500
)

// HandlerOptions tune Handler. The zero value is the production setting.
type HandlerOptions struct {
	// Heartbeat is the interval of ": ping" comments. Zero means
	// DefaultHeartbeat.
	Heartbeat time.Duration
	// Buffer is how many batches of events a stream may have waiting before
	// the Hub drops it as too slow (its client reconnects with Last-Event-ID
	// and replays from the database). Zero means DefaultBuffer.
	Buffer int
	// WriteTimeout bounds each write to the client: a client that stops
	// reading is disconnected after it, instead of holding a goroutine and a
	// connection until TCP gives up. Zero means DefaultWriteTimeout.
	WriteTimeout time.Duration
	// MaxPerRecipient caps the streams one recipient holds open through
	// this handler (http.max_streams_per_recipient); one more is answered 429
	// rate_limited with Retry-After. Zero means unlimited.
	MaxPerRecipient int
	// Clock is the time a token's expiry is measured against. Nil means
	// time.Now.
	Clock func() time.Time
	// Metrics counts the streams refused by MaxPerRecipient. Nil counts
	// nothing.
	Metrics *metrics.Metrics
}

// Handler serves GET /v1/inbox/stream as Server-Sent Events for the
// recipient auth returns. Mount it on a method pattern
// ("GET /v1/inbox/stream", which HEAD matches too: a HEAD gets the headers of
// a stream and no body).
//
// auth runs before anything is written. Its error is answered with the API's
// JSON error shape: a *wire.Error as it says (httpapi.Server.RecipientClaims
// returns 401 ones), any other error as 401 unauthorized with its text as the
// message. A query string that does not parse is a 400 bad_request, and a
// recipient holding MaxPerRecipient streams already gets a 429 rate_limited.
//
// Every event's id is a cursor, "<epoch>.<seq>" (see cursor.go): the epoch
// of this database's change log (stores.ChangeLogEpoch) and a position in
// it. The client's cursor is the Last-Event-ID header, or the last_event_id
// query parameter for clients that cannot set headers (the header wins: it
// is what EventSource sends when it reconnects). The events:
//
//   - With no cursor: "counts" (id: the head), then live events.
//   - With a cursor of this log at n still in the log: every change after n,
//     in seq order, then "counts" (id: the last seq replayed, n if none),
//     then live events, with neither gap nor duplicate between the two.
//   - A cursor of this log is one of this database, on its primary or on a
//     standby promoted in its place (a failover keeps the epoch), or one the
//     previous release made for it (stores.ChangeLogEpochs).
//   - With a cursor of another log (another database, or this one before a
//     restore: another epoch), one that is not a cursor at all, or one at n
//     from before changes retention has deleted (stores.TrimmedThrough) or
//     beyond the newest change: "reset" (data {}, id: the head) — reload the
//     inbox, the log cannot say what was missed — then "counts", then live
//     events. Never a replay of another log's changes.
//   - A bare seq (the cursor before it named its database) is taken as a
//     position of this log, for one release: see handler.replay.
//   - inbox.created (data: the item, shape of GET /v1/inbox items),
//     inbox.updated (data: {"ids":[...], "read_at"|"seen_at"|"archived_at":
//     value}), inbox.deleted (data: {"ids":[...]}), each with id: its seq,
//     and after each batch of them "counts" (data: {"unread":n,"unseen":n},
//     id: the seq of the last change before it).
//   - ": ping" comments every Heartbeat.
//
// Every event that ends a batch is flushed at once. The stream ends when the
// client goes away, when the Hub stops (server shutdown), or when the Hub
// drops the client for being too slow; in every case the client reconnects
// with its Last-Event-ID and loses nothing. It also ends when its token
// expires (the claims' ExpiresAt, by Clock): the last event is "reauth"
// (data {}, no id), and the client reconnects with a fresh token and its
// Last-Event-ID (an EventSource reconnecting by itself would present the
// expired token and get a 401). The same happens, within the Hub's revocation
// check (every 5 s), when the recipient's tokens_valid_after moves past the
// token's iat while the stream is open.
func Handler(h *Hub, auth func(*http.Request) (notifyd.RecipientClaims, error), opts HandlerOptions) http.Handler {
	if opts.Heartbeat <= 0 {
		opts.Heartbeat = DefaultHeartbeat
	}
	if opts.Buffer <= 0 {
		opts.Buffer = DefaultBuffer
	}
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = DefaultWriteTimeout
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	return &handler{hub: h, auth: auth, opts: opts, open: map[string]int{}}
}

type handler struct {
	hub  *Hub
	auth func(*http.Request) (notifyd.RecipientClaims, error)
	opts HandlerOptions

	mu   sync.Mutex
	open map[string]int // streams open per recipient
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Parsed strictly: r.URL.Query() drops a pair it cannot decode, and a
	// last_event_id lost that way would restart the stream without a word.
	query, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		wire.WriteError(w, r, &wire.Error{Status: http.StatusBadRequest, Code: wire.CodeBadRequest,
			Message: "malformed query string: " + err.Error()})
		return
	}
	claims, err := h.auth(r)
	if err != nil {
		var apiErr *wire.Error
		if !errors.As(err, &apiErr) {
			err = &wire.Error{Status: http.StatusUnauthorized, Code: wire.CodeUnauthorized, Message: err.Error()}
		}
		wire.WriteError(w, r, err)
		return
	}
	recipient := claims.Recipient
	// A token's tenant claim confines the stream; ?tenant= does for a token
	// without one.
	tenant := claims.Tenant
	if asked, ok := query["tenant"]; ok {
		t := ""
		if len(asked) > 0 {
			t = asked[0]
		}
		if err := notifyd.CheckTenantID("tenant", t); err != nil {
			wire.WriteError(w, r, &wire.Error{Status: http.StatusBadRequest, Code: wire.CodeBadRequest,
				Message: err.Error(), Details: []any{wire.FieldDetail{Field: "tenant", Message: err.(*notifyd.InputError).Message}}})
			return
		}
		if tenant != "" && t != tenant {
			wire.WriteError(w, r, &wire.Error{Status: http.StatusForbidden, Code: wire.CodeForbidden,
				Message: "this token reaches only tenant " + strconv.Quote(tenant)})
			return
		}
		tenant = t
	}
	lastID, resume := lastEventID(r, query)
	s := &sse{w: w, rc: http.NewResponseController(w), timeout: h.opts.WriteTimeout, recipient: recipient,
		tenant: tenant, pool: h.hub.pool}
	if r.Method == http.MethodHead {
		s.start() // the headers a GET would get, and no stream to keep open
		return
	}
	if !h.acquire(recipient) {
		h.opts.Metrics.Limited(metrics.LimitStreams)
		w.Header().Set("Retry-After", strconv.Itoa(streamsRetryAfter))
		n := strconv.Itoa(h.opts.MaxPerRecipient)
		wire.WriteError(w, r, &wire.Error{Status: http.StatusTooManyRequests, Code: wire.CodeRateLimited,
			Message: "too many open streams: http.max_streams_per_recipient is " + n + "; close one, or retry after " +
				strconv.Itoa(streamsRetryAfter) + " s",
			Details: []any{wire.FieldDetail{Field: "http.max_streams_per_recipient", Message: "at most " + n + " open streams"}}})
		return
	}
	defer h.release(recipient)
	ctx := r.Context()
	// Subscribe before reading the database: whatever commits from now on
	// reaches the subscription, and whatever committed before is in the
	// database reads below. The overlap is dropped by seq.
	sub, err := h.hub.subscribe(ctx, recipient, claims.IssuedAt, h.opts.Buffer)
	if err != nil {
		if ctx.Err() == nil {
			wire.WriteError(w, r, &wire.Error{Status: http.StatusServiceUnavailable, Code: wire.CodeNotReady,
				Message: "the stream is shutting down; reconnect", Err: err})
		}
		return
	}
	defer sub.close()
	defer s.rc.SetWriteDeadline(time.Time{}) // the connection may serve another request
	// The epoch is read after subscribing: a Hub that finds the database
	// changed under it from now on drops the subscription (Hub.checkEpoch),
	// so a stream never carries on with an epoch that is no longer the
	// database's.
	epoch, previous, err := stores.ChangeLogEpochs(ctx, h.hub.pool)
	if err != nil {
		h.fail(w, r, s, recipient, err)
		return
	}
	s.epoch = epoch
	var last int64
	switch c, ok := parseCursor(lastID); {
	case !resume:
		last, err = h.fresh(ctx, s, recipient)
	case !ok:
		last, err = h.reset(ctx, s, recipient, "not a cursor this stream sent")
	case c.epoch != "" && c.epoch != epoch && c.epoch != previous:
		last, err = h.reset(ctx, s, recipient, "a cursor of another database, or of this one before a restore")
	default:
		last, err = h.replay(ctx, s, recipient, c.seq)
	}
	if err != nil {
		h.fail(w, r, s, recipient, err)
		return
	}
	h.live(ctx, s, sub, last, claims.ExpiresAt)
}

// acquire counts one more open stream of recipient, unless it holds
// MaxPerRecipient already.
func (h *handler) acquire(recipient string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if max := h.opts.MaxPerRecipient; max > 0 && h.open[recipient] >= max {
		return false
	}
	h.open[recipient]++
	return true
}

func (h *handler) release(recipient string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.open[recipient]--; h.open[recipient] <= 0 {
		delete(h.open, recipient) // the map holds only recipients with streams
	}
}

// fresh starts a stream without a position at the head of the log and
// returns the position.
func (h *handler) fresh(ctx context.Context, s *sse, recipient string) (int64, error) {
	return h.atHead(ctx, s, recipient, false)
}

// atHead moves the stream to the head of the log: with reset, an event tells
// the client to reload first; then the counts as of the head.
func (h *handler) atHead(ctx context.Context, s *sse, recipient string, reset bool) (int64, error) {
	head, err := stores.MaxChangeSeq(ctx, h.hub.pool)
	if err != nil {
		return 0, err
	}
	counts, err := s.countsNow(ctx)
	if err != nil {
		return 0, err
	}
	s.start()
	if reset {
		s.event(head, "reset", []byte("{}"))
	}
	s.counts(head, counts)
	return head, s.flush()
}

// replay sends every change of recipient after pos, page by page, then the
// counts, and returns the position reached. When the log no longer reaches
// back to pos it resets instead.
//
// pos is a position of this log: the cursor named this database, or was a
// bare seq, which clients connected from before cursors named their database
// still send. Such a seq cannot be told from one of another database, so it
// is taken to be this one's (what every seq meant before), with the check
// below against positions this log never handed out. Every event carries a
// full cursor, so a client stops sending a bare seq with the first event it
// gets after the upgrade. The release after this one drops it (a reset).
func (h *handler) replay(ctx context.Context, s *sse, recipient string, pos int64) (int64, error) {
	newest, err := stores.NewestChangeSeq(ctx, h.hub.pool)
	if err != nil {
		return 0, err
	}
	trimmed, err := stores.TrimmedThrough(ctx, h.hub.pool)
	if err != nil {
		return 0, err
	}
	if pos > max(newest, trimmed) {
		// A position this log never handed out: only a reset can bring the
		// client back in line.
		return h.reset(ctx, s, recipient, "a position beyond the newest change")
	}
	for cursor := pos; ; {
		page, err := stores.ChangesAfter(ctx, h.hub.pool, recipient, cursor, replayPage)
		if err != nil {
			return 0, err
		}
		// Checked after the read: if nothing after cursor had been trimmed
		// by now, nothing was when the page was read (retention records how
		// far it trimmed in the statement that trims), so the page is
		// complete.
		trimmed, err := stores.TrimmedThrough(ctx, h.hub.pool)
		if err != nil {
			return 0, err
		}
		if cursor < trimmed {
			return h.reset(ctx, s, recipient, "a position retention has deleted changes after")
		}
		s.start()
		changes, err := s.confine(ctx, page.Changes)
		if err != nil {
			return 0, err
		}
		for _, c := range changes {
			s.change(c)
		}
		cursor = page.Last
		if !page.More {
			counts, err := s.countsNow(ctx)
			if err != nil {
				return 0, err
			}
			s.counts(cursor, counts)
			return cursor, s.flush()
		}
		if err := s.flush(); err != nil {
			return 0, err
		}
	}
}

// reset tells the client to reload and continues from the head of the log;
// why is logged (at debug level: a reset is routine after a restore).
func (h *handler) reset(ctx context.Context, s *sse, recipient, why string) (int64, error) {
	h.hub.logger.DebugContext(ctx, "stream: reset", "recipient", recipient, "reason", why)
	return h.atHead(ctx, s, recipient, true)
}

// live forwards the Hub's batches newer than last until the stream ends. At
// expires (when not zero), or when the Hub finds the token revoked, it sends
// "reauth" and ends it.
func (h *handler) live(ctx context.Context, s *sse, sub *subscription, last int64, expires time.Time) {
	heartbeat := time.NewTicker(h.opts.Heartbeat)
	defer heartbeat.Stop()
	var expired <-chan time.Time
	if !expires.IsZero() {
		t := time.NewTimer(expires.Sub(h.opts.Clock()))
		defer t.Stop()
		expired = t.C
	}
	for {
		select {
		case <-expired:
			reauth(s)
			return
		case <-sub.revoked:
			// Revoked since it opened: the client reconnects with a fresh
			// token (the revoked one would get a 401) and its Last-Event-ID.
			reauth(s)
			return
		case <-ctx.Done():
			return
		case <-h.hub.done:
			return
		case <-sub.dropped:
			return
		case b := <-sub.c:
			sent := false
			changes, err := s.confine(ctx, b.changes)
			if err != nil {
				h.hub.logger.WarnContext(ctx, "stream: ending a stream", "recipient", s.recipient, "err", err)
				return
			}
			for _, c := range changes {
				if c.Seq <= last {
					continue // replayed or older than the start already
				}
				s.change(c)
				last, sent = c.Seq, true
			}
			if !sent {
				continue
			}
			if s.tenant != "" {
				// The Hub's counts are the recipient's, over every tenant.
				if b.counts, err = s.countsNow(ctx); err != nil {
					return
				}
			}
			s.counts(last, b.counts)
			if err := s.flush(); err != nil {
				return
			}
		case <-heartbeat.C:
			s.buf.WriteString(": ping\n\n")
			if err := s.flush(); err != nil {
				return
			}
		}
	}
}

// reauth writes the event that ends a stream whose token is no longer good.
// No id: the client's position stays that of the last change.
func reauth(s *sse) {
	s.buf.WriteString("event: reauth\ndata: {}\n\n")
	_ = s.flush()
}

// fail ends a stream on a database error: as a JSON error when nothing was
// written yet, otherwise by closing it (the client reconnects and resumes).
func (h *handler) fail(w http.ResponseWriter, r *http.Request, s *sse, recipient string, err error) {
	if r.Context().Err() != nil {
		return
	}
	if !s.started {
		wire.WriteError(w, r, err)
		return
	}
	h.hub.logger.WarnContext(r.Context(), "stream: ending a stream", "recipient", recipient, "err", err)
}

// lastEventID reads the client's cursor: the Last-Event-ID header, then the
// last_event_id query parameter. resume is false when there is none. It is
// not parsed here: a cursor that is not one gets a reset, not an error (an
// EventSource gives up on an error response, and would never get back in
// line).
func lastEventID(r *http.Request, query url.Values) (id string, resume bool) {
	id = r.Header.Get("Last-Event-ID")
	if id == "" {
		id = query.Get("last_event_id")
	}
	return id, id != ""
}

// sse writes one stream. Events are gathered in buf and written and flushed
// together, so a batch costs one write and no event waits in a buffer.
type sse struct {
	recipient string
	// tenant confines the stream to one tenant's items (the token's tenant
	// claim); "" for every item.
	tenant  string
	pool    stores.DB
	epoch   string // of the log the event ids are positions in
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	buf     bytes.Buffer
	started bool
}

// start sends the response header, once, just before the first event.
func (s *sse) start() {
	if s.started {
		return
	}
	s.started = true
	h := s.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	h.Set("X-Content-Type-Options", "nosniff")
	s.w.WriteHeader(http.StatusOK)
}

func (s *sse) event(seq int64, name string, data []byte) {
	s.buf.WriteString("id: ")
	s.buf.Write(appendCursor(s.buf.AvailableBuffer(), s.epoch, seq))
	s.buf.WriteString("\nevent: ")
	s.buf.WriteString(name)
	s.buf.WriteString("\ndata: ")
	s.buf.Write(data) // JSON from encoding/json: never a raw newline
	s.buf.WriteString("\n\n")
}

func (s *sse) counts(id int64, c stores.InboxCounts) {
	data, _ := json.Marshal(wire.CountsOf(c)) // ints and booleans: cannot fail
	s.event(id, "counts", data)
}

// change writes c as its event. A kind this version does not know is left
// out; its seq still moves the position on.
func (s *sse) change(c stores.Change) {
	ids := c.ItemIDs
	if ids == nil {
		ids = []string{}
	}
	var (
		name string
		data []byte
		err  error
	)
	switch c.Kind {
	case stores.ChangeCreated:
		name = "inbox.created"
		if c.Item == nil {
			return
		}
		data, err = json.Marshal(wire.InboxItemOf(*c.Item))
	case stores.ChangeUpdated:
		name = "inbox.updated"
		// The row's data says what changed ({"read_at": ...}); the ids join it.
		fields := map[string]json.RawMessage{}
		if len(c.Data) > 0 {
			_ = json.Unmarshal(c.Data, &fields) // a non-object is ignored: ids alone
		}
		fields["ids"], _ = json.Marshal(ids)
		data, err = json.Marshal(fields)
	case stores.ChangeDeleted:
		name = "inbox.deleted"
		data, err = json.Marshal(struct {
			IDs []string `json:"ids"`
		}{ids})
	default:
		return
	}
	if err != nil {
		return // only an item whose params are not JSON, which jsonb rules out
	}
	s.event(c.Seq, name, data)
}

// countsNow reads the stream's badge counts: its tenant's, when confined.
func (s *sse) countsNow(ctx context.Context) (stores.InboxCounts, error) {
	return stores.CountTenantInbox(ctx, s.pool, s.recipient, s.tenant, stores.DefaultInboxCountsMax)
}

// confine keeps, of changes, what a stream confined to a tenant may show:
// created items of that tenant, updates naming only its items (one read for
// them all), and deletions its writer marked as of that tenant ({"tenant"}
// in their data: a cancelled notification of the tenant, the tenant's
// erasure). A deletion of items of no tenant, or of several (retention, a
// recipient's erasure), is not forwarded: its ids would tell of items
// outside the tenant. A stream not confined keeps every change.
func (s *sse) confine(ctx context.Context, changes []stores.Change) ([]stores.Change, error) {
	if s.tenant == "" {
		return changes, nil
	}
	var updated []string
	for _, c := range changes {
		if c.Kind == stores.ChangeUpdated {
			updated = append(updated, c.ItemIDs...)
		}
	}
	mine := map[string]bool{}
	if len(updated) > 0 {
		ids, err := stores.TenantItems(ctx, s.pool, s.recipient, s.tenant, updated)
		if err != nil {
			return nil, err
		}
		for _, id := range ids {
			mine[id] = true
		}
	}
	out := make([]stores.Change, 0, len(changes))
	for _, c := range changes {
		switch c.Kind {
		case stores.ChangeCreated:
			if c.Item == nil || c.Item.Tenant != s.tenant {
				continue
			}
		case stores.ChangeDeleted:
			if deletedTenant(c.Data) != s.tenant {
				continue
			}
		case stores.ChangeUpdated:
			var ids []string
			for _, id := range c.ItemIDs {
				if mine[id] {
					ids = append(ids, id)
				}
			}
			if len(ids) == 0 {
				continue
			}
			c.ItemIDs = ids
		}
		out = append(out, c)
	}
	return out, nil
}

// deletedTenant is the tenant a deleted change's data names, "" for none.
func deletedTenant(data json.RawMessage) string {
	var d struct {
		Tenant string `json:"tenant"`
	}
	if len(data) > 0 {
		_ = json.Unmarshal(data, &d) // anything else names no tenant
	}
	return d.Tenant
}

// flush writes what buf holds and pushes it to the client.
func (s *sse) flush() error {
	if err := s.rc.SetWriteDeadline(time.Now().Add(s.timeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	if s.buf.Len() > 0 {
		_, err := s.w.Write(s.buf.Bytes())
		s.buf.Reset()
		if err != nil {
			return err
		}
	}
	if err := s.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	return nil
}
