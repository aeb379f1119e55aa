package httpapi_test

import (
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/notifyd/notifyd/internal/wire"
)

func TestTopicSubscribe(t *testing.T) {
	t.Parallel()
	b := setup(t)

	// No body: the default reason.
	r := b.do(t, "PUT", "/v1/topics/post-9/subscribers/ada", adminToken, nil)
	expect(t, r, 200, "")
	if r.body["topic"] != "post-9" || r.body["recipient"] != "ada" || r.body["reason"] != "subscribed" {
		t.Fatalf("subscribe: %s", r.raw)
	}
	created := r.body["created_at"].(string)
	if _, err := time.Parse(time.RFC3339Nano, created); err != nil {
		t.Fatalf("created_at %q: %v", created, err)
	}
	// Again with a reason: upsert, the reason changes, created_at stays.
	r = b.do(t, "PUT", "/v1/topics/post-9/subscribers/ada", adminToken, map[string]any{"reason": "author"})
	expect(t, r, 200, "")
	if r.body["reason"] != "author" || r.body["created_at"] != created {
		t.Fatalf("re-subscribe: %s (first created_at %s)", r.raw, created)
	}
	expect(t, b.do(t, "PUT", "/v1/topics/post-9/subscribers/ada", adminToken, `{}`), 200, "")
	if n := count(t, b.pool, `SELECT count(*) FROM notify_subscriptions WHERE topic = 'post-9' AND reason = 'subscribed'`); n != 1 {
		t.Fatalf("%d rows, want 1 with the default reason back", n)
	}
	// Escaped path segments: a topic and an id with a slash and accents.
	expect(t, b.do(t, "PUT", "/v1/topics/org%2Fpost-%C3%A9/subscribers/u%2F1", adminToken, map[string]any{"reason": "role-default"}), 200, "")
	if n := count(t, b.pool, `SELECT count(*) FROM notify_subscriptions WHERE topic = 'org/post-é' AND recipient = 'u/1'`); n != 1 {
		t.Fatal("escaped topic or recipient not stored unescaped")
	}

	for _, tt := range []struct {
		path   string
		body   any
		status int
		code   string
	}{
		{"/v1/topics/post-9/subscribers/bob", map[string]any{"reason": "two words"}, 422, wire.CodeInvalidRequest},
		{"/v1/topics/post-9/subscribers/bob", map[string]any{"reason": strings.Repeat("r", 65)}, 422, wire.CodeInvalidRequest},
		{"/v1/topics/post-9/subscribers/bob", map[string]any{"reason": "-lead"}, 422, wire.CodeInvalidRequest},
		{"/v1/topics/post-9/subscribers/bob", map[string]any{"reason": 5}, 400, wire.CodeBadRequest},
		{"/v1/topics/post-9/subscribers/bob", map[string]any{"why": "x"}, 400, wire.CodeBadRequest},
		{"/v1/topics/post-9/subscribers/bob", `[`, 400, wire.CodeBadRequest},
		{"/v1/topics/" + strings.Repeat("t", 256) + "/subscribers/bob", nil, 400, wire.CodeBadRequest},
		{"/v1/topics/post-9/subscribers/" + strings.Repeat("u", 256), nil, 400, wire.CodeBadRequest},
		{"/v1/topics/post-9/subscribers/%FF", nil, 400, wire.CodeBadRequest},
		{"/v1/topics/%00/subscribers/bob", nil, 400, wire.CodeBadRequest},
	} {
		r := b.do(t, "PUT", tt.path, adminToken, tt.body)
		if r.status != tt.status || r.errCode() != tt.code {
			t.Errorf("PUT %.60s %v: %d %s, want %d %s", tt.path, tt.body, r.status, r.raw, tt.status, tt.code)
		}
	}
	if n := count(t, b.pool, `SELECT count(*) FROM notify_subscriptions WHERE recipient <> 'ada' AND recipient <> 'u/1'`); n != 0 {
		t.Fatalf("refused requests subscribed %d", n)
	}
	// A word may be any configured or unconfigured reason.
	expect(t, b.do(t, "PUT", "/v1/topics/post-9/subscribers/bob", adminToken, map[string]any{"reason": "watching_2.v1"}), 200, "")

	r = b.do(t, "DELETE", "/v1/topics/post-9/subscribers/ada", adminToken, nil)
	expect(t, r, 200, "")
	if r.body["deleted"] != true {
		t.Fatalf("delete: %s", r.raw)
	}
	r = b.do(t, "DELETE", "/v1/topics/post-9/subscribers/ada", adminToken, nil)
	expect(t, r, 200, "")
	if r.body["deleted"] != false {
		t.Fatalf("delete again: %s", r.raw)
	}
	if n := count(t, b.pool, `SELECT count(*) FROM notify_subscriptions WHERE topic = 'post-9'`); n != 1 {
		t.Fatalf("%d subscribers of post-9 left, want bob", n)
	}
}

type subscribersPage struct {
	Subscribers []struct {
		Recipient string    `json:"recipient"`
		Reason    string    `json:"reason"`
		CreatedAt time.Time `json:"created_at"`
	} `json:"subscribers"`
	NextCursor *string `json:"next_cursor"`
}

func TestTopicSubscribersPagination(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var want []string
	for i := range 250 {
		// Byte order differs from a linguistic one: upper case first, é last.
		id := []string{"b", "A", "é", "a", "Z"}[i%5] + fmt.Sprintf("%03d", i)
		want = append(want, id)
		expect(t, b.do(t, "PUT", "/v1/topics/big/subscribers/"+url.PathEscape(id), adminToken, nil), 200, "")
	}
	expect(t, b.do(t, "PUT", "/v1/topics/other/subscribers/zzz", adminToken, nil), 200, "")
	sort.Strings(want)

	var got []string
	cursor, pages := "", 0
	for {
		path := "/v1/topics/big/subscribers?limit=100"
		if cursor != "" {
			path += "&cursor=" + url.QueryEscape(cursor)
		}
		r := b.do(t, "GET", path, adminToken, nil)
		expect(t, r, 200, "")
		if _, ok := r.body["next_cursor"]; !ok {
			t.Fatalf("no next_cursor key: %s", r.raw)
		}
		var p subscribersPage
		if err := json.Unmarshal(r.raw, &p); err != nil {
			t.Fatal(err)
		}
		pages++
		if len(p.Subscribers) > 100 {
			t.Fatalf("page of %d", len(p.Subscribers))
		}
		for _, s := range p.Subscribers {
			if s.Reason != "subscribed" || s.CreatedAt.IsZero() {
				t.Fatalf("subscriber %+v", s)
			}
			got = append(got, s.Recipient)
		}
		if p.NextCursor == nil {
			break
		}
		cursor = *p.NextCursor
		if pages > 10 {
			t.Fatal("paging does not end")
		}
	}
	if pages != 3 || !slices.Equal(got, want) {
		t.Fatalf("%d pages, %d subscribers; want 3 pages of the 250 in byte order, none dropped or repeated", pages, len(got))
	}

	// The default page is 100; an unknown topic is empty.
	r := b.do(t, "GET", "/v1/topics/big/subscribers", adminToken, nil)
	expect(t, r, 200, "")
	if n := len(r.body["subscribers"].([]any)); n != 100 || r.body["next_cursor"] == nil {
		t.Fatalf("default page: %d subscribers, next %v", n, r.body["next_cursor"])
	}
	r = b.do(t, "GET", "/v1/topics/nobody/subscribers", adminToken, nil)
	expect(t, r, 200, "")
	if n := len(r.body["subscribers"].([]any)); n != 0 || r.body["next_cursor"] != nil {
		t.Fatalf("unknown topic: %s", r.raw)
	}

	// Bad paging parameters.
	for _, q := range []string{"limit=0", "limit=1001", "limit=x"} {
		expect(t, b.do(t, "GET", "/v1/topics/big/subscribers?"+q, adminToken, nil), 400, wire.CodeBadRequest)
	}
	// A mangled cursor, an inbox-style one, and a subscriptions cursor fed
	// to the subscribers list are refused.
	tok := recipientToken(t, "A000")
	expect(t, b.do(t, "PUT", "/v1/topics/t2/subscribers/A000", adminToken, nil), 200, "")
	expect(t, b.do(t, "PUT", "/v1/topics/t3/subscribers/A000", adminToken, nil), 200, "")
	r = b.do(t, "GET", "/v1/subscriptions?limit=1", tok, nil)
	expect(t, r, 200, "")
	subsCursor := r.body["next_cursor"].(string)
	for _, c := range []string{"nope", cursor[:len(cursor)-2] + "AA", "AQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", subsCursor} {
		expect(t, b.do(t, "GET", "/v1/topics/big/subscribers?cursor="+url.QueryEscape(c), adminToken, nil), 400, wire.CodeBadCursor)
	}
}

func TestRecipientSubscriptions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, topic := range []string{"post-2", "post-1", "Post-3"} {
		expect(t, b.do(t, "PUT", "/v1/topics/"+topic+"/subscribers/ada", adminToken, map[string]any{"reason": "author"}), 200, "")
	}
	expect(t, b.do(t, "PUT", "/v1/topics/post-1/subscribers/bob", adminToken, nil), 200, "")
	tok := recipientToken(t, "ada")

	var topics []string
	cursor := ""
	for range 5 {
		path := "/v1/subscriptions?limit=2"
		if cursor != "" {
			path += "&cursor=" + url.QueryEscape(cursor)
		}
		r := b.do(t, "GET", path, tok, nil)
		expect(t, r, 200, "")
		for _, s := range r.body["subscriptions"].([]any) {
			m := s.(map[string]any)
			if m["reason"] != "author" || m["created_at"] == nil || m["recipient"] != nil {
				t.Fatalf("subscription %v", m)
			}
			topics = append(topics, m["topic"].(string))
		}
		next, _ := r.body["next_cursor"].(string)
		if next == "" {
			break
		}
		cursor = next
	}
	if got := strings.Join(topics, " "); got != "Post-3 post-1 post-2" {
		t.Fatalf("ada's topics %q", got)
	}
	r := b.do(t, "GET", "/v1/recipients/bob/subscriptions", adminToken, nil)
	expect(t, r, 200, "")
	if subs := r.body["subscriptions"].([]any); len(subs) != 1 || subs[0].(map[string]any)["topic"] != "post-1" {
		t.Fatalf("bob's subscriptions: %s", r.raw)
	}
	// A recipient can read, not change, their subscriptions.
	expect(t, b.do(t, "PUT", "/v1/subscriptions", tok, nil), 405, wire.CodeMethodNotAllowed)
}
