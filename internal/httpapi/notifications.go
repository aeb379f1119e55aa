package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/internal/metrics"
	"github.com/notifyd/notifyd/internal/wire"
	"github.com/notifyd/notifyd/stores"
)

// sendRequest is the body of POST /v1/notifications.
type sendRequest struct {
	Notifier string `json:"notifier"`
	Key      string `json:"key"`
	Actor    string `json:"actor"`
	// Each element is "id" or {"id","reason"}; decoded one by one so errors
	// can name the element.
	Recipients []json.RawMessage `json:"recipients"`
	Topics     []string          `json:"topics"`
	Params     json.RawMessage   `json:"params"`
	SendAt     *string           `json:"send_at"`
	Tenant     *string           `json:"tenant"`
}

type recipientObject struct {
	ID     string `json:"id"`
	Reason string `json:"reason"`
}

type sendResponse struct {
	ID        string `json:"id"`
	Duplicate bool   `json:"duplicate"`
}

// sendNotification is POST /v1/notifications: 202 for a new notification,
// 200 for a duplicate (notifier, key), with the first one's id.
func (s *Server) sendNotification(w http.ResponseWriter, r *http.Request) error {
	var req sendRequest
	if err := s.DecodeJSON(w, r, &req, false); err != nil {
		return err
	}
	if err := s.checkSendLimits(&req); err != nil {
		return err
	}
	n, err := req.notification()
	if err != nil {
		return err
	}
	if confined, _ := confinedTenant(r); confined != "" {
		// A tenant key sends for its tenant only: no tenant given is its
		// tenant, another one is refused.
		if n.Tenant != "" && n.Tenant != confined {
			return forbidden("this tenant key sends only for tenant %q", confined)
		}
		n.Tenant = confined
	} else if several := confinedTenants(r); len(several) > 0 && !slices.Contains(several, n.Tenant) {
		return forbidden("this credential sends only for tenants %s: name one in \"tenant\"", strings.Join(several, ", "))
	}
	var res notifyd.SendResult
	if r.Header.Get("X-Notifyd-Console") != "" && principalOf(r) != nil {
		// A test send from the console is audited, in its transaction.
		ctx := s.audit(r, AuditNotificationSend, n.Notifier+"/"+n.Key,
			map[string]any{"tenant": n.Tenant, "recipients": len(n.Recipients), "topics": n.Topics})
		err = s.auditTx(ctx, func(tx pgx.Tx) error {
			var err error
			res, err = s.client.SendTx(ctx, tx, n)
			return err
		})
	} else {
		// One statement in a transaction of its own (Client.Send): no BEGIN
		// and COMMIT round trips around it.
		res, err = s.client.Send(r.Context(), n)
	}
	if err != nil {
		return sendError(err)
	}
	status := http.StatusAccepted
	if res.Duplicate {
		status = http.StatusOK
	}
	wire.WriteJSON(w, status, sendResponse{ID: res.ID, Duplicate: res.Duplicate})
	return nil
}

// checkSendLimits refuses, before anything is decoded further, more topics
// than http.max_topics and a recipients array longer than rawRecipientsFactor
// times the notifier's max_recipients (duplicates included: they are only
// collapsed after sorting the whole array).
func (s *Server) checkSendLimits(req *sendRequest) error {
	if max := s.cfg.HTTP.MaxTopics; max > 0 && len(req.Topics) > max {
		s.metrics.Limited(metrics.LimitTopics)
		return &wire.Error{Status: http.StatusUnprocessableEntity, Code: CodeTooManyTopics,
			Message: fmt.Sprintf("%d topics, http.max_topics allows %d", len(req.Topics), max),
			Details: []any{wire.FieldDetail{Field: "topics", Message: fmt.Sprintf("at most %d", max)}}}
	}
	if nf, ok := s.cfg.Notifier(req.Notifier); ok && nf.MaxRecipients > 0 {
		if max := rawRecipientsFactor * nf.MaxRecipients; len(req.Recipients) > max {
			s.metrics.Limited(metrics.LimitRecipients)
			return &wire.Error{Status: http.StatusUnprocessableEntity, Code: wire.CodeTooManyRecipients,
				Message: fmt.Sprintf("%d recipients listed, notifier %s allows at most %d before duplicates are removed (%d times max_recipients)",
					len(req.Recipients), req.Notifier, max, rawRecipientsFactor),
				Details: []any{wire.FieldDetail{Field: "recipients", Message: fmt.Sprintf("at most %d elements", max)}}}
		}
	}
	return nil
}

func (req *sendRequest) notification() (notifyd.Notification, error) {
	n := notifyd.Notification{
		Notifier: req.Notifier,
		Key:      req.Key,
		Actor:    req.Actor,
		Topics:   req.Topics,
	}
	for i, raw := range req.Recipients {
		field := fmt.Sprintf("recipients[%d]", i)
		raw = bytes.TrimSpace(raw)
		switch {
		case len(raw) > 0 && raw[0] == '"':
			var id string
			if err := json.Unmarshal(raw, &id); err != nil {
				return n, fieldError(field, "%v", err)
			}
			n.Recipients = append(n.Recipients, notifyd.Recipient{ID: id})
		case len(raw) > 0 && raw[0] == '{':
			var obj recipientObject
			if err := decodeStrict(field, raw, &obj); err != nil {
				return n, err
			}
			n.Recipients = append(n.Recipients, notifyd.Recipient{ID: obj.ID, Reason: obj.Reason})
		default:
			return n, fieldError(field, `want a recipient id (string) or an object {"id", "reason"}`)
		}
	}
	if req.Tenant != nil {
		if err := notifyd.CheckTenantID("tenant", *req.Tenant); err != nil {
			// A malformed id is refused like an unknown one: 422 on tenant.
			return n, invalidField("tenant", err.(*notifyd.InputError).Message)
		}
		n.Tenant = *req.Tenant
	}
	params, err := decodeObject("params", req.Params)
	if err != nil {
		return n, err
	}
	n.Params = params
	if req.SendAt != nil && *req.SendAt != "" {
		t, err := time.Parse(time.RFC3339Nano, *req.SendAt)
		if err != nil {
			return n, fieldError("send_at", "want an RFC 3339 time such as 2030-01-02T15:04:05Z")
		}
		n.SendAt = t
	}
	return n, nil
}

// sendError maps what SendTx refuses to API errors. Nothing was written: the
// transaction rolled back.
func sendError(err error) error {
	var inputErr *notifyd.InputError
	var paramsErr *config.ParamsError
	switch {
	case errors.As(err, &inputErr):
		return &wire.Error{Status: http.StatusUnprocessableEntity, Code: wire.CodeInvalidRequest, Message: inputErr.Error(),
			Details: []any{wire.FieldDetail{Field: inputErr.Field, Message: inputErr.Message}}}
	case errors.Is(err, notifyd.ErrUnknownNotifier):
		return errorf(http.StatusNotFound, wire.CodeUnknownNotifier, "%v", err)
	case errors.Is(err, notifyd.ErrTooManyRecipients):
		return errorf(http.StatusUnprocessableEntity, wire.CodeTooManyRecipients, "%v", err)
	case errors.As(err, &paramsErr):
		details := make([]any, len(paramsErr.Details))
		for i, d := range paramsErr.Details {
			details[i] = d
		}
		return &wire.Error{Status: http.StatusUnprocessableEntity, Code: wire.CodeInvalidParams,
			Message: "params do not match the notifier's schema", Details: details}
	}
	return err
}

func (s *Server) getNotification(w http.ResponseWriter, r *http.Request) error {
	q, err := strictQuery(r, []string{"progress"}, nil)
	if err != nil {
		return err
	}
	progress, err := queryBool(q, "progress")
	if err != nil {
		return err
	}
	id := r.PathValue("id")
	n, err := readByID(r.Context(), s, id, func(ctx context.Context, db stores.DB, id string) (*stores.Notification, error) {
		return stores.GetNotification(ctx, db, id, maxDeliveries+1, s.reg.Inbox())
	})
	if errors.Is(err, stores.ErrNotFound) {
		return notFoundError("no notification %q", id)
	}
	if err != nil {
		return err
	}
	if err := inTenant(r, n.Tenant, "notification "+id); err != nil {
		return err
	}
	out := notificationWire(n, maxDeliveries)
	// The progress counts every row of the notification: only on request
	// (the console asks), so that polling a large notification stays cheap.
	if progress {
		p, err := stores.NotificationProgress(r.Context(), s.read(), id, s.reg.Inbox())
		if err != nil {
			return err
		}
		pw := progressWire(p)
		out.Progress = &pw
	}
	wire.WriteJSON(w, http.StatusOK, out)
	return nil
}

// cancelNotification is DELETE /v1/notifications/{notifier}/{key}: 200
// {"cancelled": n} with the number of deliveries and inbox items withdrawn
// (0 when it was already cancelled); 404 when it never existed.
func (s *Server) cancelNotification(w http.ResponseWriter, r *http.Request) error {
	notifier, key := r.PathValue("notifier"), r.PathValue("key")
	if err := checkPathText("key", key); err != nil {
		return err
	}
	if err := checkPathText("notifier", notifier); err != nil {
		return err
	}
	q, err := strictQuery(r, []string{"tenant"}, nil)
	if err != nil {
		return err
	}
	tenant := q.Get("tenant")
	if tenant != "" {
		if err := notifyd.CheckTenantID("tenant", tenant); err != nil {
			return fieldError("tenant", "%s", err.(*notifyd.InputError).Message)
		}
	}
	return s.cancel(w, r, tenant, notifier, key)
}

// cancel cancels the notification (notifier, key) sent for tenant ("" for
// none: keys are per tenant) and answers 200 {"cancelled": n}, or 404 when
// it never existed.
func (s *Server) cancel(w http.ResponseWriter, r *http.Request, tenant, notifier, key string) error {
	var n int
	ctx := s.audit(r, AuditNotificationCancel, notifier+"/"+key, map[string]string{"tenant": tenant})
	err := stores.RetryDeadlock(func() error {
		return s.auditTx(ctx, func(tx pgx.Tx) error {
			var err error
			n, err = s.client.CancelTenantTx(ctx, tx, tenant, notifier, key)
			return err
		})
	})
	if errors.Is(err, notifyd.ErrNotFound) {
		if tenant != "" {
			return notFoundError("no notification %s/%s of tenant %s", notifier, key, tenant)
		}
		return notFoundError("no notification %s/%s", notifier, key)
	}
	if err != nil {
		return err
	}
	wire.WriteJSON(w, http.StatusOK, map[string]int{"cancelled": n})
	return nil
}
