package server

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

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
	if err := stores.CreateOperatorToken(ctx, s.pool, t, tok); err != nil {
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

// RevokeOperatorToken revokes the token id at once; ErrNotFound when there
// is none. Revoking twice keeps the first time.
func (s *Server) RevokeOperatorToken(ctx context.Context, id string) (OperatorToken, error) {
	t, err := stores.RevokeOperatorToken(ctx, s.pool, id, time.Now())
	if errors.Is(err, stores.ErrNotFound) {
		return OperatorToken{}, fmt.Errorf("operator token %q: %w", id, ErrNotFound)
	}
	if err != nil {
		return OperatorToken{}, err
	}
	return operatorToken(t), nil
}
