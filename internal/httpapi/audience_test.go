package httpapi_test

import (
	"net/http"
	"strings"
	"testing"
)

// POST /v1/notifications accepts a notifier with an audience query without
// recipients or topics (the fan-out reads them from the application's
// tables), and still refuses that for a notifier without one; the SQL API's
// notify_send decides the same from the published catalog.
func TestPostNotificationToAnAudience(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{yaml: testConfig + `  ticket.updated:
    params: {type: object, properties: {ticket_id: {type: integer}}}
    audience:
      query: SELECT user_id AS id FROM watchers WHERE ticket_id = $1
      args: [ticket_id]
    channels:
      in_app: {title: "Ticket {{.ticket_id}}"}
`})
	r := b.do(t, http.MethodPost, "/v1/notifications", adminToken,
		map[string]any{"notifier": "ticket.updated", "key": "t-1", "params": map[string]any{"ticket_id": 42}})
	if r.status != http.StatusAccepted {
		t.Fatalf("audience-only send: %d %s", r.status, r.raw)
	}
	r = b.do(t, http.MethodPost, "/v1/notifications", adminToken,
		map[string]any{"notifier": "comment.created", "key": "c-1", "params": map[string]any{"post_title": "x"}})
	if r.status != http.StatusUnprocessableEntity || !strings.Contains(string(r.raw), "give at least one recipient or topic") {
		t.Fatalf("send without recipients to a notifier without audience: %d %s", r.status, r.raw)
	}
	var sqlErr error
	for _, c := range []struct {
		notifier string
		ok       bool
	}{{"ticket.updated", true}, {"comment.created", false}} {
		_, sqlErr = b.pool.Exec(t.Context(), `SELECT * FROM notify_send($1, 'sql-1', '[]', '{"ticket_id": 1, "post_title": "x"}')`, c.notifier)
		if (sqlErr == nil) != c.ok || (!c.ok && !strings.Contains(sqlErr.Error(), "give at least one recipient or topic")) {
			t.Errorf("notify_send(%s) without recipients: %v", c.notifier, sqlErr)
		}
	}
}
