package stream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/notifyd/notifyd/internal/httpapi"
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
}

// Handler serves GET /v1/inbox/stream as Server-Sent Events for the
// recipient auth returns. Mount it on a method pattern
// ("GET /v1/inbox/stream", which HEAD matches too: a HEAD gets the headers of
// a stream and no body).
//
// auth runs before anything is written. Its error is answered with the API's
// JSON error shape: an *httpapi.Error as it says (httpapi.Server.Recipient
// returns 401 ones), any other error as 401 unauthorized with its text as the
// message.
//
// The client's position is the Last-Event-ID header, or the last_event_id
// query parameter for clients that cannot set headers (the header wins: it
// is what EventSource sends when it reconnects). A position that is not a
// non-negative integer is a 400. The events:
//
//   - With no position: "counts" (id: the newest seq), then live events.
//   - With position n still in the log: every change after n, in seq order,
//     then "counts" (id: the last seq replayed, n if none), then live
//     events, with neither gap nor duplicate between the two.
//   - With position n from before changes retention has deleted
//     (stores.TrimmedThrough), or beyond the head of the log (another
//     database):
//     "reset" (data {}, id: the newest seq) — reload the inbox, the log
//     cannot say what was missed — then "counts", then live events.
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
// with its Last-Event-ID and loses nothing.
func Handler(h *Hub, auth func(*http.Request) (recipient string, err error), opts HandlerOptions) http.Handler {
	if opts.Heartbeat <= 0 {
		opts.Heartbeat = DefaultHeartbeat
	}
	if opts.Buffer <= 0 {
		opts.Buffer = DefaultBuffer
	}
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = DefaultWriteTimeout
	}
	return &handler{hub: h, auth: auth, opts: opts}
}

type handler struct {
	hub  *Hub
	auth func(*http.Request) (string, error)
	opts HandlerOptions
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	recipient, err := h.auth(r)
	if err != nil {
		var apiErr *httpapi.Error
		if !errors.As(err, &apiErr) {
			err = &httpapi.Error{Status: http.StatusUnauthorized, Code: httpapi.CodeUnauthorized, Message: err.Error()}
		}
		httpapi.WriteError(w, r, err)
		return
	}
	pos, resume, err := position(r)
	if err != nil {
		httpapi.WriteError(w, r, err)
		return
	}
	s := &sse{w: w, rc: http.NewResponseController(w), timeout: h.opts.WriteTimeout}
	if r.Method == http.MethodHead {
		s.start() // the headers a GET would get, and no stream to keep open
		return
	}
	ctx := r.Context()
	// Subscribe before reading the database: whatever commits from now on
	// reaches the subscription, and whatever committed before is in the
	// database reads below. The overlap is dropped by seq.
	sub, err := h.hub.subscribe(ctx, recipient, h.opts.Buffer)
	if err != nil {
		if ctx.Err() == nil {
			httpapi.WriteError(w, r, &httpapi.Error{Status: http.StatusServiceUnavailable, Code: httpapi.CodeNotReady,
				Message: "the stream is shutting down; reconnect", Err: err})
		}
		return
	}
	defer sub.close()
	defer s.rc.SetWriteDeadline(time.Time{}) // the connection may serve another request
	var last int64
	if resume {
		last, err = h.replay(ctx, s, recipient, pos)
	} else {
		last, err = h.fresh(ctx, s, recipient)
	}
	if err != nil {
		h.fail(w, r, s, recipient, err)
		return
	}
	h.live(ctx, s, sub, last)
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
	counts, err := stores.CountInbox(ctx, h.hub.pool, recipient)
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
		// A position this log never handed out (a restored or different
		// database): only a reset can bring the client back in line.
		return h.reset(ctx, s, recipient)
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
			return h.reset(ctx, s, recipient)
		}
		s.start()
		for _, c := range page.Changes {
			s.change(c)
		}
		cursor = page.Last
		if !page.More {
			counts, err := stores.CountInbox(ctx, h.hub.pool, recipient)
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

// reset tells the client to reload and continues from the head of the log.
func (h *handler) reset(ctx context.Context, s *sse, recipient string) (int64, error) {
	return h.atHead(ctx, s, recipient, true)
}

// live forwards the Hub's batches newer than last until the stream ends.
func (h *handler) live(ctx context.Context, s *sse, sub *subscription, last int64) {
	heartbeat := time.NewTicker(h.opts.Heartbeat)
	defer heartbeat.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-h.hub.done:
			return
		case <-sub.dropped:
			return
		case b := <-sub.c:
			sent := false
			for _, c := range b.changes {
				if c.Seq <= last {
					continue // replayed or older than the start already
				}
				s.change(c)
				last, sent = c.Seq, true
			}
			if !sent {
				continue
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

// fail ends a stream on a database error: as a JSON error when nothing was
// written yet, otherwise by closing it (the client reconnects and resumes).
func (h *handler) fail(w http.ResponseWriter, r *http.Request, s *sse, recipient string, err error) {
	if r.Context().Err() != nil {
		return
	}
	if !s.started {
		httpapi.WriteError(w, r, err)
		return
	}
	h.hub.logger.WarnContext(r.Context(), "stream: ending a stream", "recipient", recipient, "err", err)
}

// position reads the client's Last-Event-ID (header, then the last_event_id
// query parameter). resume is false when there is none.
func position(r *http.Request) (pos int64, resume bool, err error) {
	v, field := r.Header.Get("Last-Event-ID"), "Last-Event-ID"
	if v == "" {
		v, field = r.URL.Query().Get("last_event_id"), "last_event_id"
	}
	if v == "" {
		return 0, false, nil
	}
	pos, err = strconv.ParseInt(v, 10, 64)
	if err != nil || pos < 0 {
		msg := "not an event id this stream sent; reconnect without it"
		return 0, false, &httpapi.Error{Status: http.StatusBadRequest, Code: httpapi.CodeBadRequest,
			Message: field + ": " + msg, Details: []any{httpapi.FieldDetail{Field: field, Message: msg}}}
	}
	return pos, true, nil
}

// sse writes one stream. Events are gathered in buf and written and flushed
// together, so a batch costs one write and no event waits in a buffer.
type sse struct {
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

func (s *sse) event(id int64, name string, data []byte) {
	fmt.Fprintf(&s.buf, "id: %d\nevent: %s\ndata: ", id, name)
	s.buf.Write(data) // JSON from encoding/json: never a raw newline
	s.buf.WriteString("\n\n")
}

func (s *sse) counts(id int64, c stores.InboxCounts) {
	data, _ := json.Marshal(httpapi.CountsWire(c)) // two ints: cannot fail
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
		data, err = json.Marshal(httpapi.InboxItemWire(*c.Item))
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
