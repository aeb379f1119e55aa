package httpapi

import (
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/notifyd/notifyd/internal/metrics"
	"github.com/notifyd/notifyd/internal/wire"
)

// CodeTooManyTopics is the code of a 422: a notification names more topics
// than http.max_topics.
const CodeTooManyTopics = "too_many_topics"

// rawRecipientsFactor bounds the recipients array of POST /v1/notifications
// before duplicates collapse: at most this many times the notifier's
// max_recipients elements, so that a body of a million copies of one id is
// refused before it is sorted and counted.
const rawRecipientsFactor = 10

// maxBuckets is how many recipients' buckets a replica keeps before it
// forgets the full ones (a full bucket is what a new one would be).
const maxBuckets = 10000

// buckets are token buckets by key (a recipient id), created full on first
// use. It is safe for concurrent use.
type buckets struct {
	limit rate.Limit
	burst int

	mu sync.Mutex
	m  map[string]*rate.Limiter
}

// newBuckets returns nil for an unlimited rate (perSecond 0).
func newBuckets(perSecond float64, burst int) *buckets {
	if perSecond <= 0 {
		return nil
	}
	if burst < 1 {
		burst = 1
	}
	return &buckets{limit: rate.Limit(perSecond), burst: burst, m: map[string]*rate.Limiter{}}
}

// take spends one token of key's bucket at now. When the bucket is empty it
// spends nothing and returns how long until a token is there.
func (b *buckets) take(key string, now time.Time) (ok bool, wait time.Duration) {
	if b == nil {
		return true, 0
	}
	b.mu.Lock()
	l := b.m[key]
	if l == nil {
		if len(b.m) >= maxBuckets {
			b.forgetFull(now)
		}
		l = rate.NewLimiter(b.limit, b.burst)
		b.m[key] = l
	}
	b.mu.Unlock()
	r := l.ReserveN(now, 1)
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return false, d
	}
	return true, 0
}

// forgetFull drops the buckets that have refilled: forgetting one changes
// nothing. Called with mu held.
func (b *buckets) forgetFull(now time.Time) {
	for k, l := range b.m {
		if l.TokensAt(now) >= float64(b.burst) {
			delete(b.m, k)
		}
	}
}

// rateLimited is the 429 for a bucket that is empty for wait: Retry-After is
// wait rounded up to whole seconds (at least 1).
func rateLimited(w http.ResponseWriter, setting string, wait time.Duration) error {
	secs := int(math.Ceil(wait.Seconds()))
	if secs < 1 {
		secs = 1
	}
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	msg := "too many requests: " + setting + " is exhausted; retry after " + strconv.Itoa(secs) + " s"
	return &wire.Error{Status: http.StatusTooManyRequests, Code: wire.CodeRateLimited, Message: msg,
		Details: []any{wire.FieldDetail{Field: setting, Message: "retry after " + strconv.Itoa(secs) + " s"}}}
}

// limitRecipient spends one of recipient's tokens.
func (s *Server) limitRecipient(w http.ResponseWriter, recipient string) error {
	if ok, wait := s.recipientRate.take(recipient, time.Now()); !ok {
		s.metrics.Limited(metrics.LimitRecipientRate)
		return rateLimited(w, "http.rate.recipient", wait)
	}
	return nil
}

// limitAdmin wraps h, behind the admin token, so that it spends one of the
// admin token's tokens.
func (s *Server) limitAdmin(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ok, wait := s.adminRate.take("", time.Now()); !ok {
			s.metrics.Limited(metrics.LimitAdminRate)
			wire.WriteError(w, r, rateLimited(w, "http.rate.admin", wait))
			return
		}
		h.ServeHTTP(w, r)
	})
}
