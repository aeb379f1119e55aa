package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/internal/testing/pgtest"
	"github.com/notifyd/notifyd/server/servertest"
)

// A stream confined to acme forwards the deletion of acme's items (its
// notification cancelled) and not that of globex's items or of items of no
// tenant, whose ids it has no business knowing; a stream without a claim
// forwards all three.
func TestConfinedStreamForwardsOnlyItsTenantsDeletions(t *testing.T) {
	t.Parallel()
	_, url := pgtest.NewDBURL(t)
	cfg := servertest.Config(t, "")
	cfg.Database.URL = url
	base := runDaemon(t, cfg)
	call := apiCaller(t, base)
	admin := servertest.AdminToken
	for _, id := range []string{"acme", "globex"} {
		if code, res := call("PUT", "/v1/tenants/"+id, admin, map[string]any{"name": id}); code != 201 {
			t.Fatalf("PUT tenant %s = %d %v", id, code, res)
		}
	}
	acme, err := notifyd.TenantRecipientToken(servertest.TokenSecret, "u1", "acme", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	global, err := notifyd.RecipientToken(servertest.TokenSecret, "u1", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]string{"g-1": "globex", "n-1": "", "a-1": "acme"}
	for key, tenant := range keys {
		body := map[string]any{"notifier": "comment.created", "key": key, "recipients": []string{"u1"},
			"params": map[string]any{"post_title": key, "author_name": "Ada"}}
		if tenant != "" {
			body["tenant"] = tenant
		}
		if code, res := call("POST", "/v1/notifications", admin, body); code != 202 {
			t.Fatalf("send %s = %d %v", key, code, res)
		}
	}
	items := map[string]string{} // key -> item id
	servertest.Eventually(t, 20*time.Second, "three items in the inbox", func() bool {
		_, res := call("GET", "/v1/inbox", global, nil)
		list, _ := res["items"].([]any)
		for _, it := range list {
			it := it.(map[string]any)
			items[it["key"].(string)] = it["id"].(string)
		}
		return len(items) == 3
	})

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	deletions := func(token string) func() []string {
		req, _ := http.NewRequestWithContext(ctx, "GET", base+"/v1/inbox/stream", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		if resp.StatusCode != 200 {
			t.Fatalf("stream: %d", resp.StatusCode)
		}
		events := bufio.NewScanner(resp.Body)
		return func() []string { // the ids of the next inbox.deleted
			var name string
			for events.Scan() {
				line := events.Text()
				switch {
				case strings.HasPrefix(line, "event: "):
					name = strings.TrimPrefix(line, "event: ")
				case strings.HasPrefix(line, "data: ") && name == "inbox.deleted":
					var d struct{ IDs []string }
					if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &d); err != nil {
						t.Fatal(err)
					}
					return d.IDs
				}
			}
			t.Fatalf("the stream ended: %v", events.Err())
			return nil
		}
	}
	confined, unconfined := deletions(acme), deletions(global)
	// Each stream took its position before answering with its headers:
	// what is deleted now is after it.
	for _, key := range []string{"g-1", "n-1", "a-1"} {
		path := "/v1/notifications/comment.created/" + key
		if keys[key] != "" { // keys are per tenant
			path += "?tenant=" + keys[key]
		}
		if code, res := call("DELETE", path, admin, nil); code != 200 {
			t.Fatalf("cancel %s = %d %v", key, code, res)
		}
	}
	for _, key := range []string{"g-1", "n-1", "a-1"} {
		if got := unconfined(); !slices.Equal(got, []string{items[key]}) {
			t.Fatalf("the unconfined stream's deletion %v, want %s's item %s", got, key, items[key])
		}
	}
	if got := confined(); !slices.Equal(got, []string{items["a-1"]}) {
		t.Fatalf("acme's stream forwarded the deletion of %v, want only acme's item %s (globex's %s, no tenant's %s)",
			got, items["a-1"], items["g-1"], items["n-1"])
	}
}
