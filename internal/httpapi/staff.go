package httpapi

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/internal/wire"
	"github.com/notifyd/notifyd/stores"
)

// Role is what an operator or an operator token may do on the admin API
// and in the console. Each role may do everything the one below it may.
type Role int

// The roles, weakest first. The zero Role is no role at all.
const (
	// RoleViewer reads the console and the admin read API.
	RoleViewer Role = iota + 1
	// RoleOperator also retries, cancels, sends (test) notifications and
	// manages suppressions.
	RoleOperator
	// RoleAdmin also erases recipients, writes profiles, subscriptions and
	// preferences, and manages tenants, tenant keys, operators and
	// operator tokens.
	RoleAdmin
)

// Roles are the role names, weakest first.
var Roles = []string{"viewer", "operator", "admin"}

// String is the role's name ("viewer", "operator", "admin").
func (r Role) String() string {
	if r < RoleViewer || r > RoleAdmin {
		return "none"
	}
	return Roles[r-1]
}

// ParseRole reads a role name; ok is false for anything but the three names.
func ParseRole(s string) (r Role, ok bool) {
	i := slices.Index(Roles, s)
	if i < 0 {
		return 0, false
	}
	return Role(i + 1), true
}

// OperatorTokenPrefix starts every operator token, so that the API tells one
// from the admin token and from a tenant key without a database read.
const OperatorTokenPrefix = "nto_"

// routeRule is what a route asks of the caller: at least need, and, for a
// caller confined to tenants, a route that acts on one tenant's objects at a
// time (the handler checks which with requestTenant and inTenant).
type routeRule struct {
	need    Role
	tenants bool
}

// routeRules is the access policy of every admin route, by the pattern it
// is mounted with. A route not listed here needs RoleAdmin and refuses a
// caller confined to tenants: a route added without a rule is closed, not
// open.
var routeRules = map[string]routeRule{
	"POST /v1/notifications":                            {RoleOperator, true},
	"GET /v1/notifications/{id}":                        {RoleViewer, true},
	"DELETE /v1/notifications/{notifier}/{key...}":      {RoleOperator, false},
	"PUT /v1/recipients/{id}":                           {RoleAdmin, false},
	"GET /v1/recipients/{id}":                           {RoleViewer, false},
	"GET /v1/recipients/{id}/inbox":                     {RoleViewer, false},
	"DELETE /v1/recipients/{id}":                        {RoleAdmin, false},
	"GET /v1/recipients/{id}/preferences":               {RoleViewer, true},
	"PUT /v1/recipients/{id}/preferences":               {RoleAdmin, false},
	"GET /v1/recipients/{id}/mutes":                     {RoleViewer, false},
	"PUT /v1/recipients/{id}/mutes":                     {RoleAdmin, false},
	"DELETE /v1/recipients/{id}/mutes":                  {RoleAdmin, false},
	"GET /v1/recipients/{id}/subscriptions":             {RoleViewer, false},
	"GET /v1/topics/{topic}/subscribers":                {RoleViewer, false},
	"PUT /v1/topics/{topic}/subscribers/{recipient}":    {RoleAdmin, false},
	"DELETE /v1/topics/{topic}/subscribers/{recipient}": {RoleAdmin, false},
	"GET /v1/tenants":                                   {RoleViewer, false},
	"PUT /v1/tenants/{id}":                              {RoleAdmin, false},
	"GET /v1/tenants/{id}":                              {RoleViewer, false},
	"DELETE /v1/tenants/{id}":                           {RoleAdmin, false},
	"POST /v1/tenants/{id}/keys":                        {RoleAdmin, false},
	"GET /v1/tenants/{id}/keys":                         {RoleAdmin, false},
	"DELETE /v1/tenants/{id}/keys/{key_id}":             {RoleAdmin, false},
	"GET /v1/notifications":                             {RoleViewer, true},
	"DELETE /v1/notifications/{id}":                     {RoleOperator, true},
	"GET /v1/deliveries":                                {RoleViewer, true},
	"POST /v1/deliveries/retry":                         {RoleOperator, true},
	"GET /v1/deliveries/{id}":                           {RoleViewer, true},
	"POST /v1/deliveries/{id}/retry":                    {RoleOperator, true},
	"GET /v1/deliveries/{id}/preview":                   {RoleViewer, true},
	"GET /v1/overview":                                  {RoleViewer, false},
	"GET /v1/recipients/{id}/deliveries":                {RoleViewer, false},
	"GET /v1/notifiers":                                 {RoleViewer, true},
	"GET /v1/notifiers/{notifier}/preview/{channel}":    {RoleViewer, true},
	"GET /v1/suppressions":                              {RoleViewer, false},
	"PUT /v1/suppressions/{channel}/{address}":          {RoleOperator, false},
	"DELETE /v1/suppressions/{channel}/{address}":       {RoleOperator, false},
	"POST /v1/bounces":                                  {RoleAdmin, false},
	"GET /v1/recipients/{id}/devices":                   {RoleViewer, false},
	"GET /v1/recipients/{id}/quiet-hours":               {RoleViewer, false},
	"PUT /v1/recipients/{id}/quiet-hours":               {RoleAdmin, false},
	"GET /v1/me":                                        {RoleViewer, true},
	"GET /v1/operators":                                 {RoleAdmin, false},
	"PUT /v1/operators/{id}":                            {RoleAdmin, false},
	"DELETE /v1/operators/{id}":                         {RoleAdmin, false},
	"POST /v1/operator-tokens":                          {RoleAdmin, false},
	"GET /v1/operator-tokens":                           {RoleAdmin, false},
	"DELETE /v1/operator-tokens/{id}":                   {RoleAdmin, false},
	"GET /v1/audit":                                     {RoleAdmin, false},
}

// Actor kinds: who made a request, as the audit log and GET /v1/me name it.
const (
	ActorAdminToken    = "admin_token"    // the config's http.admin_token (break-glass)
	ActorOperatorToken = "operator_token" // an operator token; the actor is its id
	ActorOperator      = "operator"       // a signed-in operator; the actor is their id
)

// principal is who an admin request is from: the config's admin token, an
// operator token or a signed-in operator, with what they may do.
type principal struct {
	kind    string // ActorAdminToken, ActorOperatorToken or ActorOperator
	id      string // the token's id, the operator's id, or "admin_token"
	role    Role
	tenants []string // empty: every tenant
}

type principalKey struct{}

// principalOf is the request's authenticated admin caller, nil for none.
func principalOf(r *http.Request) *principal {
	p, _ := r.Context().Value(principalKey{}).(*principal)
	return p
}

// authenticateStaff finds who an admin request is from. With no
// admin_token configured and no operator credential every request is
// refused: admin endpoints are disabled, never open.
func (s *Server) authenticateStaff(r *http.Request) (*principal, error) {
	got, ok := bearer(r)
	if !ok {
		if p, err := s.sessionPrincipal(r); p != nil || err != nil {
			return p, err
		}
		if s.cfg.HTTP.AdminToken == "" {
			return nil, errorf(http.StatusUnauthorized, wire.CodeUnauthorized,
				"missing admin credentials: send Authorization: Bearer <operator token> (http.admin_token is not set)")
		}
		return nil, errorf(http.StatusUnauthorized, wire.CodeUnauthorized, "missing admin credentials: send Authorization: Bearer <operator token or admin token> (River UI also takes it as the Basic-auth password)")
	}
	switch {
	case strings.HasPrefix(got, TenantKeyPrefix):
		// A valid tenant key is a credential of too little right here (403);
		// anything else shaped like one is no credential at all (401).
		if _, err := s.tenantKey(r); err != nil {
			return nil, err
		}
		return nil, forbidden("a tenant key may only send and read its own tenant's notifications, ledger and " +
			"recipients' preferences; this endpoint needs an operator token or the admin token")
	case strings.HasPrefix(got, OperatorTokenPrefix):
		return s.operatorToken(r.Context(), got)
	}
	want := s.cfg.HTTP.AdminToken
	if want == "" {
		return nil, errorf(http.StatusUnauthorized, wire.CodeUnauthorized, "invalid admin credentials (http.admin_token is not set)")
	}
	// Compare digests: constant time, and the length of the token does not
	// leak through an early return.
	g, wnt := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(want))
	if subtle.ConstantTimeCompare(g[:], wnt[:]) != 1 {
		return nil, errorf(http.StatusUnauthorized, wire.CodeUnauthorized, "invalid admin token")
	}
	s.breakGlass.Store(s.clock().UnixNano())
	return &principal{kind: ActorAdminToken, id: ActorAdminToken, role: RoleAdmin}, nil
}

// operatorToken authenticates an operator token and records its use.
func (s *Server) operatorToken(ctx context.Context, tok string) (*principal, error) {
	now := s.clock()
	t, err := stores.UseOperatorToken(ctx, s.pool, tok, now)
	if errors.Is(err, stores.ErrNotFound) {
		return nil, errorf(http.StatusUnauthorized, wire.CodeUnauthorized, "invalid operator token")
	}
	if err != nil {
		return nil, err
	}
	if t.RevokedAt != nil {
		return nil, errorf(http.StatusUnauthorized, wire.CodeUnauthorized, "invalid operator token: revoked at %s",
			t.RevokedAt.UTC().Format(time.RFC3339))
	}
	if t.ExpiresAt != nil && !now.Before(*t.ExpiresAt) {
		return nil, errorf(http.StatusUnauthorized, wire.CodeUnauthorized, "invalid operator token: expired at %s",
			t.ExpiresAt.UTC().Format(time.RFC3339))
	}
	role, _ := ParseRole(t.Role) // the table's check allows only the three
	return &principal{kind: ActorOperatorToken, id: t.ID, role: role, tenants: t.Tenants}, nil
}

// authorize checks p against the rule of the route r was routed to
// (r.Pattern) and returns r carrying p, and, for a caller confined to
// tenants, that confinement.
func authorize(r *http.Request, p *principal) (*http.Request, error) {
	rule, ok := routeRules[r.Pattern]
	if !ok {
		rule = routeRule{need: RoleAdmin}
	}
	if p.role < rule.need {
		return nil, forbidden("%s needs the role %s or above; this %s has the role %s", r.Pattern, rule.need, credentialName(p.kind), p.role)
	}
	ctx := context.WithValue(r.Context(), principalKey{}, p)
	if len(p.tenants) > 0 {
		if !rule.tenants {
			return nil, forbidden("this %s is confined to tenants %s, and %s reaches across tenants",
				credentialName(p.kind), strings.Join(p.tenants, ", "), r.Pattern)
		}
		a := access{tenants: p.tenants}
		if len(p.tenants) == 1 {
			a = access{tenant: p.tenants[0]}
		}
		ctx = context.WithValue(ctx, accessKey{}, a)
	}
	return r.WithContext(ctx), nil
}

func credentialName(kind string) string {
	switch kind {
	case ActorOperatorToken:
		return "operator token"
	case ActorOperator:
		return "operator"
	}
	return "admin token"
}

// breakGlassWarning is /readyz's warning while the config's admin token has
// been used since this replica started; "" when it has not.
func (s *Server) breakGlassWarning() string {
	at := s.breakGlass.Load()
	if at == 0 {
		return ""
	}
	return fmt.Sprintf("the config's admin token (http.admin_token, break-glass) was last used at %s: "+
		"give people operator accounts and scripts operator tokens (docs/team-access.md)",
		time.Unix(0, at).UTC().Format(time.RFC3339))
}

// meJSON is GET /v1/me: who the caller is and what they may do.
type meJSON struct {
	Actor      string   `json:"actor"`
	ActorKind  string   `json:"actor_kind"`
	Role       string   `json:"role"`
	Tenants    []string `json:"tenants"`
	BreakGlass bool     `json:"break_glass"`
}

// me is GET /v1/me: the console reads it to show the caller's role and to
// warn while the break-glass admin token is in use.
func (s *Server) me(w http.ResponseWriter, r *http.Request) error {
	p := principalOf(r)
	wire.WriteJSON(w, http.StatusOK, meJSON{Actor: p.id, ActorKind: p.kind, Role: p.role.String(),
		Tenants: nonNilStrings(p.tenants), BreakGlass: p.kind == ActorAdminToken})
	return nil
}

// operatorTokenRequest is the body of POST /v1/operator-tokens.
type operatorTokenRequest struct {
	Name      string     `json:"name"`
	Role      string     `json:"role"`
	Tenants   []string   `json:"tenants"`
	ExpiresAt *time.Time `json:"expires_at"`
}

// operatorTokenJSON is an operator token as listed: never the token itself.
type operatorTokenJSON struct {
	ID         string     `json:"id"`
	Name       string     `json:"name"`
	Role       string     `json:"role"`
	Tenants    []string   `json:"tenants"`
	CreatedBy  string     `json:"created_by"`
	CreatedAt  time.Time  `json:"created_at"`
	ExpiresAt  *time.Time `json:"expires_at"`
	LastUsedAt *time.Time `json:"last_used_at"`
	RevokedAt  *time.Time `json:"revoked_at"`
}

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

func operatorTokenWire(t *stores.OperatorToken) operatorTokenJSON {
	return operatorTokenJSON{ID: t.ID, Name: t.Name, Role: t.Role, Tenants: nonNilStrings(t.Tenants), CreatedBy: t.CreatedBy,
		CreatedAt: t.CreatedAt.UTC(), ExpiresAt: utcPtr(t.ExpiresAt), LastUsedAt: utcPtr(t.LastUsedAt), RevokedAt: utcPtr(t.RevokedAt)}
}

// createdOperatorTokenJSON is what POST /v1/operator-tokens answers: the
// only time the token is ever shown.
type createdOperatorTokenJSON struct {
	operatorTokenJSON
	Token string `json:"token"`
}

// actorName is how p is named where a token records who created it.
func actorName(p *principal) string {
	if p.kind == ActorAdminToken {
		return ActorAdminToken
	}
	return p.kind + ":" + p.id
}

// checkRoleAndTenants validates a role and a tenant list of a request body.
func (s *Server) checkRoleAndTenants(ctx context.Context, role string, tenants []string) error {
	if _, ok := ParseRole(role); !ok {
		return unprocessable("role", "want one of %s", strings.Join(Roles, ", "))
	}
	for i, t := range tenants {
		if err := notifyd.CheckTenantID(fmt.Sprintf("tenants[%d]", i), t); err != nil {
			return unprocessable(fmt.Sprintf("tenants[%d]", i), "%s", err.(*notifyd.InputError).Message)
		}
	}
	missing, err := stores.MissingTenants(ctx, s.pool, tenants)
	if err != nil {
		return err
	}
	if len(missing) > 0 {
		return unprocessable("tenants", "no tenant %s (PUT /v1/tenants/{id} creates one)", strings.Join(missing, ", "))
	}
	return nil
}

// NewOperatorToken returns a new random operator token.
func NewOperatorToken() (string, error) {
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", err
	}
	return OperatorTokenPrefix + base64.RawURLEncoding.EncodeToString(raw[:]), nil
}

// createOperatorToken is POST /v1/operator-tokens: 201 with the token, the
// only time it is shown; only its SHA-256 is stored.
func (s *Server) createOperatorToken(w http.ResponseWriter, r *http.Request) error {
	var req operatorTokenRequest
	if err := s.DecodeJSON(w, r, &req, false); err != nil {
		return err
	}
	if err := s.checkRoleAndTenants(r.Context(), req.Role, req.Tenants); err != nil {
		return err
	}
	if req.ExpiresAt != nil && !req.ExpiresAt.After(s.clock()) {
		return unprocessable("expires_at", "is not in the future")
	}
	if len(req.Name) > 200 {
		return unprocessable("name", "is longer than 200 bytes")
	}
	tok, err := NewOperatorToken()
	if err != nil {
		return err
	}
	t := &stores.OperatorToken{Name: req.Name, Role: req.Role, Tenants: slices.Compact(slices.Sorted(slices.Values(req.Tenants))),
		CreatedBy: actorName(principalOf(r)), ExpiresAt: req.ExpiresAt}
	ctx := s.audit(r, AuditOperatorTokenCreate, "", map[string]any{"name": t.Name, "role": t.Role, "tenants": t.Tenants,
		"expires_at": t.ExpiresAt})
	if err := s.auditTx(ctx, func(tx pgx.Tx) error {
		if err := stores.CreateOperatorToken(ctx, tx, t, tok); err != nil {
			return err
		}
		stores.AuditOf(ctx).Object = t.ID
		return nil
	}); err != nil {
		return err
	}
	wire.WriteJSON(w, http.StatusCreated, createdOperatorTokenJSON{operatorTokenJSON: operatorTokenWire(t), Token: tok})
	return nil
}

// listOperatorTokens is GET /v1/operator-tokens: every token, revoked and
// expired ones too, without the tokens themselves.
func (s *Server) listOperatorTokens(w http.ResponseWriter, r *http.Request) error {
	if _, err := strictQuery(r, nil, nil); err != nil {
		return err
	}
	toks, err := stores.ListOperatorTokens(r.Context(), s.pool)
	if err != nil {
		return err
	}
	out := make([]operatorTokenJSON, len(toks))
	for i := range toks {
		out[i] = operatorTokenWire(&toks[i])
	}
	wire.WriteJSON(w, http.StatusOK, map[string]any{"items": out})
	return nil
}

// revokeOperatorToken is DELETE /v1/operator-tokens/{id}: the token stops
// working at once (every request reads its row); 200 with the token.
func (s *Server) revokeOperatorToken(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	var t *stores.OperatorToken
	ctx := s.audit(r, AuditOperatorTokenRevoke, id, nil)
	err := s.auditTx(ctx, func(tx pgx.Tx) error {
		var err error
		t, err = stores.RevokeOperatorToken(ctx, tx, id, s.clock())
		return err
	})
	if errors.Is(err, stores.ErrNotFound) {
		return notFoundError("no operator token %q", id)
	}
	if err != nil {
		return err
	}
	wire.WriteJSON(w, http.StatusOK, operatorTokenWire(t))
	return nil
}

// operatorRequest is the body of PUT /v1/operators/{id}.
type operatorRequest struct {
	Name    string   `json:"name"`
	Role    string   `json:"role"`
	Tenants []string `json:"tenants"`
}

// operatorJSON is an operator as the API shows them.
type operatorJSON struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	Role      string    `json:"role"`
	Tenants   []string  `json:"tenants"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

func operatorWire(o *stores.Operator) operatorJSON {
	return operatorJSON{ID: o.ID, Name: o.Name, Role: o.Role, Tenants: nonNilStrings(o.Tenants),
		CreatedAt: o.CreatedAt.UTC(), UpdatedAt: o.UpdatedAt.UTC()}
}

// operatorID is the {id} of an operator route: the sign-in identity.
func operatorID(r *http.Request) (string, error) {
	id := r.PathValue("id")
	if err := checkPathText("id", id); err != nil {
		return "", err
	}
	if len(id) > 320 {
		return "", fieldError("id", "is longer than 320 bytes")
	}
	return id, nil
}

// putOperator is PUT /v1/operators/{id}: creates (201) or replaces (200)
// the operator whose sign-in identity is id.
func (s *Server) putOperator(w http.ResponseWriter, r *http.Request) error {
	id, err := operatorID(r)
	if err != nil {
		return err
	}
	var req operatorRequest
	if err := s.DecodeJSON(w, r, &req, false); err != nil {
		return err
	}
	if err := s.checkRoleAndTenants(r.Context(), req.Role, req.Tenants); err != nil {
		return err
	}
	o := &stores.Operator{ID: id, Name: req.Name, Role: req.Role, Tenants: slices.Compact(slices.Sorted(slices.Values(req.Tenants)))}
	var created bool
	ctx := s.audit(r, AuditOperatorPut, id, map[string]any{"role": o.Role, "tenants": o.Tenants})
	err = s.auditTx(ctx, func(tx pgx.Tx) error {
		if before, err := stores.GetOperator(ctx, tx, id); err == nil {
			stores.AddAuditField(ctx, "before", map[string]any{"role": before.Role, "tenants": before.Tenants})
		}
		var err error
		created, err = stores.PutOperator(ctx, tx, o)
		return err
	})
	if err != nil {
		return err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	wire.WriteJSON(w, status, operatorWire(o))
	return nil
}

// listOperators is GET /v1/operators.
func (s *Server) listOperators(w http.ResponseWriter, r *http.Request) error {
	if _, err := strictQuery(r, nil, nil); err != nil {
		return err
	}
	ops, err := stores.ListOperators(r.Context(), s.pool)
	if err != nil {
		return err
	}
	out := make([]operatorJSON, len(ops))
	for i := range ops {
		out[i] = operatorWire(&ops[i])
	}
	wire.WriteJSON(w, http.StatusOK, map[string]any{"items": out})
	return nil
}

// deleteOperator is DELETE /v1/operators/{id}: 204; the operator can no
// longer sign in.
func (s *Server) deleteOperator(w http.ResponseWriter, r *http.Request) error {
	id, err := operatorID(r)
	if err != nil {
		return err
	}
	ctx := s.audit(r, AuditOperatorDelete, id, nil)
	if err := s.auditTx(ctx, func(tx pgx.Tx) error { return stores.DeleteOperator(ctx, tx, id) }); errors.Is(err, stores.ErrNotFound) {
		return notFoundError("no operator %q", id)
	} else if err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// deliveryInTenant refuses (403) a request confined to tenants for a
// delivery of another tenant; 404 for no such delivery. It reads nothing
// for a request that is not confined.
func (s *Server) deliveryInTenant(r *http.Request, id string) error {
	if len(confinedTenants(r)) == 0 {
		return nil
	}
	d, err := stores.GetDelivery(r.Context(), s.pool, id)
	if errors.Is(err, stores.ErrNotFound) {
		return notFoundError("no delivery %q", id)
	}
	if err != nil {
		return err
	}
	return inTenant(r, d.Tenant, "delivery "+id)
}
