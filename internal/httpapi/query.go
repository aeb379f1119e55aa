package httpapi

import (
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/notifyd/notifyd/internal/wire"
)

// Query strings of the admin routes are parsed strictly, so that a client
// with a bug learns of it instead of getting an unfiltered answer: a query
// that does not parse (bad percent-encoding), a parameter the route does not
// take, a parameter given twice, and a value that is not UTF-8 text, holds a
// NUL byte or is too long are 400 bad_request
// naming the parameter, before the database sees anything. PostgreSQL's own
// error text never reaches a client.

// maxQueryValue is the longest value of an admin query parameter, as long as
// the longest id or key: 255 bytes.
const maxQueryValue = 255

// strictQuery parses r's query for a route that takes the parameters in
// params, each at most maxQueryValue bytes unless long names it with its own
// bound.
func strictQuery(r *http.Request, params []string, long map[string]int) (url.Values, error) {
	q, err := parseQuery(r)
	if err != nil {
		return nil, err
	}
	for _, name := range slices.Sorted(maps.Keys(q)) {
		vs := q[name]
		if !slices.Contains(params, name) {
			want := "takes no query parameters"
			if len(params) > 0 {
				want = "takes " + strings.Join(params, ", ")
			}
			return nil, fieldError(name, "unknown query parameter (%s %s)", r.URL.Path, want)
		}
		if len(vs) > 1 {
			return nil, fieldError(name, "given %d times: give it once", len(vs))
		}
		max := maxQueryValue
		if n, ok := long[name]; ok {
			max = n
		}
		if len(vs[0]) > max {
			return nil, fieldError(name, "longer than %d bytes", max)
		}
		if err := checkQueryText(name, vs[0]); err != nil {
			return nil, err
		}
	}
	return q, nil
}

// queryLimit reads ?limit=1..max, def when absent.
func queryLimit(q url.Values, def, max int) (int, error) {
	v := q.Get("limit")
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > max {
		return 0, fieldError("limit", "want an integer from 1 to %d", max)
	}
	return n, nil
}

// queryTime reads an RFC 3339 time; zero when absent.
func queryTime(q url.Values, name string) (time.Time, error) {
	v := q.Get(name)
	if v == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, fieldError(name, "want an RFC 3339 time such as 2030-01-02T15:04:05Z")
	}
	return t, nil
}

// queryBool reads ?name=true|false; false when absent.
func queryBool(q url.Values, name string) (bool, error) {
	switch q.Get(name) {
	case "", "false":
		return false, nil
	case "true":
		return true, nil
	}
	return false, fieldError(name, "want true or false")
}

// badCursor is the answer for a cursor this API did not issue.
func badCursor() error {
	return &wire.Error{Status: http.StatusBadRequest, Code: wire.CodeBadCursor, Message: "cursor was not issued by this API",
		Details: []any{wire.FieldDetail{Field: "cursor", Message: "pass next_cursor as it was returned"}}}
}
