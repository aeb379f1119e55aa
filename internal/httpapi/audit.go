package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/notifyd/notifyd/internal/wire"
	"github.com/notifyd/notifyd/stores"
)

// Audit actions: what each audit row records.
const (
	AuditDeliveryRetry       = "delivery.retry"
	AuditDeliveriesRetry     = "deliveries.retry"
	AuditNotificationCancel  = "notification.cancel"
	AuditNotificationSend    = "notification.test_send"
	AuditRecipientErase      = "recipient.erase"
	AuditSuppressionAdd      = "suppression.add"
	AuditSuppressionRemove   = "suppression.remove"
	AuditTenantPut           = "tenant.put"
	AuditTenantErase         = "tenant.erase"
	AuditTenantKeyCreate     = "tenant_key.create"
	AuditTenantKeyRevoke     = "tenant_key.revoke"
	AuditOperatorPut         = "operator.put"
	AuditOperatorDelete      = "operator.delete"
	AuditOperatorTokenCreate = "operator_token.create"
	AuditOperatorTokenRevoke = "operator_token.revoke"
)

// audit returns r's context carrying the audit row of the change r makes:
// who (the request's principal), what (action on object, with summary:
// never a secret or a message body), when (the server's clock) and from
// where (the peer's address). The operation that makes the change writes
// it in its own transaction (stores.WriteAudit).
func (s *Server) audit(r *http.Request, action, object string, summary any) context.Context {
	e := &stores.AuditEntry{At: s.clock(), Action: action, Object: object, IP: peerIP(r)}
	if p := principalOf(r); p != nil {
		e.Actor, e.ActorKind = p.id, p.kind
	}
	if summary != nil {
		if b, err := json.Marshal(summary); err == nil {
			e.Summary = b
		}
	}
	return stores.WithAudit(r.Context(), e)
}

// auditTx runs fn in a transaction that also writes the audit row ctx
// carries (audit): both commit, or neither.
func (s *Server) auditTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := fn(tx); err != nil {
			return err
		}
		return stores.WriteAudit(ctx, tx)
	})
}

// peerIP is the address the request came from (the TCP peer: a proxy in
// front is what it records).
func peerIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// listAudit is GET /v1/audit?since=&actor=&action=&object=&cursor=&limit=:
// the audit log, oldest first, in keyset pages; with ?format=jsonl (or
// Accept: application/x-ndjson) every matching row as JSON lines, for
// export.
func (s *Server) listAudit(w http.ResponseWriter, r *http.Request) error {
	q, err := strictQuery(r, []string{"since", "actor", "action", "object", "cursor", "limit", "format"}, nil)
	if err != nil {
		return err
	}
	f := stores.AuditFilter{Actor: q.Get("actor"), Action: q.Get("action"), Object: q.Get("object"), After: q.Get("cursor"), Limit: 100}
	if f.Since, err = queryTime(q, "since"); err != nil {
		return err
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			return fieldError("limit", "want 1 to 1000")
		}
		f.Limit = n
	}
	jsonl := q.Get("format") == "jsonl" || r.Header.Get("Accept") == "application/x-ndjson"
	if v := q.Get("format"); v != "" && v != "jsonl" && v != "json" {
		return fieldError("format", "want json or jsonl")
	}
	if jsonl {
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.Header().Set("Content-Disposition", `attachment; filename="notifyd-audit.jsonl"`)
		enc := json.NewEncoder(w)
		f.Limit = 1000
		for first := true; ; first = false {
			rows, err := stores.ListAudit(r.Context(), s.pool, f)
			if err != nil {
				if first {
					return auditCursorError(err)
				}
				return nil // the answer has started: the client sees a short file
			}
			for i := range rows {
				if err := enc.Encode(auditWire(&rows[i])); err != nil {
					return nil
				}
			}
			if len(rows) < f.Limit {
				return nil
			}
			f.After = rows[len(rows)-1].ID
		}
	}
	rows, err := stores.ListAudit(r.Context(), s.pool, f)
	if err != nil {
		return auditCursorError(err)
	}
	var next *string
	if len(rows) == f.Limit {
		next = &rows[len(rows)-1].ID
	}
	items := make([]stores.AuditEntry, len(rows))
	for i := range rows {
		items[i] = auditWire(&rows[i])
	}
	wire.WriteJSON(w, http.StatusOK, map[string]any{"items": items, "next_cursor": next})
	return nil
}

func auditWire(e *stores.AuditEntry) stores.AuditEntry {
	out := *e
	out.At = e.At.UTC()
	return out
}

func auditCursorError(err error) error {
	if errors.Is(err, stores.ErrNotFound) {
		return fieldError("cursor", "is not an audit row id")
	}
	return err
}
