package email

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"
)

// awsCredentials sign requests to an AWS API with Signature Version 4.
type awsCredentials struct {
	AccessKeyID, SecretAccessKey, SessionToken string
}

// signV4 signs req, whose body is body, for service in region at now, as
// AWS documents Signature Version 4 ("Create a signed AWS API request"): it
// sets X-Amz-Date (and X-Amz-Security-Token for temporary credentials) and
// Authorization. Every header already on req is signed, with Host.
func signV4(req *http.Request, body []byte, c awsCredentials, region, service string, now time.Time) {
	signV4With(req, body, c, region, service, now, nil)
}

// signV4With is signV4 taking the signing key of a day from keyFor (nil:
// derived here).
func signV4With(req *http.Request, body []byte, c awsCredentials, region, service string, now time.Time, keyFor func(day string) []byte) {
	now = now.UTC()
	amzDate := now.Format("20060102T150405Z")
	day := now.Format("20060102")
	req.Header.Set("X-Amz-Date", amzDate)
	if c.SessionToken != "" {
		req.Header.Set("X-Amz-Security-Token", c.SessionToken)
	}
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	headers := map[string]string{"host": host}
	for k, vs := range req.Header {
		if strings.EqualFold(k, "Authorization") {
			continue
		}
		trimmed := make([]string, len(vs))
		for i, v := range vs {
			trimmed[i] = strings.Join(strings.Fields(v), " ")
		}
		headers[strings.ToLower(k)] = strings.Join(trimmed, ",")
	}
	names := make([]string, 0, len(headers))
	for k := range headers {
		names = append(names, k)
	}
	slices.Sort(names)
	var canonHeaders strings.Builder
	for _, k := range names {
		canonHeaders.WriteString(k + ":" + headers[k] + "\n")
	}
	signed := strings.Join(names, ";")
	payload := sha256.Sum256(body)
	canonical := strings.Join([]string{
		req.Method,
		canonicalPath(req.URL),
		canonicalQuery(req.URL),
		canonHeaders.String(),
		signed,
		hex.EncodeToString(payload[:]),
	}, "\n")
	scope := day + "/" + region + "/" + service + "/aws4_request"
	hashed := sha256.Sum256([]byte(canonical))
	toSign := "AWS4-HMAC-SHA256\n" + amzDate + "\n" + scope + "\n" + hex.EncodeToString(hashed[:])
	var key []byte
	if keyFor != nil {
		key = keyFor(day)
	} else {
		key = signingKey(c.SecretAccessKey, day, region, service)
	}
	sig := hex.EncodeToString(hmacSHA256(key, toSign))
	req.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential="+c.AccessKeyID+"/"+scope+
		", SignedHeaders="+signed+", Signature="+sig)
}

// signingKey is the key of day's requests to service in region, derived
// from the secret.
func signingKey(secret, day, region, service string) []byte {
	key := hmacSHA256([]byte("AWS4"+secret), day)
	key = hmacSHA256(key, region)
	key = hmacSHA256(key, service)
	return hmacSHA256(key, "aws4_request")
}

// sigV4Signer signs requests for one service and region, keeping the day's
// signing key: four HMACs a message fewer.
type sigV4Signer struct {
	creds           awsCredentials
	region, service string

	mu  sync.Mutex
	day string
	key []byte
}

func newSigV4Signer(c awsCredentials, region, service string) *sigV4Signer {
	return &sigV4Signer{creds: c, region: region, service: service}
}

// sign signs req, whose body is body, at now (see signV4).
func (s *sigV4Signer) sign(req *http.Request, body []byte, now time.Time) {
	signV4With(req, body, s.creds, s.region, s.service, now, s.keyFor)
}

func (s *sigV4Signer) keyFor(day string) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.day != day {
		s.day, s.key = day, signingKey(s.creds.SecretAccessKey, day, s.region, s.service)
	}
	return s.key
}

func hmacSHA256(key []byte, data string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(data))
	return h.Sum(nil)
}

// canonicalPath is the URI-encoded path (each segment encoded once, as
// every service but S3 wants it encoded again: the escaped path is encoded
// a second time), "/" when empty.
func canonicalPath(u *url.URL) string {
	p := u.EscapedPath()
	if p == "" {
		return "/"
	}
	segs := strings.Split(p, "/")
	for i, s := range segs {
		segs[i] = awsEscape(s)
	}
	return strings.Join(segs, "/")
}

// canonicalQuery is the query's parameters sorted by name then value, each
// URI-encoded.
func canonicalQuery(u *url.URL) string {
	q := u.Query()
	var pairs []string
	for k, vs := range q {
		for _, v := range vs {
			pairs = append(pairs, awsEscape(k)+"="+awsEscape(v))
		}
	}
	slices.Sort(pairs)
	return strings.Join(pairs, "&")
}

// awsEscape encodes every byte but the unreserved characters of RFC 3986.
func awsEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.' || c == '~' {
			b.WriteByte(c)
			continue
		}
		b.WriteString("%" + strings.ToUpper(hex.EncodeToString([]byte{c})))
	}
	return b.String()
}
