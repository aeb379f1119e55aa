package server_test

import (
	"strings"
	"testing"

	"github.com/notifyd/notifyd/config"
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
			_, err := config.Parse("test.yaml", []byte(src))
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
