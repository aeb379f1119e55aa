package stream_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/internal/stream"
	"github.com/notifyd/notifyd/internal/testing/pgtest"
	"github.com/notifyd/notifyd/internal/wire"
	"github.com/notifyd/notifyd/server/servertest"
	"github.com/notifyd/notifyd/stores"
	"github.com/notifyd/notifyd/stores/uuidv7"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const (
	secret = "stream-test-secret"
	path   = "/v1/inbox/stream"
)

// auth is what httpapi.Server.Recipient does, with the test secret: a bearer
// token, or access_token when there is no Authorization header.
func auth(r *http.Request) (notifyd.RecipientClaims, error) {
	tok := r.URL.Query().Get("access_token")
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, t, ok := strings.Cut(h, " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") {
			return notifyd.RecipientClaims{}, errors.New("not a bearer token")
		}
		tok = t
	}
	if tok == "" {
		return notifyd.RecipientClaims{}, errors.New("missing recipient token")
	}
	return notifyd.VerifyRecipientToken(secret, tok, time.Time{}, 0)
}

func token(t testing.TB, recipient string) string {
	t.Helper()
	tok, err := notifyd.RecipientToken(secret, recipient, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

type bundle struct {
	pool *pgxpool.Pool
	hub  *stream.Hub
	srv  *httptest.Server
	stop func()
}

// setup gives a test its own database, a running Hub and a server for it.
func setup(t testing.TB, opts stream.HandlerOptions) *bundle {
	t.Helper()
	pool := pgtest.NewDB(t)
	hub := newHub(t, pool)
	srv := serve(t, hub, opts, nil)
	return &bundle{pool: pool, hub: hub, srv: srv, stop: run(t, hub)}
}

func newHub(t testing.TB, pool *pgxpool.Pool) *stream.Hub {
	return stream.NewHub(pool, slog.New(slog.NewTextHandler(t.Output(), nil)))
}

// serve mounts the stream the way the daemon does. Call it before run: the
// server is then closed after the Hub stopped, which ends every stream.
func serve(t testing.TB, hub *stream.Hub, opts stream.HandlerOptions, wrap func(net.Listener) net.Listener) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("GET "+path, stream.Handler(hub, auth, opts))
	srv := httptest.NewUnstartedServer(mux)
	if wrap != nil {
		srv.Listener = wrap(srv.Listener)
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// run starts hub.Run and returns a function that stops it and checks its
// result; it also runs at cleanup.
func run(t testing.TB, hub *stream.Hub) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- hub.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-errc:
				if err != nil {
					t.Errorf("hub.Run: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Error("hub.Run did not return within 10s of its context ending")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// create inserts one inbox item per entry of recipients and logs them in
// the same transaction, the way a fan-out chunk does. It returns the ids.
func create(t testing.TB, pool *pgxpool.Pool, recipients ...string) []string {
	t.Helper()
	return createTitled(t, pool, "", recipients...)
}

func createTitled(t testing.TB, pool *pgxpool.Pool, title string, recipients ...string) []string {
	t.Helper()
	var ids []string
	err := pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
		var err error
		ids, err = createIn(t.Context(), tx, title, recipients...)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// createIn is create inside tx, which the caller commits.
func createIn(ctx context.Context, tx pgx.Tx, title string, recipients ...string) ([]string, error) {
	ids := make([]string, len(recipients))
	for i := range ids {
		ids[i] = uuidv7.String()
	}
	if _, err := tx.Exec(ctx, `
		INSERT INTO notify_inbox (id, recipient, notifier, key, category, reason, title, url, params)
		SELECT u.id, u.recipient, 'comment.created', 'k-' || u.id, 'comments', 'author',
		       coalesce(nullif($3, ''), 'item ' || u.id), 'https://x.test/' || u.id, '{"post": 9}'
		FROM unnest($1::uuid[], $2::text[]) AS u(id, recipient)`, ids, recipients, title); err != nil {
		return nil, err
	}
	return ids, stores.LogInboxCreated(ctx, tx, ids, recipients)
}

// markRead marks recipient's item id read in a transaction of its own, the
// way POST /v1/inbox/read does.
func markRead(t testing.TB, pool *pgxpool.Pool, recipient, id string) {
	t.Helper()
	err := pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
		changed, err := stores.MarkInbox(t.Context(), tx, stores.InboxMark{Recipient: recipient, Op: stores.InboxOpRead,
			IDs: []string{id}, At: time.Now()})
		if err == nil && len(changed) != 1 {
			err = errors.New("nothing marked")
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// event is one Server-Sent Event, or a comment line.
type event struct {
	id, name, data string
	comment        string
}

// seq returns the position in e's id, "<epoch>.<seq>".
func (e event) seq(t testing.TB) int64 {
	t.Helper()
	_, num, ok := strings.Cut(e.id, ".")
	n, err := strconv.ParseInt(num, 10, 64)
	if !ok || err != nil {
		t.Fatalf("event %s: id %q is not <epoch>.<seq>", e.name, e.id)
	}
	return n
}

// epoch returns the epoch in e's id.
func (e event) epoch(t testing.TB) string {
	t.Helper()
	epoch, _, ok := strings.Cut(e.id, ".")
	if !ok || len(epoch) != 16 {
		t.Fatalf("event %s: id %q is not <epoch>.<seq>", e.name, e.id)
	}
	return epoch
}

func (e event) json(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(e.data), &m); err != nil {
		t.Fatalf("event %s: data %q: %v", e.name, e.data, err)
	}
	return m
}

// client reads one stream.
type client struct {
	events chan event // closed when the stream ends
	cancel func()
	done   chan struct{}
	err    error // why the stream ended; set before done is closed
}

// get requests the stream and returns the response, whatever its status.
func get(t testing.TB, srv *httptest.Server, query url.Values, header http.Header) (*http.Response, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+path+"?"+query.Encode(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	return resp, cancel
}

// connect opens recipient's stream, with lastID as Last-Event-ID unless it
// is empty, and checks it is one.
func connect(t testing.TB, srv *httptest.Server, recipient, lastID string) *client {
	t.Helper()
	h := http.Header{"Authorization": {"Bearer " + token(t, recipient)}}
	if lastID != "" {
		h.Set("Last-Event-ID", lastID)
	}
	return open(t, srv, nil, h)
}

func open(t testing.TB, srv *httptest.Server, query url.Values, header http.Header) *client {
	t.Helper()
	resp, cancel := get(t, srv, query, header)
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		t.Fatalf("stream: %s: %s", resp.Status, body)
	}
	for k, want := range map[string]string{"Content-Type": "text/event-stream", "Cache-Control": "no-store", "X-Accel-Buffering": "no"} {
		if got := resp.Header.Get(k); got != want {
			t.Errorf("%s: %q, want %q", k, got, want)
		}
	}
	c := &client{events: make(chan event, 1024), cancel: cancel, done: make(chan struct{})}
	go c.read(resp.Body)
	t.Cleanup(c.close)
	return c
}

// read parses the stream (the subset of the SSE format the server writes:
// one data line per event).
func (c *client) read(body io.ReadCloser) {
	defer close(c.done)
	defer close(c.events)
	defer body.Close()
	br := bufio.NewReader(body)
	var ev event
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			c.err = err
			return
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			if ev != (event{}) {
				c.events <- ev
			}
			ev = event{}
		case strings.HasPrefix(line, ":"):
			c.events <- event{comment: strings.TrimSpace(line[1:])}
		default:
			field, value, _ := strings.Cut(line, ":")
			value = strings.TrimPrefix(value, " ")
			switch field {
			case "id":
				ev.id = value
			case "event":
				ev.name = value
			case "data":
				ev.data = value
			}
		}
	}
}

// close disconnects the client and waits for its reader.
func (c *client) close() {
	c.cancel()
	<-c.done
}

// next returns the next event, skipping comments.
func (c *client) next(t testing.TB) event {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev, ok := <-c.events:
			if !ok {
				t.Fatalf("stream ended: %v", c.err)
			}
			if ev.comment == "" {
				return ev
			}
		case <-timeout:
			t.Fatal("no event within 10s")
		}
	}
}

// expect returns the next event and checks its name.
func (c *client) expect(t testing.TB, name string) event {
	t.Helper()
	ev := c.next(t)
	if ev.name != name {
		t.Fatalf("event %q (id %s, data %s), want %q", ev.name, ev.id, ev.data, name)
	}
	return ev
}

// expectCounts reads a counts event and checks it.
func (c *client) expectCounts(t testing.TB, unread, unseen int) event {
	t.Helper()
	ev := c.expect(t, "counts")
	var got stores.InboxCounts
	if err := json.Unmarshal([]byte(ev.data), &got); err != nil || got != (stores.InboxCounts{Unread: unread, Unseen: unseen}) {
		t.Fatalf("counts %s (%v), want unread %d unseen %d", ev.data, err, unread, unseen)
	}
	return ev
}

// expectCreated reads an inbox.created event for item id.
func (c *client) expectCreated(t testing.TB, id string) event {
	t.Helper()
	ev := c.expect(t, "inbox.created")
	if got := ev.json(t)["id"]; got != id {
		t.Fatalf("created item %v, want %s", got, id)
	}
	return ev
}

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	servertest.Eventually(t, 10*time.Second, what, cond)
}

func TestResumeReplaysWhatWasMissedThenGoesLive(t *testing.T) {
	t.Parallel()
	b := setup(t, stream.HandlerOptions{})
	const me, other = "resume-me", "resume-other"

	c := connect(t, b.srv, me, "")
	start := c.expectCounts(t, 0, 0)
	first := create(t, b.pool, me)[0]
	ev := c.expectCreated(t, first)
	if ev.seq(t) <= start.seq(t) {
		t.Fatalf("created seq %s not after the start %s", ev.id, start.id)
	}
	lastID := ev.id
	if counts := c.expectCounts(t, 1, 1); counts.id != lastID {
		t.Fatalf("counts id %s, want the last change's %s", counts.id, lastID)
	}
	c.close()
	waitFor(t, "the client to be gone", func() bool { return b.hub.Clients() == 0 })

	// Meanwhile: 50 items in one transaction (with another recipient's in
	// between), and 10 of them read one by one.
	var recipients []string
	for i := range 60 {
		if i%6 == 5 {
			recipients = append(recipients, other)
		} else {
			recipients = append(recipients, me)
		}
	}
	all := create(t, b.pool, recipients...)
	var mine []string
	for i, r := range recipients {
		if r == me {
			mine = append(mine, all[i])
		}
	}
	var read []string
	for i := range 10 {
		read = append(read, mine[i*5])
		markRead(t, b.pool, me, mine[i*5])
	}

	c = connect(t, b.srv, me, lastID)
	page, err := stores.ListInbox(t.Context(), b.pool, me, stores.InboxAll, nil, 200)
	if err != nil {
		t.Fatal(err)
	}
	itemJSON := map[string]string{}
	for _, it := range page.Items {
		j, _ := json.Marshal(wire.InboxItemOf(it))
		itemJSON[it.ID] = string(j)
	}
	prev := ev.seq(t)
	for i := range 60 {
		ev := c.next(t)
		if seq := ev.seq(t); seq <= prev {
			t.Fatalf("event %d: seq %d after %d", i, seq, prev)
		} else {
			prev = seq
		}
		if i < 50 {
			if ev.name != "inbox.created" || ev.data != itemJSON[mine[i]] {
				t.Fatalf("event %d: %s %s, want inbox.created %s", i, ev.name, ev.data, itemJSON[mine[i]])
			}
			continue
		}
		if ev.name != "inbox.updated" {
			t.Fatalf("event %d: %s, want inbox.updated", i, ev.name)
		}
		data := ev.json(t)
		ids, _ := data["ids"].([]any)
		if len(ids) != 1 || ids[0] != read[i-50] || data["read_at"] == nil || len(data) != 2 {
			t.Fatalf("event %d: updated %s, want ids [%s] and read_at", i, ev.data, read[i-50])
		}
	}
	if counts := c.expectCounts(t, 41, 41); counts.seq(t) != prev {
		t.Fatalf("counts id %s, want the last replayed %d", counts.id, prev)
	}

	// Then live, without a gap or a duplicate.
	live := create(t, b.pool, other, me)
	if ev := c.expectCreated(t, live[1]); ev.seq(t) <= prev {
		t.Fatalf("live seq %s not after the replay's %d", ev.id, prev)
	}
	c.expectCounts(t, 42, 42)
}

func TestResumeFromQueryParameter(t *testing.T) {
	t.Parallel()
	b := setup(t, stream.HandlerOptions{})
	const me = "query-me"
	c := connect(t, b.srv, me, "")
	start := c.expectCounts(t, 0, 0)
	c.close()
	ids := create(t, b.pool, me, me)

	// EventSource cannot set headers: the token and the position go in the
	// query.
	c = open(t, b.srv, url.Values{"access_token": {token(t, me)}, "last_event_id": {start.id}}, nil)
	c.expectCreated(t, ids[0])
	c.expectCreated(t, ids[1])
	c.expectCounts(t, 2, 2)
}

func TestTwoReplicasSeeEachOthersWrites(t *testing.T) {
	t.Parallel()
	pool1, dbURL := pgtest.NewDBURL(t)
	pool2, err := pgxpool.New(t.Context(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool2.Close)
	hub1, hub2 := newHub(t, pool1), newHub(t, pool2)
	srv1 := serve(t, hub1, stream.HandlerOptions{}, nil)
	srv2 := serve(t, hub2, stream.HandlerOptions{}, nil)
	run(t, hub1)
	run(t, hub2)

	const me = "replica-me"
	c1, c2 := connect(t, srv1, me, ""), connect(t, srv2, me, "")
	c1.expectCounts(t, 0, 0)
	c2.expectCounts(t, 0, 0)
	for i := range 6 {
		// Written through one replica's pool, read on the other's stream.
		writer, reader, same := pool1, c2, c1
		if i%2 == 1 {
			writer, reader, same = pool2, c1, c2
		}
		id := create(t, writer, me)[0]
		committed := time.Now()
		reader.expectCreated(t, id)
		if d := time.Since(committed); d > time.Second {
			t.Fatalf("write %d reached the other replica's stream after %v", i, d)
		}
		reader.expectCounts(t, i+1, i+1)
		same.expectCreated(t, id)
		same.expectCounts(t, i+1, i+1)
	}
}

// A writer that started first and commits after a later writer: its item
// still reaches a connected stream, in position order with the later one,
// whichever of the two got its transaction id first; and a client resuming
// from the later item's id misses neither.
func TestLateCommitReachesTheStream(t *testing.T) {
	t.Parallel()
	b := setup(t, stream.HandlerOptions{})
	for _, firstWrites := range []bool{true, false} {
		me := fmt.Sprintf("late-%v", firstWrites)
		c := connect(t, b.srv, me, "")
		start := c.expectCounts(t, 0, 0)

		ctx := t.Context()
		first, err := b.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := first.Exec(ctx, `SELECT 1`); err != nil { // begun, no transaction id yet
			t.Fatal(err)
		}
		var early []string
		if firstWrites {
			if early, err = createIn(ctx, first, "", me); err != nil {
				t.Fatal(err)
			}
		}
		later := create(t, b.pool, me)[0] // committed
		if !firstWrites {
			if early, err = createIn(ctx, first, "", me); err != nil {
				t.Fatal(err)
			}
		}
		if err := first.Commit(ctx); err != nil {
			t.Fatal(err)
		}

		want := []string{later, early[0]}
		if firstWrites {
			want = []string{early[0], later}
		}
		var got []string
		prev := start.seq(t)
		for len(got) < 2 {
			ev := c.next(t)
			if ev.name == "counts" {
				continue
			}
			if ev.name != "inbox.created" || ev.seq(t) <= prev {
				t.Fatalf("%s id %s after %d", ev.name, ev.id, prev)
			}
			prev = ev.seq(t)
			got = append(got, ev.json(t)["id"].(string))
		}
		if !slices.Equal(got, want) {
			t.Fatalf("first writes first %v: items %v, want %v", firstWrites, got, want)
		}
		c.close()

		// Resuming from the start replays both, in the same order.
		r := connect(t, b.srv, me, start.id)
		r.expectCreated(t, want[0])
		r.expectCreated(t, want[1])
		r.expectCounts(t, 2, 2)
		r.close()
	}
}

func TestStreamCarriesOnlyItsRecipientsEvents(t *testing.T) {
	t.Parallel()
	b := setup(t, stream.HandlerOptions{})
	const a, bb = "iso-a", "iso-b"
	ca, cb := connect(t, b.srv, a, ""), connect(t, b.srv, bb, "")
	ca.expectCounts(t, 0, 0)
	cb.expectCounts(t, 0, 0)

	ids := create(t, b.pool, a, bb, bb, a, bb)
	markRead(t, b.pool, bb, ids[2])
	sentinelA, sentinelB := create(t, b.pool, a)[0], create(t, b.pool, bb)[0]

	// Every change event up to the recipient's sentinel, counts skipped.
	changes := func(c *client, sentinel string) []string {
		var got []string
		for {
			ev := c.next(t)
			if ev.name == "counts" {
				continue
			}
			d := ev.json(t)
			if ev.name == "inbox.created" {
				got = append(got, "created "+d["id"].(string))
				if d["id"] == sentinel {
					return got
				}
				continue
			}
			got = append(got, ev.name+" "+ev.data)
		}
	}
	if got, want := changes(ca, sentinelA), []string{"created " + ids[0], "created " + ids[3], "created " + sentinelA}; !slices.Equal(got, want) {
		t.Fatalf("A got %v, want %v", got, want)
	}
	gotB := changes(cb, sentinelB)
	if len(gotB) != 5 || gotB[0] != "created "+ids[1] || gotB[1] != "created "+ids[2] || gotB[2] != "created "+ids[4] ||
		!strings.HasPrefix(gotB[3], `inbox.updated {"ids":["`+ids[2]+`"],"read_at":"`) || gotB[4] != "created "+sentinelB {
		t.Fatalf("B got %v", gotB)
	}
}

func TestUnauthenticatedGetsJSON401BeforeAnyStream(t *testing.T) {
	t.Parallel()
	b := setup(t, stream.HandlerOptions{})
	forged, err := notifyd.RecipientToken("not-the-secret", "victim", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		query  url.Values
		header http.Header
	}{
		"absent":             {},
		"forged header":      {header: http.Header{"Authorization": {"Bearer " + forged}}},
		"forged query":       {query: url.Values{"access_token": {forged}}},
		"garbage":            {header: http.Header{"Authorization": {"Bearer not.a.jwt"}}},
		"not bearer":         {header: http.Header{"Authorization": {"Basic dXNlcjpwYXNz"}}},
		"forged with resume": {header: http.Header{"Authorization": {"Bearer " + forged}, "Last-Event-ID": {"0"}}},
	}
	for name, tc := range cases {
		resp, cancel := get(t, b.srv, tc.query, tc.header)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("%s: %s %s: %s", name, resp.Status, resp.Header.Get("Content-Type"), body)
		}
		var e struct {
			Error struct {
				Code    string `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal(body, &e); err != nil || e.Error.Code != "unauthorized" || e.Error.Message == "" {
			t.Fatalf("%s: body %s (%v)", name, body, err)
		}
		if strings.Contains(string(body), "event:") {
			t.Fatalf("%s: stream bytes in a 401: %s", name, body)
		}
	}

	if n := b.hub.Clients(); n != 0 {
		t.Fatalf("%d clients registered by refused requests", n)
	}
}

func TestResetWhenTheLogWasTrimmedPastTheClient(t *testing.T) {
	t.Parallel()
	b := setup(t, stream.HandlerOptions{})
	const me = "reset-me"
	c := connect(t, b.srv, me, "")
	c.expectCounts(t, 0, 0)
	create(t, b.pool, me, me, me)
	var seqs []string
	for len(seqs) < 3 {
		if ev := c.next(t); ev.name == "inbox.created" {
			seqs = append(seqs, ev.id)
		}
	}
	c.close()

	// Retention trims all three; one more change comes after.
	var cut time.Time
	if err := b.pool.QueryRow(t.Context(), `SELECT clock_timestamp()`).Scan(&cut); err != nil {
		t.Fatal(err)
	}
	if n, err := stores.DeleteChangesBefore(t.Context(), b.pool, cut, 100); err != nil || n != 3 {
		t.Fatalf("trimmed %d, %v; want 3", n, err)
	}
	later := create(t, b.pool, me)[0]

	// Resuming after the first: the second and third are gone. Reset, at the
	// head, then counts, then live.
	reset := connect(t, b.srv, me, seqs[0])
	ev := reset.expect(t, "reset")
	if ev.data != "{}" {
		t.Fatalf("reset data %q", ev.data)
	}
	head, err := stores.MaxChangeSeq(t.Context(), b.pool)
	if err != nil {
		t.Fatal(err)
	}
	if ev.seq(t) != head {
		t.Fatalf("reset id %s, want the head %d", ev.id, head)
	}
	if counts := reset.expectCounts(t, 4, 4); counts.id != ev.id {
		t.Fatalf("counts id %s after reset %s", counts.id, ev.id)
	}

	// Resuming after the third: nothing after it was trimmed, so no reset.
	resumed := connect(t, b.srv, me, seqs[2])
	resumed.expectCreated(t, later)
	resumed.expectCounts(t, 4, 4)

	// A position of this epoch the log never reached resets too.
	future := connect(t, b.srv, me, fmt.Sprintf("%s.%d", ev.epoch(t), head+1000))
	future.expect(t, "reset")
	future.expectCounts(t, 4, 4)

	live := create(t, b.pool, me)[0]
	for _, c := range []*client{reset, resumed, future} {
		c.expectCreated(t, live)
		c.expectCounts(t, 5, 5)
	}
}

// smallBuffers makes accepted connections' send buffers tiny, so a client
// that does not read blocks the server's writes after a few kilobytes.
type smallBuffers struct{ net.Listener }

func (l smallBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(4096)
	}
	return c, err
}

func TestSlowClientIsDroppedOthersKeepReceiving(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewDB(t)
	hub := newHub(t, pool)
	fastSrv := serve(t, hub, stream.HandlerOptions{}, nil)
	slowSrv := serve(t, hub, stream.HandlerOptions{Buffer: 1}, func(l net.Listener) net.Listener { return smallBuffers{l} })
	run(t, hub)
	const me = "slow-me"

	// The slow client sends its request and reads no further than the
	// first event (the counts): by then its handler has read the head of
	// the log it starts from, so every item committed after is owed to it,
	// in order. (An item committed between its subscribing and that read
	// would rightly not be sent, and the test could not tell which items
	// the stream owes it.)
	conn, err := net.Dial("tcp", slowSrv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() }) // first of the cleanups: unblocks the server's write
	req, _ := http.NewRequest(http.MethodGet, "http://slow"+path+"?access_token="+token(t, me), nil)
	if err := req.Write(conn); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	slow := bufio.NewReader(conn)
	resp, err := http.ReadResponse(slow, req)
	if err != nil {
		t.Fatal(err)
	}
	// Byte by byte: what follows the counts stays unread.
	var first []byte
	for !bytes.HasSuffix(first, []byte("\n\n")) {
		b := make([]byte, 1)
		if _, err := io.ReadFull(resp.Body, b); err != nil {
			t.Fatalf("the slow stream's first event, after %q: %v", first, err)
		}
		first = append(first, b[0])
	}
	if !bytes.Contains(first, []byte("event: counts\n")) {
		t.Fatalf("the slow stream's first event is %q, want the counts", first)
	}
	fast := connect(t, fastSrv, me, "")
	fast.expectCounts(t, 0, 0)
	waitFor(t, "both clients to subscribe", func() bool { return hub.Clients() == 2 })

	// Items too big for the slow connection's buffers (its kernel's receive
	// buffer, the server's tiny send buffer), one commit each, until
	// the slow client's single-batch buffer overflows. The fast client gets
	// every one meanwhile.
	title := strings.Repeat("x", 256<<10)
	var sent []string
	for hub.Clients() == 2 {
		if len(sent) == 40 {
			t.Fatalf("the slow client was not dropped after %d items", len(sent))
		}
		id := createTitled(t, pool, title, me)[0]
		sent = append(sent, id)
		fast.expectCreated(t, id)
		fast.expectCounts(t, len(sent), len(sent))
	}
	if len(sent) < 2 {
		t.Fatalf("dropped after %d items: the buffer holds one batch", len(sent))
	}
	after := create(t, pool, me)[0]
	fast.expectCreated(t, after)
	fast.expectCounts(t, len(sent)+1, len(sent)+1)

	// The slow client, reading at last, finds its stream closed: what it got
	// is a prefix of what was sent, in order, and it resumes from its last id.
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("the slow stream did not end: %v", err)
	}
	var got []string
	for _, block := range strings.Split(string(body), "\n\n") {
		if !strings.Contains(block, "event: inbox.created") {
			continue
		}
		_, data, _ := strings.Cut(block, "data: ")
		var it stores.InboxItem
		if err := json.Unmarshal([]byte(data), &it); err != nil {
			t.Fatal(err)
		}
		got = append(got, it.ID)
	}
	if len(got) >= len(sent) || !slices.Equal(got, sent[:len(got)]) {
		t.Fatalf("slow client got %d items, not a strict prefix of the %d sent:\n got %v\nsent %v", len(got), len(sent), got, sent)
	}
	if hub.Clients() != 1 {
		t.Fatalf("%d clients, want the fast one", hub.Clients())
	}
}

func TestHeartbeat(t *testing.T) {
	t.Parallel()
	b := setup(t, stream.HandlerOptions{Heartbeat: 20 * time.Millisecond})
	c := connect(t, b.srv, "beat", "")
	c.expectCounts(t, 0, 0)
	timeout := time.After(5 * time.Second)
	for pings := 0; pings < 3; {
		select {
		case ev, ok := <-c.events:
			if !ok {
				t.Fatalf("stream ended: %v", c.err)
			}
			if ev.comment != "ping" {
				t.Fatalf("%+v on an idle stream, want pings", ev)
			}
			pings++
		case <-timeout:
			t.Fatalf("%d pings in 5s at a 20ms heartbeat", pings)
		}
	}
}

func TestListenerReconnectsAndCatchesUp(t *testing.T) {
	t.Parallel()
	b := setup(t, stream.HandlerOptions{})
	const me = "reconnect-me"
	c := connect(t, b.srv, me, "")
	c.expectCounts(t, 0, 0)

	listener := func() (pid int) {
		err := b.pool.QueryRow(t.Context(), `SELECT coalesce(max(pid), 0) FROM pg_stat_activity
			WHERE datname = current_database() AND query = 'LISTEN notifyd_inbox'`).Scan(&pid)
		if err != nil {
			t.Fatal(err)
		}
		return pid
	}
	var old int
	waitFor(t, "the hub to LISTEN", func() bool { old = listener(); return old != 0 })
	if _, err := b.pool.Exec(t.Context(), `SELECT pg_terminate_backend($1)`, old); err != nil {
		t.Fatal(err)
	}
	// Written while the hub may not be listening: not lost.
	during := create(t, b.pool, me)[0]
	c.expectCreated(t, during)
	c.expectCounts(t, 1, 1)
	waitFor(t, "a new LISTEN connection", func() bool { pid := listener(); return pid != 0 && pid != old })

	after := create(t, b.pool, me)[0]
	c.expectCreated(t, after)
	c.expectCounts(t, 2, 2)
}

func TestHubStopEndsStreams(t *testing.T) {
	t.Parallel()
	b := setup(t, stream.HandlerOptions{})
	c := connect(t, b.srv, "stop-me", "")
	c.expectCounts(t, 0, 0)
	b.stop()
	select {
	case <-c.done:
		if !errors.Is(c.err, io.EOF) {
			t.Fatalf("stream ended with %v, want a clean end", c.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("stream still open 10s after the hub stopped")
	}
	resp, cancel := get(t, b.srv, nil, http.Header{"Authorization": {"Bearer " + token(t, "stop-me")}})
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	cancel()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), `"error"`) {
		t.Fatalf("after stop: %s: %s", resp.Status, body)
	}
}

func TestCursorsItCannotReplayFromReset(t *testing.T) {
	t.Parallel()
	b := setup(t, stream.HandlerOptions{})
	const me = "cursor-me"
	c := connect(t, b.srv, me, "")
	start := c.expectCounts(t, 0, 0)
	epoch := start.epoch(t)
	id := create(t, b.pool, me)[0]
	c.expectCreated(t, id)
	c.expectCounts(t, 1, 1)

	other := "0123456789abcdef"
	if other == epoch {
		other = "fedcba9876543210"
	}
	cursors := []string{
		other + "." + strconv.FormatInt(start.seq(t), 10), // another database's, at the same position
		other + ".0",
		epoch + ".-1", "-1", "soon", epoch, epoch + ".", "." + strconv.FormatInt(start.seq(t), 10),
		strconv.FormatInt(start.seq(t)+1<<40, 10), // a bare seq this log never reached
	}
	if upper := strings.ToUpper(epoch); upper != epoch { // an epoch of decimal digits only has no upper case
		cursors = append(cursors, upper+"."+strconv.FormatInt(start.seq(t), 10))
	}
	for _, cursor := range cursors {
		r := connect(t, b.srv, me, cursor)
		ev := r.next(t)
		if ev.name != "reset" {
			t.Fatalf("Last-Event-ID %q: event %s %s, want reset", cursor, ev.name, ev.data)
		}
		if ev.epoch(t) != epoch {
			t.Fatalf("Last-Event-ID %q: reset id %s, want epoch %s", cursor, ev.id, epoch)
		}
		r.expectCounts(t, 1, 1)
		r.close()
	}

	// This database's cursor, the one the previous release made for it
	// (its epoch named the WAL timeline too), and the bare seq of one (from
	// before cursors carried the epoch), replay.
	_, previous, err := stores.ChangeLogEpochs(t.Context(), b.pool)
	if err != nil || previous == "" || previous == epoch {
		t.Fatalf("the previous release's epoch %q (%v), epoch %s", previous, err, epoch)
	}
	for _, cursor := range []string{start.id, previous + "." + strconv.FormatInt(start.seq(t), 10),
		strconv.FormatInt(start.seq(t), 10)} {
		r := connect(t, b.srv, me, cursor)
		r.expectCreated(t, id)
		r.expectCounts(t, 1, 1)
		r.close()
	}
}
