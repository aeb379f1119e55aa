package config

import (
	"strings"
	"testing"
	"time"
)

// TestConfigRefusesWeakTokens: an admin token or token secret under 32
// bytes, or the two equal, is a config error naming the key; empty values
// (the side of the API turned off) and long distinct ones load.
func TestConfigRefusesWeakTokens(t *testing.T) {
	t.Parallel()
	long1, long2 := strings.Repeat("a", 32), strings.Repeat("b", 40)
	tests := []struct {
		name        string
		admin, sec  string
		wantKey     string // "" means the config loads
		wantMessage string
	}{
		{"both long and distinct", long1, long2, "", ""},
		{"both empty", "", "", "", ""},
		{"admin token of 31 bytes", long1[:31], long2, "http.admin_token", "at least 32 bytes"},
		{"token secret of 12 bytes", long1, "token-secret", "http.token_secret", "at least 32 bytes"},
		{"the two equal", long2, long2, "http.token_secret", "must differ from http.admin_token"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			src := "http: {admin_token: '" + tt.admin + "', token_secret: '" + tt.sec + "'}\n"
			_, err := Parse("test.yaml", []byte(src))
			if tt.wantKey == "" {
				if err != nil {
					t.Fatalf("config refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantKey+": ") || !strings.Contains(err.Error(), tt.wantMessage) {
				t.Fatalf("err = %v, want %s: ...%s", err, tt.wantKey, tt.wantMessage)
			}
			if tt.admin != "" && strings.Contains(err.Error(), tt.admin) || tt.sec != "" && strings.Contains(err.Error(), tt.sec) {
				t.Fatalf("the error quotes the secret: %v", err)
			}
		})
	}
}

// TestHTTPLimitKeys: the limits and timeouts have their documented
// defaults, can be set one by one, and are checked.
func TestHTTPLimitKeys(t *testing.T) {
	t.Parallel()
	def, err := Parse("test.yaml", []byte("{}\n"))
	if err != nil {
		t.Fatal(err)
	}
	h := def.HTTP
	if h.Rate != (Rate{Recipient: 20, RecipientBurst: 40, Admin: 200, AdminBurst: 400, TenantKey: 50, TenantKeyBurst: 100}) || h.MaxTopics != 100 ||
		h.MaxConnections != 1024 || h.MaxStreamsPerRecipient != 5 || h.MaxHeaderBytes != 64<<10 ||
		h.ReadHeaderTimeout.D() != 10*time.Second || h.ReadTimeout.D() != 30*time.Second ||
		h.WriteTimeout.D() != 30*time.Second || h.IdleTimeout.D() != 120*time.Second || h.MaxTokenTTL.D() != 24*time.Hour {
		t.Fatalf("defaults: %+v", h)
	}
	set, err := Parse("test.yaml", []byte("http: {rate: {recipient: 5}, max_topics: 3, idle_timeout: 5s, max_token_ttl: 1h}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if set.HTTP.Rate.Recipient != 5 || set.HTTP.Rate.RecipientBurst != 40 || set.HTTP.MaxTopics != 3 || set.HTTP.IdleTimeout.D() != 5*time.Second ||
		set.HTTP.MaxTokenTTL.D() != time.Hour {
		t.Fatalf("set: %+v", set.HTTP)
	}
	for src, want := range map[string]string{
		"http: {rate: {recipients: 5}}\n":        "http.rate.recipients",
		"http: {rate: {admin: -1}}\n":            "http.rate.admin",
		"http: {max_connections: 0}\n":           "http.max_connections",
		"http: {read_timeout: 0s}\n":             "http.read_timeout",
		"http: {max_streams_per_recipient: 0}\n": "http.max_streams_per_recipient",
		"http: {max_token_ttl: 0s}\n":            "http.max_token_ttl",
	} {
		if _, err := Parse("test.yaml", []byte(src)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err = %v, want one naming %s", src, err, want)
		}
	}
}

// A param named Tenant would be hidden by the tenant templates see as
// .Tenant: the config says so at the param.
func TestParamNamedTenant(t *testing.T) {
	t.Parallel()
	_, err := Parse("test.yaml", []byte(`
notifiers:
  invoice.paid:
    params: {type: object, properties: {Tenant: {type: string}}}
    channels:
      in_app: {title: "paid"}
`))
	if err == nil || !strings.Contains(err.Error(), "notifiers.invoice.paid.params.properties.Tenant: templates see the notification's tenant as .Tenant") {
		t.Fatalf("Parse = %v", err)
	}
}
