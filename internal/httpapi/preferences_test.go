package httpapi_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/notifyd/notifyd/internal/httpapi"
	"github.com/notifyd/notifyd/internal/wire"
	"github.com/notifyd/notifyd/jobs"
	"github.com/notifyd/notifyd/server/servertest"
)

// prefsConfig has notifiers for every resolution case a preference page
// shows: an optional one on three channels (email digested by default,
// webhook off by default), a required one, and one without category or email.
// fanout_chunk is tiny so the end-to-end test crosses chunk boundaries.
const prefsConfig = `
reasons: [assigned, author, mentioned, subscribed, role-default]
queues: {fanout: 2, send: 2, digest: 1, maintenance: 1, fanout_chunk: 2}
http: {admin_token: ` + adminToken + `, token_secret: ` + tokenSecret + `}
notifiers:
  comment.created:
    category: comments
    params: {type: object, properties: {post_title: {type: string}}}
    channels:
      in_app: {title: "New comment on {{.post_title}}"}
      email: {default: digest, subject: "New comment on {{.post_title}}", text: "{{.post_title}}"}
      webhook: {default: "off"}
  security.login:
    category: security
    required: true
    channels:
      in_app: {title: "New login"}
      email: {subject: "New login", text: "Someone logged in"}
  badge.earned:
    channels:
      in_app: {title: "Badge!"}
`

// preferences is a decoded preferences response.
type preferences struct {
	Rules []struct {
		Scope   string `json:"scope"`
		Channel string `json:"channel"`
		Mode    string `json:"mode"`
	} `json:"rules"`
	Effective map[string]struct {
		Category string            `json:"category"`
		Required bool              `json:"required"`
		Muted    bool              `json:"muted"`
		Channels map[string]string `json:"channels"`
	} `json:"effective"`
}

func decodePrefs(t *testing.T, r response) preferences {
	t.Helper()
	expect(t, r, 200, "")
	var p preferences
	if err := json.Unmarshal(r.raw, &p); err != nil {
		t.Fatal(err)
	}
	if p.Rules == nil || p.Effective == nil {
		t.Fatalf("rules or effective missing: %s", r.raw)
	}
	return p
}

// summary renders the effective map compactly: "name[muted]:ch=mode,...".
func (p preferences) summary() string {
	var parts []string
	for name, e := range p.Effective {
		var chans []string
		for ch, mode := range e.Channels {
			chans = append(chans, ch+"="+mode)
		}
		slices.Sort(chans)
		m := ""
		if e.Muted {
			m = "[muted]"
		}
		parts = append(parts, name+m+":"+strings.Join(chans, ","))
	}
	slices.Sort(parts)
	return strings.Join(parts, " ")
}

func (p preferences) rules() string {
	var parts []string
	for _, r := range p.Rules {
		parts = append(parts, r.Scope+"/"+r.Channel+"="+r.Mode)
	}
	return strings.Join(parts, " ")
}

func TestPreferencesRoundTrip(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{yaml: prefsConfig})
	tok := recipientToken(t, "ada")

	// No rules yet: the defaults of each notifier, only for the channels it uses.
	p := decodePrefs(t, b.do(t, "GET", "/v1/preferences", tok, nil))
	if len(p.Rules) != 0 {
		t.Fatalf("rules before any PUT: %v", p.Rules)
	}
	want := "badge.earned:in_app=immediate comment.created:email=digest,in_app=immediate,webhook=off " +
		"security.login:email=immediate,in_app=immediate"
	if got := p.summary(); got != want {
		t.Fatalf("effective defaults\n got %s\nwant %s", got, want)
	}
	e := p.Effective["security.login"]
	if e.Category != "security" || !e.Required || p.Effective["badge.earned"].Category != "" || p.Effective["comment.created"].Required {
		t.Fatalf("category/required: %+v", p.Effective)
	}

	body := map[string]any{"rules": []map[string]string{
		{"scope": "notifier:comment.created", "channel": "email", "mode": "immediate"},
		{"scope": "*", "channel": "*", "mode": "off"},
		{"scope": "category:comments", "channel": "in_app", "mode": "immediate"},
		{"scope": "*", "channel": "webhook", "mode": "immediate"},
	}}
	p = decodePrefs(t, b.do(t, "PUT", "/v1/preferences", tok, body))
	wantRules := "*/*=off */webhook=immediate category:comments/in_app=immediate notifier:comment.created/email=immediate"
	if got := p.rules(); got != wantRules {
		t.Fatalf("PUT answered rules %s, want %s", got, wantRules)
	}
	// * off turns everything off except where a more specific rule says
	// otherwise, and except the required notifier.
	want = "badge.earned:in_app=off comment.created:email=immediate,in_app=immediate,webhook=immediate " +
		"security.login:email=immediate,in_app=immediate"
	if got := p.summary(); got != want {
		t.Fatalf("effective after PUT\n got %s\nwant %s", got, want)
	}
	// GET reads back the same; the admin view of the same recipient too.
	if got := decodePrefs(t, b.do(t, "GET", "/v1/preferences", tok, nil)); got.rules() != wantRules || got.summary() != want {
		t.Fatalf("GET after PUT: %s | %s", got.rules(), got.summary())
	}
	if got := decodePrefs(t, b.do(t, "GET", "/v1/recipients/ada/preferences", adminToken, nil)); got.rules() != wantRules {
		t.Fatalf("admin GET: %s", got.rules())
	}

	// A notifier mute shows as muted and silences every channel of an
	// optional notifier; the required one ignores it.
	expect(t, b.do(t, "PUT", "/v1/mutes", tok, map[string]any{"target": "notifier:comment.created"}), 200, "")
	expect(t, b.do(t, "PUT", "/v1/mutes", tok, map[string]any{"target": "notifier:security.login"}), 200, "")
	expect(t, b.do(t, "PUT", "/v1/mutes", tok, map[string]any{"target": "topic:post-9"}), 200, "")
	p = decodePrefs(t, b.do(t, "GET", "/v1/preferences", tok, nil))
	want = "badge.earned:in_app=off comment.created[muted]:email=off,in_app=off,webhook=off " +
		"security.login[muted]:email=immediate,in_app=immediate"
	if got := p.summary(); got != want {
		t.Fatalf("effective with mutes\n got %s\nwant %s", got, want)
	}

	// The admin PUT replaces the whole set; what a GET returned can be written
	// back as it is (effective is ignored).
	p = decodePrefs(t, b.do(t, "PUT", "/v1/recipients/ada/preferences", adminToken,
		`{"rules":[{"scope":"*","channel":"email","mode":"digest"}]}`))
	if p.rules() != "*/email=digest" {
		t.Fatalf("admin PUT: %s", p.rules())
	}
	back := b.do(t, "GET", "/v1/preferences", tok, nil)
	expect(t, b.do(t, "PUT", "/v1/preferences", tok, back.raw), 200, "")
	if got := decodePrefs(t, b.do(t, "GET", "/v1/preferences", tok, nil)); got.rules() != "*/email=digest" {
		t.Fatalf("write-back: %s", got.rules())
	}
	// [] clears.
	if p := decodePrefs(t, b.do(t, "PUT", "/v1/preferences", tok, `{"rules":[]}`)); len(p.Rules) != 0 {
		t.Fatalf("clear: %v", p.Rules)
	}
	if n := count(t, b.pool, `SELECT count(*) FROM notify_preferences`); n != 0 {
		t.Fatalf("%d rules stored after clearing", n)
	}
}

func TestPreferencesValidation(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{yaml: prefsConfig})
	tok := recipientToken(t, "val")
	good := `{"rules":[{"scope":"*","channel":"*","mode":"off"}]}`
	expect(t, b.do(t, "PUT", "/v1/preferences", tok, good), 200, "")

	rule := func(scope, channel, mode string) map[string]string {
		return map[string]string{"scope": scope, "channel": channel, "mode": mode}
	}
	many := make([]map[string]string, 201)
	for i := range many {
		many[i] = rule(fmt.Sprintf("notifier:n%d", i), "*", "off")
	}
	tests := []struct {
		name   string
		body   any
		status int
		code   string
		fields []string // the details' fields, in order
	}{
		{"bad scope", map[string]any{"rules": []any{rule("topic:x", "*", "off")}}, 422, httpapi.CodeInvalidPreferences,
			[]string{"rules[0].scope"}},
		{"bad channel", map[string]any{"rules": []any{rule("*", "*", "off"), rule("*", "slack", "off")}}, 422,
			httpapi.CodeInvalidPreferences, []string{"rules[1].channel"}},
		{"digest on in_app", map[string]any{"rules": []any{rule("*", "in_app", "digest")}}, 422,
			httpapi.CodeInvalidPreferences, []string{"rules[0].mode"}},
		{"bad mode", map[string]any{"rules": []any{rule("*", "*", "sometimes")}}, 422,
			httpapi.CodeInvalidPreferences, []string{"rules[0].mode"}},
		{"missing fields", map[string]any{"rules": []any{map[string]string{}}}, 422,
			httpapi.CodeInvalidPreferences, []string{"rules[0].scope"}},
		{"every problem reported", map[string]any{"rules": []any{rule("x", "*", "off"), rule("*", "*", "off"),
			rule("*", "fax", "off"), rule("*", "*", "immediate")}}, 422, httpapi.CodeInvalidPreferences,
			[]string{"rules[0].scope", "rules[2].channel", "rules[3]"}},
		{"duplicate", map[string]any{"rules": []any{rule("category:comments", "email", "off"),
			rule("category:comments", "email", "digest")}}, 422, httpapi.CodeInvalidPreferences, []string{"rules[1]"}},
		{"too many", map[string]any{"rules": many}, 422, httpapi.CodeInvalidPreferences, []string{"rules"}},
		{"no rules key", map[string]any{}, 400, wire.CodeBadRequest, []string{"rules"}},
		{"rules null", `{"rules":null}`, 400, wire.CodeBadRequest, []string{"rules"}},
		{"rule not an object", `{"rules":["*"]}`, 400, wire.CodeBadRequest, []string{"rules[0]"}},
		{"unknown rule field", `{"rules":[{"scope":"*","channel":"*","mode":"off","why":1}]}`, 400,
			wire.CodeBadRequest, []string{"rules[0].why"}},
		{"wrong type", `{"rules":[{"scope":"*","channel":"*","mode":5}]}`, 400, wire.CodeBadRequest,
			[]string{"rules[0].mode"}},
		{"malformed", `{"rules":[`, 400, wire.CodeBadRequest, nil},
	}
	for _, tt := range tests {
		for _, path := range []string{"/v1/preferences", "/v1/recipients/val/preferences"} {
			token := tok
			if strings.HasPrefix(path, "/v1/recipients/") {
				token = adminToken
			}
			r := b.do(t, "PUT", path, token, tt.body)
			if r.status != tt.status || r.errCode() != tt.code {
				t.Errorf("%s %s: %d %s, want %d %s", tt.name, path, r.status, r.raw, tt.status, tt.code)
				continue
			}
			if tt.fields == nil {
				continue
			}
			var fields []string
			for _, d := range r.errDetails() {
				fields = append(fields, d.(map[string]any)["field"].(string))
			}
			if !slices.Equal(fields, tt.fields) {
				t.Errorf("%s %s: detail fields %v, want %v (%s)", tt.name, path, fields, tt.fields, r.raw)
			}
		}
	}
	// Nothing was written by any refused request: the first rule set stands.
	p := decodePrefs(t, b.do(t, "GET", "/v1/preferences", tok, nil))
	if p.rules() != "*/*=off" {
		t.Fatalf("rules after refused PUTs: %s", p.rules())
	}
	// Rules naming notifiers or categories the config lacks are kept; they
	// match nothing.
	expect(t, b.do(t, "PUT", "/v1/preferences", tok,
		`{"rules":[{"scope":"notifier:gone","channel":"*","mode":"off"},{"scope":"category:gone","channel":"email","mode":"digest"}]}`), 200, "")
	p = decodePrefs(t, b.do(t, "GET", "/v1/preferences", tok, nil))
	if p.rules() != "category:gone/email=digest notifier:gone/*=off" || p.Effective["badge.earned"].Channels["in_app"] != "immediate" {
		t.Fatalf("rules for unknown names: %s | %s", p.rules(), p.summary())
	}
}

// TestSettingsScopedToToken: a recipient token reaches only its subject's
// preferences and mutes, and is no key to the admin twins.
func TestSettingsScopedToToken(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{yaml: prefsConfig})
	a, bob := recipientToken(t, "alice"), recipientToken(t, "bob")

	expect(t, b.do(t, "PUT", "/v1/preferences", bob, `{"rules":[{"scope":"*","channel":"*","mode":"off"}]}`), 200, "")
	expect(t, b.do(t, "PUT", "/v1/mutes", bob, map[string]any{"target": "topic:bob-only"}), 200, "")

	// Alice sees her own (empty) settings, whatever she puts in the URL.
	for _, path := range []string{"/v1/preferences", "/v1/preferences?recipient=bob", "/v1/preferences?id=bob"} {
		if p := decodePrefs(t, b.do(t, "GET", path, a, nil)); len(p.Rules) != 0 {
			t.Fatalf("alice's GET %s shows rules %s", path, p.rules())
		}
	}
	if r := b.do(t, "GET", "/v1/mutes?recipient=bob", a, nil); r.status != 200 || len(r.body["mutes"].([]any)) != 0 {
		t.Fatalf("alice's mutes: %s", r.raw)
	}
	// Alice's writes land on alice, and deleting bob's mute target only
	// touches hers.
	expect(t, b.do(t, "PUT", "/v1/preferences?recipient=bob", a, `{"rules":[{"scope":"*","channel":"*","mode":"immediate"}]}`), 200, "")
	r := b.do(t, "DELETE", "/v1/mutes?target=topic:bob-only", a, nil)
	expect(t, r, 200, "")
	if r.body["deleted"] != false {
		t.Fatalf("alice deleted bob's mute: %s", r.raw)
	}
	if p := decodePrefs(t, b.do(t, "GET", "/v1/preferences", bob, nil)); p.rules() != "*/*=off" {
		t.Fatalf("bob's rules changed: %s", p.rules())
	}
	if n := count(t, b.pool, `SELECT count(*) FROM notify_mutes WHERE recipient = 'bob'`); n != 1 {
		t.Fatalf("bob's mutes: %d", n)
	}
	if n := count(t, b.pool, `SELECT count(*) FROM notify_preferences WHERE recipient = 'alice' AND mode = 'immediate'`); n != 1 {
		t.Fatalf("alice's PUT did not land on alice")
	}

	// Recipient tokens are not admin tokens, and the admin token is not a
	// recipient token.
	for _, req := range []struct{ method, path string }{
		{"GET", "/v1/recipients/bob/preferences"}, {"PUT", "/v1/recipients/bob/preferences"},
		{"GET", "/v1/recipients/bob/mutes"}, {"PUT", "/v1/recipients/bob/mutes"}, {"DELETE", "/v1/recipients/bob/mutes"},
		{"GET", "/v1/recipients/bob/subscriptions"}, {"DELETE", "/v1/recipients/bob"},
		{"GET", "/v1/topics/t/subscribers"}, {"PUT", "/v1/topics/t/subscribers/alice"}, {"DELETE", "/v1/topics/t/subscribers/bob"},
	} {
		for _, tok := range []string{a, bob, ""} {
			expect(t, b.do(t, req.method, req.path, tok, `{"rules":[],"target":"topic:x"}`), 401, wire.CodeUnauthorized)
		}
	}
	for _, req := range []struct{ method, path string }{
		{"GET", "/v1/preferences"}, {"PUT", "/v1/preferences"}, {"GET", "/v1/mutes"}, {"PUT", "/v1/mutes"},
		{"DELETE", "/v1/mutes"}, {"GET", "/v1/subscriptions"},
	} {
		expect(t, b.do(t, req.method, req.path, adminToken, `{"rules":[],"target":"topic:x"}`), 401, wire.CodeUnauthorized)
	}
	if n := count(t, b.pool, `SELECT count(*) FROM notify_subscriptions`); n != 0 {
		t.Fatalf("a refused request subscribed someone")
	}
	if n := count(t, b.pool, `SELECT count(*) FROM notify_mutes`); n != 1 {
		t.Fatalf("a refused request changed mutes")
	}
}

// TestFanoutHonoursSettingsFromTheAPI is the end-to-end path: subscriptions,
// preferences and mutes written through the API decide what a notification
// to a topic produces when the fan-out workers run it.
func TestFanoutHonoursSettingsFromTheAPI(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{yaml: prefsConfig})
	// The fan-out's clock runs a minute ahead: a mute that ends within that
	// minute has ended for it, while one that ends in an hour has not.
	servertest.StartWorkers(t, &jobs.Deps{Pool: b.pool, Config: b.cfg, Clock: func() time.Time { return time.Now().Add(time.Minute) }})

	subscribers := []string{"on", "off", "cat-off-notifier-on", "muted-topic", "muted-topic-direct", "muted-notifier",
		"muted-other-topic", "mute-expired", "actor"}
	for _, id := range subscribers {
		expect(t, b.do(t, "PUT", "/v1/topics/post-9/subscribers/"+id, adminToken, nil), 200, "")
	}
	put := func(id, path string, body any) {
		t.Helper()
		expect(t, b.do(t, "PUT", path, recipientToken(t, id), body), 200, "")
	}
	put("off", "/v1/preferences", `{"rules":[{"scope":"category:comments","channel":"in_app","mode":"off"}]}`)
	put("cat-off-notifier-on", "/v1/preferences",
		`{"rules":[{"scope":"category:comments","channel":"*","mode":"off"},{"scope":"notifier:comment.created","channel":"in_app","mode":"immediate"}]}`)
	put("muted-topic", "/v1/mutes", map[string]any{"target": "topic:post-9", "until": time.Now().Add(time.Hour).Format(time.RFC3339)})
	put("muted-topic-direct", "/v1/mutes", map[string]any{"target": "topic:post-9"})
	put("muted-other-topic", "/v1/mutes", map[string]any{"target": "topic:post-10"})
	expect(t, b.do(t, "PUT", "/v1/recipients/muted-notifier/mutes", adminToken, map[string]any{"target": "notifier:comment.created"}), 200, "")
	put("mute-expired", "/v1/mutes", map[string]any{"target": "topic:post-9", "until": time.Now().Add(30 * time.Second).Format(time.RFC3339Nano)})

	// Send to the topic, also addressing one muted subscriber directly (a
	// topic mute does not silence that).
	r := b.do(t, "POST", "/v1/notifications", adminToken, map[string]any{"notifier": "comment.created", "key": "c-1",
		"actor": "actor", "topics": []string{"post-9"}, "recipients": []any{map[string]string{"id": "muted-topic-direct", "reason": "mentioned"}},
		"params": map[string]any{"post_title": "Hello"}})
	expect(t, r, 202, "")
	id := r.body["id"].(string)
	servertest.Eventually(t, 30*time.Second, "notification to be fanned out", func() bool {
		return count(t, b.pool, `SELECT count(*) FROM notify_notifications WHERE id = $1 AND status = 'fanned_out'`, id) == 1
	})

	got := map[string]string{}
	rows, err := b.pool.Query(t.Context(), `SELECT recipient, reason FROM notify_inbox ORDER BY recipient`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var rc, reason string
		if err := rows.Scan(&rc, &reason); err != nil {
			t.Fatal(err)
		}
		got[rc] = reason
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"on": "subscribed", "cat-off-notifier-on": "subscribed", "muted-topic-direct": "mentioned",
		"muted-other-topic": "subscribed", "mute-expired": "subscribed"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("inbox\n got %v\nwant %v", got, want)
	}

	// The ledger says why the others got nothing in-app.
	ledger := map[string]string{}
	rows, err = b.pool.Query(t.Context(), `SELECT recipient || '/' || channel, status || ': ' || coalesce(last_error, '')
		FROM notify_deliveries WHERE notification_id = $1 AND status = 'skipped'`, id)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			t.Fatal(err)
		}
		ledger[k] = v
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"off/in_app", "cat-off-notifier-on/email"} {
		if v := ledger[k]; !strings.HasPrefix(v, "skipped: ") || !strings.Contains(v, "preferences") {
			t.Errorf("%s: %q, want skipped for the preferences", k, v)
		}
	}
	for _, k := range []string{"muted-topic/in_app", "muted-topic/email", "muted-notifier/in_app", "muted-notifier/email"} {
		if v := ledger[k]; !strings.HasPrefix(v, "skipped: ") || !strings.Contains(v, "muted") {
			t.Errorf("%s: %q, want skipped as muted", k, v)
		}
	}
	for k := range ledger {
		if strings.HasPrefix(k, "on/") || strings.HasPrefix(k, "muted-topic-direct/") || strings.HasPrefix(k, "actor/") ||
			strings.HasPrefix(k, "mute-expired/") {
			t.Errorf("unexpected skipped row %s: %s", k, ledger[k])
		}
	}
	if n := count(t, b.pool, `SELECT count(*) FROM notify_deliveries WHERE recipient = 'actor'`); n != 0 {
		t.Errorf("the actor has %d delivery rows", n)
	}

	// The recipient sees the item through the API; the admin view of the
	// notification reports the skipped rows.
	page := b.inbox(t, "/v1/inbox", recipientToken(t, "on"))
	if len(page.Items) != 1 || page.Items[0].Title != "New comment on Hello" || page.Items[0].Reason != "subscribed" {
		t.Fatalf("inbox of on: %+v", page.Items)
	}
	if page := b.inbox(t, "/v1/inbox", recipientToken(t, "off")); len(page.Items) != 0 {
		t.Fatalf("inbox of off: %+v", page.Items)
	}
	n := b.do(t, "GET", "/v1/notifications/"+id, adminToken, nil)
	expect(t, n, 200, "")
	if !strings.Contains(string(n.raw), `"recipient":"off","channel":"in_app"`) ||
		!strings.Contains(string(n.raw), "turned off by the recipient's preferences") {
		t.Fatalf("GET notification lacks the skipped in_app row: %s", n.raw)
	}
}
