package httpapi

import (
	_ "embed"
	"net/http"
)

// openAPIDocument is the OpenAPI 3.1 description of the whole HTTP API: the
// routes of this package and the ones the daemon mounts (the inbox stream,
// /metrics, /riverui/). openapi_test.go checks it against the handlers: every
// route is documented, every documented route exists, every example and
// every response the tests provoke validates against its schema.
//
//go:embed openapi.json
var openAPIDocument []byte

// openAPI is GET /v1/openapi.json: the document, as embedded. It is public:
// it describes the API, not anybody's data.
func (s *Server) openAPI(w http.ResponseWriter, _ *http.Request) error {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(openAPIDocument)
	return nil
}
