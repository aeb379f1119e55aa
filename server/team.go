package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/notifyd/notifyd/internal/httpapi"
	"github.com/notifyd/notifyd/stores"
)

// OperatorToken is an operator API token as `notifyd token list` and the
// admin API show it: never the token itself. Empty Tenants reach every
// tenant; a nil ExpiresAt never expires.
type OperatorToken struct {
	ID         string
	Name       string
	Role       string // viewer, operator or admin
	Tenants    []string
	CreatedBy  string
	CreatedAt  time.Time
	ExpiresAt  *time.Time
	LastUsedAt *time.Time
	RevokedAt  *time.Time
}

func operatorToken(t *stores.OperatorToken) OperatorToken {
	return OperatorToken{ID: t.ID, Name: t.Name, Role: t.Role, Tenants: t.Tenants, CreatedBy: t.CreatedBy,
		CreatedAt: t.CreatedAt, ExpiresAt: t.ExpiresAt, LastUsedAt: t.LastUsedAt, RevokedAt: t.RevokedAt}
}

// CreateOperatorToken makes an operator token with spec's name, role,
// tenants and expiry (spec's ID, CreatedAt, LastUsedAt and RevokedAt are
// ignored), created by createdBy ("cli:<user>"), and returns it with the
// token, which is shown nowhere else: only its SHA-256 is stored. An unknown
// role, a tenant that does not exist or an expiry in the past is an error
// and nothing is written.
func (s *Server) CreateOperatorToken(ctx context.Context, spec OperatorToken, createdBy string) (OperatorToken, string, error) {
	if _, ok := httpapi.ParseRole(spec.Role); !ok {
		return OperatorToken{}, "", fmt.Errorf("role %q: want one of %s", spec.Role, strings.Join(httpapi.Roles, ", "))
	}
	missing, err := stores.MissingTenants(ctx, s.pool, spec.Tenants)
	if err != nil {
		return OperatorToken{}, "", err
	}
	if len(missing) > 0 {
		return OperatorToken{}, "", fmt.Errorf("no tenant %s", strings.Join(missing, ", "))
	}
	if spec.ExpiresAt != nil && !spec.ExpiresAt.After(time.Now()) {
		return OperatorToken{}, "", errors.New("the expiry is not in the future")
	}
	tok, err := httpapi.NewOperatorToken()
	if err != nil {
		return OperatorToken{}, "", err
	}
	t := &stores.OperatorToken{Name: spec.Name, Role: spec.Role, Tenants: slices.Compact(slices.Sorted(slices.Values(spec.Tenants))),
		CreatedBy: createdBy, ExpiresAt: spec.ExpiresAt}
	ctx = AuditCLI(ctx, createdBy, "operator_token.create", "", map[string]any{"name": t.Name, "role": t.Role,
		"tenants": t.Tenants, "expires_at": t.ExpiresAt})
	if err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := stores.CreateOperatorToken(ctx, tx, t, tok); err != nil {
			return err
		}
		stores.AuditOf(ctx).Object = t.ID
		return stores.WriteAudit(ctx, tx)
	}); err != nil {
		return OperatorToken{}, "", err
	}
	return operatorToken(t), tok, nil
}

// ListOperatorTokens lists every operator token, revoked and expired ones
// too, oldest first.
func (s *Server) ListOperatorTokens(ctx context.Context) ([]OperatorToken, error) {
	toks, err := stores.ListOperatorTokens(ctx, s.pool)
	if err != nil {
		return nil, err
	}
	out := make([]OperatorToken, len(toks))
	for i := range toks {
		out[i] = operatorToken(&toks[i])
	}
	return out, nil
}

// RevokeOperatorToken revokes the token id at once, audited as by
// ("cli:<user>"); ErrNotFound when there is none. Revoking twice keeps the
// first time.
func (s *Server) RevokeOperatorToken(ctx context.Context, id, by string) (OperatorToken, error) {
	var t *stores.OperatorToken
	ctx = AuditCLI(ctx, by, "operator_token.revoke", id, nil)
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		if t, err = stores.RevokeOperatorToken(ctx, tx, id, time.Now()); err != nil {
			return err
		}
		return stores.WriteAudit(ctx, tx)
	})
	if errors.Is(err, stores.ErrNotFound) {
		return OperatorToken{}, fmt.Errorf("operator token %q: %w", id, ErrNotFound)
	}
	if err != nil {
		return OperatorToken{}, err
	}
	return operatorToken(t), nil
}

// AuditCLI returns ctx carrying the audit row of a change made from the
// command line by actor ("cli:<user>", actor_kind "cli"): the operation run
// with it (Redrive, RetryDeliveries, CreateOperatorToken,
// RevokeOperatorToken) writes the row in the change's own transaction. A
// zero summary is {}; it must hold no secret.
func AuditCLI(ctx context.Context, actor, action, object string, summary any) context.Context {
	e := &stores.AuditEntry{At: time.Now(), Actor: actor, ActorKind: "cli", Action: action, Object: object}
	if summary != nil {
		if b, err := json.Marshal(summary); err == nil {
			e.Summary = b
		}
	}
	return stores.WithAudit(ctx, e)
}
