package safehttp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/notifyd/notifyd/channels"
)

const (
	// MaxResponseBody is how much of a response body Deliver reads; the rest is
	// discarded with the connection.
	MaxResponseBody = 64 << 10
	// maxErrorBody is how much of the response body an error message quotes.
	maxErrorBody = 512
	// MaxRetryAfter caps a Retry-After header, so a receiver cannot park a
	// delivery for longer than a day at a time; retry.max_age still expires it.
	MaxRetryAfter = 24 * time.Hour
)

// Deliver sends req with client and classifies the outcome with the channels
// error kinds:
//
//   - 2xx: nil (delivered).
//   - 408 and 5xx: channels.Temporary, with Retry-After as RetryAfter when sent.
//   - 429: channels.RateLimited, with Retry-After as RetryAfter when sent.
//   - 410: channels.Gone.
//   - other 4xx: channels.Permanent.
//   - 3xx: channels.Permanent, "redirects are not followed" (a client from New
//     returns redirects instead of following them).
//   - a refused destination (ErrForbiddenAddress): channels.Permanent, with the
//     refusal's reason; no connection was made.
//   - timeouts, connection and TLS errors, and any other status: channels.Temporary.
//
// At most MaxResponseBody bytes of the response are read; an error quotes the
// start of the body. Every error message starts with dest, which names the
// destination for a log or the ledger's last_error; it is given separately
// because the request URL may carry a credential (a Slack webhook URL does): see
// Redact. The request URL itself is never quoted. now dates an HTTP-date
// Retry-After; nil means time.Now.
func Deliver(client *http.Client, req *http.Request, dest string, now func() time.Time) error {
	if now == nil {
		now = time.Now
	}
	resp, err := client.Do(req)
	if err != nil {
		return transportError(req.Context(), dest, err)
	}
	body, readErr := io.ReadAll(io.LimitReader(resp.Body, MaxResponseBody))
	resp.Body.Close()

	code := resp.StatusCode
	status := fmt.Sprintf("%s: HTTP %d", dest, code)
	if text := http.StatusText(code); text != "" {
		status += " " + text
	}
	switch {
	case code >= 200 && code < 300:
		// The receiver accepted the message; a failure to read the rest of its
		// answer does not undo that.
		return nil
	case code >= 300 && code < 400:
		err := fmt.Errorf("%s: redirects are not followed", status)
		if loc := resp.Header.Get("Location"); loc != "" {
			err = fmt.Errorf("%s: redirects are not followed (location %s)", status, quote([]byte(loc)))
		}
		return channels.Permanent(err)
	}
	if readErr != nil && len(body) == 0 {
		status += " (reading body: " + readErr.Error() + ")"
	}
	if q := quote(body); q != "" {
		status += ": " + q
	}
	err = errors.New(status)
	retryAfter := ParseRetryAfter(resp.Header.Get("Retry-After"), now())
	switch {
	case code == http.StatusTooManyRequests:
		return channels.RateLimited(err, retryAfter)
	case code == http.StatusRequestTimeout, code >= 500 && code < 600:
		return channels.Temporary(err, retryAfter)
	case code == http.StatusGone:
		return channels.Gone(err)
	case code >= 400 && code < 500:
		return channels.Permanent(err)
	default:
		return channels.Temporary(err, retryAfter)
	}
}

// transportError classifies an error from client.Do, which got no response.
func transportError(ctx context.Context, dest string, err error) error {
	// url.Error repeats the URL, which may hold a credential: keep what is inside.
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	var ae *AddressError
	if errors.As(err, &ae) {
		return channels.Permanent(fmt.Errorf("%s: %w", dest, ae))
	}
	if errors.Is(err, ErrForbiddenAddress) {
		return channels.Permanent(fmt.Errorf("%s: %w", dest, err))
	}
	if ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
		err = fmt.Errorf("%w: %w", ctx.Err(), err)
	}
	return channels.Temporary(fmt.Errorf("%s: %w", dest, err), 0)
}

// ParseRetryAfter reads a Retry-After header value: delay-seconds or an
// HTTP-date (dated against now). It returns 0 for an empty, invalid or past
// value, and at most MaxRetryAfter.
func ParseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	var d time.Duration
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs <= 0 {
			return 0
		}
		if secs > int64(MaxRetryAfter/time.Second) {
			return MaxRetryAfter
		}
		d = time.Duration(secs) * time.Second
	} else if t, err := http.ParseTime(v); err == nil {
		d = t.Sub(now)
	} else {
		return 0
	}
	return min(max(d, 0), MaxRetryAfter)
}

// quote returns the start of b as one line of valid UTF-8, for an error message.
func quote(b []byte) string {
	s := strings.Join(strings.Fields(strings.ToValidUTF8(string(b), "\uFFFD")), " ")
	if len(s) <= maxErrorBody {
		return s
	}
	cut := maxErrorBody
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// Redact returns u without its userinfo, query and fragment, and without its
// path unless keepPath, for error messages and logs: webhook URLs often carry a
// token in the query and Slack's carry one in the path.
func Redact(raw string, keepPath bool) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "(invalid url)"
	}
	r := url.URL{Scheme: u.Scheme, Host: u.Host}
	if keepPath {
		r.Path = u.Path
		r.RawPath = u.RawPath
	}
	return r.String()
}
