package devmode

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestCheckListen(t *testing.T) {
	t.Parallel()
	for addr, ok := range map[string]bool{
		"127.0.0.1:8080": true, "127.0.0.1:0": true, "[::1]:8080": true, "localhost:8080": true, "127.9.9.9:1": true,
		":8080": false, "0.0.0.0:8080": false, "[::]:8080": false, "192.168.1.5:8080": false, "example.test:8080": false,
		"10.0.0.1:80": false, "notalisten": false,
	} {
		err := CheckListen(addr)
		if ok && err != nil {
			t.Errorf("CheckListen(%q) = %v, want nil", addr, err)
		}
		if !ok && err == nil {
			t.Errorf("CheckListen(%q) = nil, want a refusal", addr)
		}
	}
}

// TestGuard: only loopback Host headers are answered, on every route
// (DNS rebinding), and /dev/ never carries CORS headers even when the API's
// CORS layer (allowed_origins: ["*"]) adds them.
func TestGuard(t *testing.T) {
	t.Parallel()
	reached := 0
	// Stands in for the daemon's handler with allowed_origins ["*"].
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Access-Control-Allow-Origin", "*")
		w.Header().Set("Access-Control-Expose-Headers", "WWW-Authenticate")
		if r.Method == http.MethodOptions {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		reached++
		_, _ = w.Write([]byte("captured email"))
	})
	h := Guard(api)
	tests := []struct {
		method, path, host string
		status             int
		cors               bool
	}{
		{"GET", "/dev/", "127.0.0.1:8080", 200, false},
		{"GET", "/dev/", "localhost:8080", 200, false},
		{"GET", "/dev/demo", "[::1]:8080", 200, false},
		{"OPTIONS", "/dev/send", "127.0.0.1:8080", 403, false},
		{"GET", "/v1/inbox", "127.0.0.1:8080", 200, true}, // the API keeps its configured CORS
		{"GET", "/dev/", "attacker.example:8080", 421, false},
		{"GET", "/dev/demo", "rebind.attacker.example", 421, false},
		{"GET", "/v1/inbox", "attacker.example", 421, false},
		{"POST", "/dev/send", "192.168.1.10:8080", 421, false},
		{"GET", "/dev/", "localhost.attacker.example", 421, false},
	}
	for _, tt := range tests {
		before := reached
		r := httptest.NewRequest(tt.method, "http://127.0.0.1"+tt.path, nil)
		r.Host = tt.host
		r.Header.Set("Origin", "https://attacker.example")
		r.Header.Set("Access-Control-Request-Method", "POST")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != tt.status {
			t.Errorf("%s %s Host %s = %d, want %d", tt.method, tt.path, tt.host, w.Code, tt.status)
		}
		hasCORS := false
		for k := range w.Header() {
			hasCORS = hasCORS || strings.HasPrefix(k, "Access-Control-")
		}
		if hasCORS != tt.cors {
			t.Errorf("%s %s Host %s: CORS headers %v, want %v (%v)", tt.method, tt.path, tt.host, hasCORS, tt.cors, w.Header())
		}
		if tt.status >= 400 && reached != before {
			t.Errorf("%s %s Host %s reached the handler", tt.method, tt.path, tt.host)
		}
	}
}
