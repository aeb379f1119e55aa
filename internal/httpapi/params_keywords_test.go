package httpapi_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/internal/testing/badparams"
	"github.com/notifyd/notifyd/internal/wire"
	"github.com/notifyd/notifyd/server/servertest"
)

// The shared table of bad params (pattern, multipleOf, uniqueItems, allOf,
// anyOf, oneOf, not, exact formats, bounds, additionalProperties) is refused
// by POST /v1/notifications (422 invalid_params), notify_send (SQLSTATE
// 22023 on params, the pointer as DETAIL) and the Go API (a ParamsError) at
// the same pointer, before anything is written; its good params pass all
// three.
func TestSQLAPIChecksEveryParamsKeywordAsHTTPDoes(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{yaml: `
http: {admin_token: ` + adminToken + `, token_secret: ` + tokenSecret + `}
notifiers:
` + badparams.Config})
	ctx := t.Context()
	client, err := notifyd.NewClient(b.pool, notifyd.ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	good := 0
	for i, c := range badparams.Cases {
		var params map[string]any
		if err := json.Unmarshal([]byte(c.Params), &params); err != nil {
			t.Fatal(err)
		}
		key := fmt.Sprintf("k-%d", i)
		r := b.do(t, "POST", "/v1/notifications", adminToken, map[string]any{"notifier": badparams.Notifier,
			"key": key + "-http", "recipients": []string{"u1"}, "params": params})
		sqlErr := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `SELECT * FROM notify_send($1, $2, '["u1"]', $3::jsonb)`,
				badparams.Notifier, key+"-sql", c.Params)
			return err
		})
		_, goErr := client.Send(ctx, notifyd.Notification{Notifier: badparams.Notifier, Key: key + "-go",
			Recipients: []notifyd.Recipient{{ID: "u1"}}, Params: params})
		if c.Pointer == "" {
			good++
			if r.status != http.StatusAccepted {
				t.Errorf("%s: POST /v1/notifications = %d %s, want 202", c.Params, r.status, r.raw)
			}
			if sqlErr != nil {
				t.Errorf("%s: notify_send: %v", c.Params, sqlErr)
			}
			if goErr != nil {
				t.Errorf("%s: Send: %v", c.Params, goErr)
			}
			continue
		}
		if r.status != http.StatusUnprocessableEntity || r.errCode() != wire.CodeInvalidParams ||
			!strings.Contains(string(r.raw), `"pointer":"`+c.Pointer+`"`) {
			t.Errorf("%s: POST /v1/notifications = %d %s, want 422 invalid_params at %s", c.Params, r.status, r.raw, c.Pointer)
		}
		var pgErr *pgconn.PgError
		if !errors.As(sqlErr, &pgErr) || pgErr.Code != "22023" || pgErr.ColumnName != "params" || pgErr.Detail != c.Pointer ||
			!strings.Contains(pgErr.Message, badparams.Notifier+": params "+c.Pointer+": ") {
			t.Errorf("%s: notify_send = %v, want SQLSTATE 22023 on params at %s", c.Params, sqlErr, c.Pointer)
		}
		var pe *config.ParamsError
		if !errors.As(goErr, &pe) || pe.Details[0].Pointer != c.Pointer {
			t.Errorf("%s: Send = %v, want a ParamsError at %s", c.Params, goErr, c.Pointer)
		}
	}
	if n := servertest.Count(t, b.pool, `SELECT count(*) FROM notify_notifications`); n != 3*good {
		t.Fatalf("%d notifications written, want the %d good sends", n, 3*good)
	}
}
