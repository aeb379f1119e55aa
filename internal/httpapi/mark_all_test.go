package httpapi_test

import "testing"

// {"all": false} is refused, not read as "everything" (seen) or "nothing".
func TestMarkAllFalseIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tok := recipientToken(t, "u1")
	for _, path := range []string{"/v1/inbox/seen", "/v1/inbox/read"} {
		r := b.do(t, "POST", path, tok, map[string]any{"all": false})
		if r.status != 400 || r.errCode() != "bad_request" {
			t.Errorf("%s {all:false} = %d %s", path, r.status, r.raw)
		}
	}
	if r := b.do(t, "POST", "/v1/inbox/seen", tok, map[string]any{"all": true}); r.status != 200 {
		t.Errorf("seen {all:true} = %d %s", r.status, r.raw)
	}
}
