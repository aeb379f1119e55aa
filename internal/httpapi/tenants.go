package httpapi

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/mail"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/jackc/pgx/v5"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/internal/metrics"
	"github.com/notifyd/notifyd/internal/wire"
	"github.com/notifyd/notifyd/stores"
)

// TenantKeyPrefix starts every tenant API key, so that the API tells a
// tenant key from the admin token without a database read.
const TenantKeyPrefix = "ntk_"

// accessKey is the context key of a request's access.
type accessKey struct{}

// access is what confines a request to tenants: a tenant API key, a
// recipient token's tenant claim, or an operator (or operator token)
// confined to a list of tenants.
type access struct {
	tenant  string            // the one tenant; "" for none or for several
	tenants []string          // an operator's tenants when there are several
	key     *stores.TenantKey // the tenant key used; nil otherwise
}

func withAccess(r *http.Request, a access) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), accessKey{}, a))
}

// confinedTenant is the tenant the request is confined to ("" for none),
// and whether a tenant key confines it (rather than a token's claim).
func confinedTenant(r *http.Request) (tenant string, byKey bool) {
	a, _ := r.Context().Value(accessKey{}).(access)
	return a.tenant, a.key != nil
}

// confinedTenants is every tenant the request is confined to: none (nil)
// when it is not confined.
func confinedTenants(r *http.Request) []string {
	a, _ := r.Context().Value(accessKey{}).(access)
	if a.tenant != "" {
		return []string{a.tenant}
	}
	return a.tenants
}

// forbidden is the 403 of a request confined to a tenant that reaches
// outside it.
func forbidden(format string, args ...any) *wire.Error {
	return errorf(http.StatusForbidden, wire.CodeForbidden, format, args...)
}

// requestTenant is the tenant a read is filtered by: the tenant the request
// is confined to, else ?tenant= (checked), else "" (every item). A request
// confined to one tenant that asks for another is a 403.
func requestTenant(r *http.Request, q url.Values) (string, error) {
	confined, _ := confinedTenant(r)
	asked, given := q["tenant"]
	several := confinedTenants(r)
	if !given {
		if confined == "" && len(several) > 0 {
			return "", forbidden("this credential reaches only tenants %s: name one with ?tenant=", strings.Join(several, ", "))
		}
		return confined, nil
	}
	t := ""
	if len(asked) > 0 {
		t = asked[0]
	}
	if err := notifyd.CheckTenantID("tenant", t); err != nil {
		return "", fieldError("tenant", "%s", err.(*notifyd.InputError).Message)
	}
	if confined != "" && t != confined {
		return "", forbidden("this credential reaches only tenant %q", confined)
	}
	if len(several) > 0 && !slices.Contains(several, t) {
		return "", forbidden("this credential reaches only tenants %s", strings.Join(several, ", "))
	}
	return t, nil
}

// inTenant refuses (403) a request confined to a tenant for an object of
// another tenant (or of none).
func inTenant(r *http.Request, objectTenant, what string) error {
	confined, _ := confinedTenant(r)
	if confined != "" && objectTenant != confined {
		return forbidden("%s is not of tenant %q, which this credential is confined to", what, confined)
	}
	if several := confinedTenants(r); len(several) > 0 && !slices.Contains(several, objectTenant) {
		return forbidden("%s is not of the tenants this credential is confined to (%s)", what, strings.Join(several, ", "))
	}
	return nil
}

// tenantKey authenticates the tenant key the request bears: a key that was
// never issued or is revoked is a 401.
func (s *Server) tenantKey(r *http.Request) (*stores.TenantKey, error) {
	tok, _ := bearer(r)
	k, err := stores.LookupTenantKey(r.Context(), s.pool, tok)
	if errors.Is(err, stores.ErrNotFound) {
		return nil, errorf(http.StatusUnauthorized, wire.CodeUnauthorized, "invalid tenant key")
	}
	if err != nil {
		return nil, err
	}
	if k.RevokedAt != nil {
		return nil, errorf(http.StatusUnauthorized, wire.CodeUnauthorized, "invalid tenant key: revoked at %s",
			k.RevokedAt.UTC().Format(time.RFC3339))
	}
	return k, nil
}

// bearsTenantKey reports whether the request's bearer token is shaped like
// a tenant key.
func bearsTenantKey(r *http.Request) bool {
	tok, ok := bearer(r)
	return ok && strings.HasPrefix(tok, TenantKeyPrefix)
}

// tenantOrAdmin is an admin endpoint a tenant key may call too: with a
// tenant key, h runs confined to the key's tenant (requestTenant, inTenant)
// under the key's own rate limit; with anything else it is s.admin(h).
func (s *Server) tenantOrAdmin(h handlerFunc) http.Handler {
	admin := s.admin(h)
	keyed := AdminPage(s.sameOrigin(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k, err := s.tenantKey(r)
		if err == nil {
			err = s.limitTenantKey(w, k)
		}
		if err == nil {
			err = h(w, withAccess(r, access{tenant: k.Tenant, key: k}))
		}
		if err != nil {
			wire.WriteError(w, r, err)
		}
	})))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if bearsTenantKey(r) {
			keyed.ServeHTTP(w, r)
			return
		}
		admin.ServeHTTP(w, r)
	})
}

// tenantLimits are the tenant keys' token buckets, by key id, each at its
// key's rate or http.rate.tenant_key.
type tenantLimits struct {
	mu sync.Mutex
	m  map[string]*rate.Limiter
}

// limitTenantKey spends one of k's tokens.
func (s *Server) limitTenantKey(w http.ResponseWriter, k *stores.TenantKey) error {
	perSecond, burst := s.cfg.HTTP.Rate.TenantKey, s.cfg.HTTP.Rate.TenantKeyBurst
	if k.Rate != nil {
		perSecond = *k.Rate
	}
	if k.Burst != nil {
		burst = *k.Burst
	}
	if perSecond <= 0 {
		return nil
	}
	s.tenantRate.mu.Lock()
	if s.tenantRate.m == nil || len(s.tenantRate.m) >= maxBuckets {
		s.tenantRate.m = map[string]*rate.Limiter{}
	}
	l := s.tenantRate.m[k.ID]
	if l == nil {
		l = rate.NewLimiter(rate.Limit(perSecond), max(burst, 1))
		s.tenantRate.m[k.ID] = l
	}
	s.tenantRate.mu.Unlock()
	now := time.Now()
	res := l.ReserveN(now, 1)
	if d := res.DelayFrom(now); d > 0 {
		res.CancelAt(now)
		s.metrics.Limited(metrics.LimitAdminRate)
		setting := "http.rate.tenant_key"
		if k.Rate != nil {
			setting = "the tenant key's rate"
		}
		return rateLimited(w, setting, d)
	}
	return nil
}

// tenantRequest is the body of PUT /v1/tenants/{id}.
type tenantRequest struct {
	Name        string             `json:"name"`
	Branding    *json.RawMessage   `json:"branding"`
	Preferences *[]json.RawMessage `json:"preferences"`
}

// tenantJSON is a tenant as the API shows it.
type tenantJSON struct {
	ID          string                `json:"id"`
	Name        string                `json:"name"`
	Branding    notifyd.Branding      `json:"branding"`
	Preferences []notifyd.Rule        `json:"preferences"`
	CreatedAt   time.Time             `json:"created_at"`
	UpdatedAt   time.Time             `json:"updated_at"`
	Keys        *[]tenantKeyJSON      `json:"keys,omitempty"`
	Erased      *stores.TenantErasure `json:"erased,omitempty"`
}

func tenantWire(t *stores.Tenant) (tenantJSON, error) {
	out := tenantJSON{ID: t.ID, Name: t.Name, Preferences: make([]notifyd.Rule, len(t.Preferences)),
		CreatedAt: t.CreatedAt.UTC(), UpdatedAt: t.UpdatedAt.UTC()}
	if err := json.Unmarshal(t.Branding, &out.Branding); err != nil {
		return out, fmt.Errorf("tenant %s: stored branding: %w", t.ID, err)
	}
	for i, p := range t.Preferences {
		out.Preferences[i] = notifyd.Rule{Scope: p.Scope, Channel: p.Channel, Mode: notifyd.Mode(p.Mode)}
	}
	return out, nil
}

var colorRE = regexp.MustCompile(`^#(?:[0-9a-fA-F]{3}|[0-9a-fA-F]{6})$`)

// checkBranding decodes and checks a tenant's branding: logo_url an http(s)
// URL, primary_color "#rgb" or "#rrggbb", email_from an email address
// ("Acme <no-reply@acme.test>" or a bare address).
func checkBranding(raw *json.RawMessage) (notifyd.Branding, error) {
	var b notifyd.Branding
	if raw == nil || string(bytes.TrimSpace(*raw)) == "null" {
		return b, nil
	}
	if err := decodeStrict("branding", *raw, &b); err != nil {
		return b, err
	}
	if b.LogoURL != "" {
		u, err := url.Parse(b.LogoURL)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || len(b.LogoURL) > 2048 {
			return b, unprocessable("branding.logo_url", "want an http or https URL of at most 2048 bytes")
		}
	}
	if b.PrimaryColor != "" && !colorRE.MatchString(b.PrimaryColor) {
		return b, unprocessable("branding.primary_color", `want "#rgb" or "#rrggbb"`)
	}
	if b.EmailFrom != "" {
		if _, err := mail.ParseAddress(b.EmailFrom); err != nil || len(b.EmailFrom) > 320 ||
			strings.ContainsAny(b.EmailFrom, "\r\n") {
			return b, unprocessable("branding.email_from", `want an email address ("Acme <no-reply@acme.test>")`)
		}
	}
	return b, nil
}

// unprocessable is a 422 invalid_request about one field.
func unprocessable(field, format string, args ...any) *wire.Error {
	msg := fmt.Sprintf(format, args...)
	return &wire.Error{Status: http.StatusUnprocessableEntity, Code: wire.CodeInvalidRequest, Message: field + ": " + msg,
		Details: []any{wire.FieldDetail{Field: field, Message: msg}}}
}

// tenantID reads and checks the {id} of a tenant route.
func tenantID(r *http.Request) (string, error) {
	id := r.PathValue("id")
	if err := notifyd.CheckTenantID("id", id); err != nil {
		return "", fieldError("id", "%s", err.(*notifyd.InputError).Message)
	}
	return id, nil
}

// putTenant is PUT /v1/tenants/{id}: creates (201) or replaces (200) the
// tenant's name, branding and default preference rules.
func (s *Server) putTenant(w http.ResponseWriter, r *http.Request) error {
	id, err := tenantID(r)
	if err != nil {
		return err
	}
	var req tenantRequest
	if err := s.DecodeJSON(w, r, &req, false); err != nil {
		return err
	}
	if len(req.Name) > 255 {
		return unprocessable("name", "longer than 255 bytes")
	}
	branding, err := checkBranding(req.Branding)
	if err != nil {
		return err
	}
	prefs := []json.RawMessage{}
	if req.Preferences != nil {
		prefs = *req.Preferences
	}
	for i, raw := range prefs {
		var probe map[string]json.RawMessage
		if json.Unmarshal(raw, &probe) == nil {
			if _, ok := probe["tenant"]; ok {
				return unprocessable(fmt.Sprintf("preferences[%d].tenant", i),
					"a tenant's default rules apply to its own notifications: leave tenant out")
			}
		}
	}
	rules, err := checkRules(s.reg, &prefs)
	if err != nil {
		var we *wire.Error
		if errors.As(err, &we) {
			// The rules are the tenant's "preferences".
			we.Message = strings.ReplaceAll(we.Message, "rules", "preferences")
			for i, d := range we.Details {
				if fd, ok := d.(wire.FieldDetail); ok {
					fd.Field = strings.Replace(fd.Field, "rules", "preferences", 1)
					we.Details[i] = fd
				}
			}
		}
		return err
	}
	b, err := json.Marshal(branding)
	if err != nil {
		return err
	}
	t := &stores.Tenant{ID: id, Name: req.Name, Branding: b, Preferences: make([]stores.PreferenceRule, len(rules))}
	for i, rule := range rules {
		t.Preferences[i] = stores.PreferenceRule{Scope: rule.Scope, Channel: rule.Channel, Mode: string(rule.Mode)}
	}
	var created bool
	ctx := s.audit(r, AuditTenantPut, id, map[string]any{"name": req.Name, "preferences": len(t.Preferences)})
	err = s.auditTx(ctx, func(tx pgx.Tx) error {
		var err error
		created, err = stores.PutTenant(ctx, tx, t)
		stores.AddAuditField(ctx, "created", created)
		return err
	})
	if err != nil {
		return err
	}
	out, err := tenantWire(t)
	if err != nil {
		return err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	wire.WriteJSON(w, status, out)
	return nil
}

// getTenant is GET /v1/tenants/{id}, with the tenant's keys (never a key's
// secret).
func (s *Server) getTenant(w http.ResponseWriter, r *http.Request) error {
	id, err := tenantID(r)
	if err != nil {
		return err
	}
	t, err := readByID(r.Context(), s, id, func(ctx context.Context, db stores.DB, id string) (*stores.Tenant, error) {
		return stores.GetTenant(ctx, db, id)
	})
	if errors.Is(err, stores.ErrNotFound) {
		return notFoundError("no tenant %q", id)
	}
	if err != nil {
		return err
	}
	out, err := tenantWire(t)
	if err != nil {
		return err
	}
	keys, err := stores.ListTenantKeys(r.Context(), s.pool, id)
	if err != nil {
		return err
	}
	kj := make([]tenantKeyJSON, len(keys))
	for i := range keys {
		kj[i] = tenantKeyWire(&keys[i])
	}
	out.Keys = &kj
	wire.WriteJSON(w, http.StatusOK, out)
	return nil
}

// tenantPageJSON is GET /v1/tenants.
type tenantPageJSON struct {
	Items      []tenantJSON `json:"items"`
	NextCursor *string      `json:"next_cursor"`
}

// listTenants is GET /v1/tenants: every tenant in id order, ?limit=1..200
// (default 50), ?cursor= the previous page's next_cursor.
func (s *Server) listTenants(w http.ResponseWriter, r *http.Request) error {
	q, err := strictQuery(r, []string{"cursor", "limit"}, nil)
	if err != nil {
		return err
	}
	limit, err := queryLimit(q, 50, 200)
	if err != nil {
		return err
	}
	after := ""
	if v := q.Get("cursor"); v != "" {
		b, err := base64.RawURLEncoding.DecodeString(v)
		if err != nil {
			return badCursor()
		}
		after = string(b)
	}
	ts, err := stores.ListTenants(r.Context(), s.read(), after, limit+1)
	if err != nil {
		return err
	}
	out := tenantPageJSON{Items: []tenantJSON{}}
	for i := range ts {
		if i == limit {
			c := base64.RawURLEncoding.EncodeToString([]byte(ts[i-1].ID))
			out.NextCursor = &c
			break
		}
		tj, err := tenantWire(&ts[i])
		if err != nil {
			return err
		}
		out.Items = append(out.Items, tj)
	}
	wire.WriteJSON(w, http.StatusOK, out)
	return nil
}

// deleteTenant is DELETE /v1/tenants/{id}: erases the tenant and what is
// scoped to it, in bounded batches (stores.EraseTenant), and answers 200
// {"id", "erased": {counts}}; 404 when nothing of the tenant existed. An
// erasure cut short (a crash, a timeout) is finished by deleting again.
func (s *Server) deleteTenant(w http.ResponseWriter, r *http.Request) error {
	id, err := tenantID(r)
	if err != nil {
		return err
	}
	if _, err := strictQuery(r, nil, nil); err != nil {
		return err
	}
	e, err := stores.EraseTenant(r.Context(), s.pool, id, 0)
	if err != nil {
		return err
	}
	if !e.Empty() {
		// The erasure runs in bounded batches, each its own transaction: its
		// audit row is written once it is complete.
		ctx := s.audit(r, AuditTenantErase, id, e)
		if err := s.auditTx(ctx, func(pgx.Tx) error { return nil }); err != nil {
			return err
		}
	}
	if e.Empty() {
		return notFoundError("no tenant %q", id)
	}
	s.logger.InfoContext(r.Context(), "tenant erased", "tenant", id, "inbox", e.Inbox, "deliveries", e.Deliveries,
		"notifications", e.Notifications, "preferences", e.Preferences, "keys", e.Keys)
	wire.WriteJSON(w, http.StatusOK, map[string]any{"id": id, "erased": e})
	return nil
}

// tenantKeyRequest is the body of POST /v1/tenants/{id}/keys (optional).
type tenantKeyRequest struct {
	Rate  *float64 `json:"rate"`
	Burst *int     `json:"burst"`
}

// tenantKeyJSON is a tenant key as listed: never the key itself.
type tenantKeyJSON struct {
	ID        string     `json:"id"`
	Tenant    string     `json:"tenant"`
	Rate      *float64   `json:"rate"`
	Burst     *int       `json:"burst"`
	CreatedAt time.Time  `json:"created_at"`
	RevokedAt *time.Time `json:"revoked_at"`
}

func tenantKeyWire(k *stores.TenantKey) tenantKeyJSON {
	out := tenantKeyJSON{ID: k.ID, Tenant: k.Tenant, Rate: k.Rate, Burst: k.Burst, CreatedAt: k.CreatedAt.UTC()}
	if k.RevokedAt != nil {
		t := k.RevokedAt.UTC()
		out.RevokedAt = &t
	}
	return out
}

// createdKeyJSON is what POST /v1/tenants/{id}/keys answers: the only time
// the key is ever shown.
type createdKeyJSON struct {
	tenantKeyJSON
	Key string `json:"key"`
}

// createTenantKey is POST /v1/tenants/{id}/keys: a new key for the tenant,
// 201 {"id", "key", ...}. Only the key's SHA-256 is stored: this answer is
// the only place the key appears.
func (s *Server) createTenantKey(w http.ResponseWriter, r *http.Request) error {
	id, err := tenantID(r)
	if err != nil {
		return err
	}
	var req tenantKeyRequest
	if err := s.DecodeJSON(w, r, &req, true); err != nil {
		return err
	}
	if req.Rate != nil && !(*req.Rate > 0) {
		return unprocessable("rate", "want requests per second above 0 (leave it out for http.rate.tenant_key)")
	}
	if req.Burst != nil && (*req.Burst < 1 || *req.Burst > math.MaxInt32) {
		// The column is an integer: a larger burst is refused here, not by
		// the database as an internal error.
		return unprocessable("burst", "want from 1 to 2147483647")
	}
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return err
	}
	key := TenantKeyPrefix + base64.RawURLEncoding.EncodeToString(raw[:])
	var k *stores.TenantKey
	ctx := s.audit(r, AuditTenantKeyCreate, id, map[string]any{"rate": req.Rate, "burst": req.Burst})
	err = s.auditTx(ctx, func(tx pgx.Tx) error {
		var err error
		if k, err = stores.CreateTenantKey(ctx, tx, id, key, req.Rate, req.Burst); err == nil {
			stores.AddAuditField(ctx, "key_id", k.ID)
		}
		return err
	})
	if errors.Is(err, stores.ErrNotFound) {
		return notFoundError("no tenant %q", id)
	}
	if err != nil {
		return err
	}
	wire.WriteJSON(w, http.StatusCreated, createdKeyJSON{tenantKeyJSON: tenantKeyWire(k), Key: key})
	return nil
}

// listTenantKeys is GET /v1/tenants/{id}/keys: the tenant's keys, revoked
// ones too, without their secrets.
func (s *Server) listTenantKeys(w http.ResponseWriter, r *http.Request) error {
	id, err := tenantID(r)
	if err != nil {
		return err
	}
	keys, err := stores.ListTenantKeys(r.Context(), s.pool, id)
	if err != nil {
		return err
	}
	out := make([]tenantKeyJSON, len(keys))
	for i := range keys {
		out[i] = tenantKeyWire(&keys[i])
	}
	wire.WriteJSON(w, http.StatusOK, map[string]any{"items": out})
	return nil
}

// revokeTenantKey is DELETE /v1/tenants/{id}/keys/{key_id}: the key stops
// working at once (every request reads its row). 204; 404 for a key the
// tenant does not have.
func (s *Server) revokeTenantKey(w http.ResponseWriter, r *http.Request) error {
	id, err := tenantID(r)
	if err != nil {
		return err
	}
	keyID := r.PathValue("key_id")
	ctx := s.audit(r, AuditTenantKeyRevoke, id+"/"+keyID, nil)
	err = s.auditTx(ctx, func(tx pgx.Tx) error { return stores.RevokeTenantKey(ctx, tx, id, keyID) })
	if errors.Is(err, stores.ErrNotFound) {
		return notFoundError("tenant %q has no key %q", id, keyID)
	}
	if err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// nonEmpty is s, or nil (JSON null) for "".
func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
