package httpapi_test

import (
	"testing"
	"time"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/internal/wire"
)

// tokens_valid_after revokes the tokens issued before it, on every recipient
// endpoint; an absent field keeps it, null clears it.
func TestTokensValidAfterRevokesOlderTokens(t *testing.T) {
	t.Parallel()
	b := setup(t)
	old, err := notifyd.RecipientTokenAt(tokenSecret, "u1", 2*time.Hour, fixedNow.Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	fresh := recipientToken(t, "u1") // issued at fixedNow, the server's clock
	expect(t, b.do(t, "PUT", "/v1/recipients/u1", adminToken, `{}`), 200, "")
	expect(t, b.do(t, "GET", "/v1/inbox/counts", old, nil), 200, "")

	cut := fixedNow.Add(-30 * time.Minute).UTC().Format(time.RFC3339)
	r := b.do(t, "PUT", "/v1/recipients/u1", adminToken, `{"tokens_valid_after":"`+cut+`"}`)
	expect(t, r, 200, "")
	if r.body["tokens_valid_after"] != cut {
		t.Fatalf("PUT answered tokens_valid_after %v, want %s: %s", r.body["tokens_valid_after"], cut, r.raw)
	}
	if got := b.do(t, "GET", "/v1/recipients/u1", adminToken, nil); got.body["tokens_valid_after"] != cut {
		t.Fatalf("GET: %s", got.raw)
	}
	for _, path := range []string{"/v1/inbox/counts", "/v1/inbox", "/v1/preferences"} {
		expect(t, b.do(t, "GET", path, old, nil), 401, wire.CodeUnauthorized)
		expect(t, b.do(t, "GET", path, fresh, nil), 200, "")
	}
	// A profile write without the field keeps the revocation.
	expect(t, b.do(t, "PUT", "/v1/recipients/u1", adminToken, `{"email":"u1@example.com"}`), 200, "")
	expect(t, b.do(t, "GET", "/v1/inbox/counts", old, nil), 401, wire.CodeUnauthorized)
	// Null clears it.
	r = b.do(t, "PUT", "/v1/recipients/u1", adminToken, `{"tokens_valid_after":null}`)
	expect(t, r, 200, "")
	if v, ok := r.body["tokens_valid_after"]; !ok || v != nil {
		t.Fatalf("after null: %s", r.raw)
	}
	expect(t, b.do(t, "GET", "/v1/inbox/counts", old, nil), 200, "")
	// Another recipient is not affected by u1's revocation.
	expect(t, b.do(t, "PUT", "/v1/recipients/u1", adminToken, `{"tokens_valid_after":"`+fixedNow.Add(time.Hour).Format(time.RFC3339)+`"}`), 200, "")
	expect(t, b.do(t, "GET", "/v1/inbox/counts", fresh, nil), 401, wire.CodeUnauthorized)
	expect(t, b.do(t, "GET", "/v1/inbox/counts", recipientToken(t, "u2"), nil), 200, "")
}
