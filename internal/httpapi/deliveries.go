package httpapi

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/internal/wire"
	"github.com/notifyd/notifyd/notifytype"
	"github.com/notifyd/notifyd/stores"
	"github.com/notifyd/notifyd/stores/uuidv7"
	"github.com/notifyd/notifyd/templates"
)

// The deliveries across notifications (the console's deliveries view), their
// bulk retry, a delivery's rendered message, and the overview.

// Error codes of these routes.
const (
	// CodeCircuitOpen (409): a retried delivery's target is paused by its
	// circuit breaker; retry with {"close_circuit": true} to close it first.
	CodeCircuitOpen = "circuit_open"
	// CodeConfirmMismatch (409): a DELETE by id whose notifier and key do
	// not name the object the id names.
	CodeConfirmMismatch = "confirm_mismatch"
)

// deliveryStatuses are the statuses a delivery filter may name.
var deliveryStatuses = []notifytype.DeliveryStatus{
	notifytype.StatusPending, notifytype.StatusSending, notifytype.StatusFailed, notifytype.StatusRateLimited,
	notifytype.StatusSent, notifytype.StatusRefused, notifytype.StatusExpired, notifytype.StatusUnavailable,
	notifytype.StatusSkipped, notifytype.StatusCancelled, notifytype.StatusDigestPending, notifytype.StatusDigestSending,
	notifytype.StatusDigestSent, notifytype.StatusDigestFailed, notifytype.StatusDigestDropped, notifytype.StatusScheduled,
	notifytype.StatusBatched, notifytype.StatusThrottled, notifytype.StatusSuppressed,
	notifytype.StatusDelivered, notifytype.StatusBounced, notifytype.StatusComplained,
}

// deliveryFilterParams are the query parameters of a delivery filter.
var deliveryFilterParams = []string{"status", "channel", "notifier", "recipient", "tenant", "since", "until"}

// maxRetryLimit is the most deliveries one POST /v1/deliveries/retry
// re-drives, and its default.
const maxRetryLimit = 10000

// deliveryFilter reads the filter of GET /v1/deliveries and POST
// /v1/deliveries/retry from q.
func deliveryFilter(r *http.Request, db stores.DB, q url.Values) (stores.DeliveryFilter, error) {
	f := stores.DeliveryFilter{Channel: q.Get("channel"), Notifier: q.Get("notifier"), Recipient: q.Get("recipient")}
	if v := q.Get("status"); v != "" {
		for _, s := range strings.Split(v, ",") {
			s = strings.TrimSpace(s)
			if !slices.Contains(deliveryStatuses, notifytype.DeliveryStatus(s)) {
				return f, fieldError("status", "unknown delivery status %s (want a comma list of %s)", quote(s), statusList())
			}
			if !slices.Contains(f.Statuses, s) {
				f.Statuses = append(f.Statuses, s)
			}
		}
	}
	var err error
	// A tenant key reads its own tenant's ledger only.
	if f.Tenant, err = requestTenant(r, q); err != nil {
		return f, err
	}
	if confined, _ := confinedTenant(r); f.Tenant != "" && confined == "" {
		// A filter that would silently match nothing is refused instead.
		if _, err := stores.GetTenant(r.Context(), db, f.Tenant); errors.Is(err, stores.ErrNotFound) {
			return f, fieldError("tenant", "no tenant %q (GET /v1/tenants lists them)", f.Tenant)
		} else if err != nil {
			return f, err
		}
	}
	if f.Since, err = queryTime(q, "since"); err != nil {
		return f, err
	}
	if f.Until, err = queryTime(q, "until"); err != nil {
		return f, err
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Since.Before(f.Until) {
		return f, fieldError("until", "must be after since")
	}
	return f, nil
}

func statusList() string {
	names := make([]string, len(deliveryStatuses))
	for i, s := range deliveryStatuses {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}

// deliveryPageJSON is GET /v1/deliveries.
type deliveryPageJSON struct {
	Items      []deliveryDetailJSON `json:"items"`
	NextCursor *string              `json:"next_cursor"`
}

// listDeliveries is GET /v1/deliveries: deliveries across notifications,
// newest change first, filtered, in keyset pages. Every item has
// failed_attempts [] (GET /v1/deliveries/{id} reads them).
func (s *Server) listDeliveries(w http.ResponseWriter, r *http.Request) error {
	q, err := strictQuery(r, append([]string{"cursor", "limit"}, deliveryFilterParams...), nil)
	if err != nil {
		return err
	}
	f, err := deliveryFilter(r, s.read(), q)
	if err != nil {
		return err
	}
	limit, err := queryLimit(q, 50, 200)
	if err != nil {
		return err
	}
	var after *stores.DeliveryCursor
	if v := q.Get("cursor"); v != "" {
		if after = decodeDeliveryCursor(v); after == nil {
			return badCursor()
		}
	}
	page, err := stores.ListDeliveries(r.Context(), s.read(), f, after, limit)
	if err != nil {
		return err
	}
	out := deliveryPageJSON{Items: make([]deliveryDetailJSON, len(page.Items))}
	for i := range page.Items {
		out.Items[i] = deliveryDetailWire(&page.Items[i])
	}
	if page.Next != nil {
		c := encodeDeliveryCursor(*page.Next)
		out.NextCursor = &c
	}
	wire.WriteJSON(w, http.StatusOK, out)
	return nil
}

// A deliveries cursor is base64url (no padding) of "<updated_at in unix
// microseconds>.<delivery id>".
func encodeDeliveryCursor(c stores.DeliveryCursor) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(c.UpdatedAt.UnixMicro(), 10) + "." + c.ID))
}

func decodeDeliveryCursor(s string) *stores.DeliveryCursor {
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return nil
	}
	t, id, ok := strings.Cut(string(raw), ".")
	if !ok || !uuidv7.Valid(id) {
		return nil
	}
	us, err := strconv.ParseInt(t, 10, 64)
	if err != nil {
		return nil
	}
	return &stores.DeliveryCursor{UpdatedAt: time.UnixMicro(us).UTC(), ID: id}
}

// retryDeliveriesJSON is POST /v1/deliveries/retry's answer.
type retryDeliveriesJSON struct {
	Matched int `json:"matched"`
	Retried int `json:"retried"`
}

// retryDeliveries is POST /v1/deliveries/retry?<filter>&limit=: every
// matching failed or expired delivery (or the re-drivable statuses the
// filter names) becomes due now with a send job. The filter is the query of
// GET /v1/deliveries, so the console posts what it lists; since is required,
// so that a bulk retry is always bounded in time. 200 {"matched","retried"}.
// With dry_run=true it only counts the matches (retried 0): what the
// console's confirmation shows.
func (s *Server) retryDeliveries(w http.ResponseWriter, r *http.Request) error {
	if s.ops == nil {
		return errorf(http.StatusServiceUnavailable, wire.CodeNotReady, "retries are run by the daemon, and this API has none")
	}
	q, err := strictQuery(r, append([]string{"limit", "dry_run"}, deliveryFilterParams...), nil)
	if err != nil {
		return err
	}
	dryRun, err := queryBool(q, "dry_run")
	if err != nil {
		return err
	}
	if err := s.emptyBody(w, r); err != nil {
		return err
	}
	f, err := deliveryFilter(r, s.read(), q)
	if err != nil {
		return err
	}
	if f.Since.IsZero() {
		return fieldError("since", "is required: a bulk retry covers a time range (the console sends the view's)")
	}
	if len(f.Statuses) == 0 {
		f.Statuses = []string{string(notifytype.StatusFailed), string(notifytype.StatusExpired)}
	}
	for _, st := range f.Statuses {
		if !slices.Contains(stores.RedrivableStatuses, st) {
			return fieldError("status", "%s deliveries cannot be retried (want %s)", st, strings.Join(stores.RedrivableStatuses, ", "))
		}
	}
	limit, err := queryLimit(q, maxRetryLimit, maxRetryLimit)
	if err != nil {
		return err
	}
	if dryRun {
		matched, err := stores.CountMatching(r.Context(), s.read(), f)
		if err != nil {
			return err
		}
		wire.WriteJSON(w, http.StatusOK, retryDeliveriesJSON{Matched: matched})
		return nil
	}
	ctx := s.audit(r, AuditDeliveriesRetry, "", map[string]any{"filter": r.URL.RawQuery, "limit": limit})
	matched, retried, err := s.ops.RetryDeliveries(ctx, f, limit)
	if err != nil {
		return err
	}
	wire.WriteJSON(w, http.StatusOK, retryDeliveriesJSON{Matched: matched, Retried: retried})
	return nil
}

// emptyBody refuses a request body: a route that takes its input in the
// query must not silently ignore a JSON body a client thought it sent.
func (s *Server) emptyBody(w http.ResponseWriter, r *http.Request) error {
	if r.Body == nil {
		return nil
	}
	body, err := s.readBody(w, r)
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(body)) > 0 {
		return badRequest("%s %s takes its filter in the query string, not in a body", r.Method, r.URL.Path)
	}
	return nil
}

// retryRequest is the optional body of POST /v1/deliveries/{id}/retry.
type retryRequest struct {
	// CloseCircuit closes the circuit breaker of the delivery's target
	// first (it is open: the target did not answer several times in a row).
	CloseCircuit bool `json:"close_circuit"`
}

// circuitJSON is an open circuit breaker, in GET /v1/deliveries/{id} and in
// the circuit_open error's message.
type circuitJSON struct {
	Target    string    `json:"target"`
	Failures  int       `json:"failures"`
	Until     time.Time `json:"until"`
	LastError string    `json:"last_error"`
}

func circuitWire(c *Circuit) *circuitJSON {
	if c == nil {
		return nil
	}
	return &circuitJSON{Target: c.Target, Failures: c.Failures, Until: c.Until, LastError: c.LastError}
}

// circuitError is the 409 for a retry refused because the target is paused.
func circuitError(c *Circuit) error {
	return &wire.Error{Status: http.StatusConflict, Code: CodeCircuitOpen,
		Message: c.Error() + `; retry with {"close_circuit": true} to close the circuit and send now`,
		Details: []any{wire.FieldDetail{Field: "close_circuit", Message: "the target's circuit is open"}}}
}

// previewDelivery is GET /v1/deliveries/{id}/preview: the message the
// delivery sends, rendered now by its channel (channels.Previewer) with its
// notification's params, the batch it carries (.Count, .Actors, .Items) and
// its recipient's profile as it is now (locale included): what the next
// attempt sends, and what the last one sent unless the profile or the
// templates changed since. Nothing is sent or written.
func (s *Server) previewDelivery(w http.ResponseWriter, r *http.Request) error {
	if _, err := strictQuery(r, nil, nil); err != nil {
		return err
	}
	id := r.PathValue("id")
	if err := s.deliveryInTenant(r, id); err != nil {
		return err
	}
	m, err := readByID(r.Context(), s, id, stores.GetDeliveryMessage)
	if errors.Is(err, stores.ErrNotFound) {
		return notFoundError("no delivery %q (an in-app delivery is its inbox item: its title and body are the message)", id)
	}
	if err != nil {
		return err
	}
	params, err := messageParams(m)
	if err != nil {
		return err
	}
	ch, err := s.previewChannel(m.Channel)
	if err != nil {
		return err
	}
	var rcpt *channels.Recipient
	if m.Recipient != nil {
		var data map[string]any
		_ = json.Unmarshal(m.Data, &data)
		rcpt = &channels.Recipient{ID: *m.Recipient, Email: m.Email, Name: m.Name, Locale: m.Locale, Timezone: m.Timezone,
			WebhookURL: m.Webhook, Phone: m.Phone, Data: data}
	}
	var tenant *notifytype.Tenant
	if len(m.Tenant) > 0 {
		var t struct {
			ID       string              `json:"id"`
			Name     string              `json:"name"`
			Branding notifytype.Branding `json:"branding"`
		}
		if err := json.Unmarshal(m.Tenant, &t); err != nil {
			return fmt.Errorf("tenant of delivery %s: %w", id, err)
		}
		tenant = &notifytype.Tenant{ID: t.ID, Name: t.Name, Branding: t.Branding}
	}
	var parts []channels.Part
	locale, zone := "", ""
	if rcpt != nil {
		locale, zone = rcpt.Locale, rcpt.Timezone
	}
	switch pv := ch.(type) {
	case channels.MessagePreviewer:
		// The message the send job builds (jobs: sendRun.send).
		msg := channels.Message{DeliveryID: m.ID, NotificationID: m.NotificationID, Notifier: m.Notifier, Key: m.Key,
			Actor: m.Actor, Reason: m.Reason, Recipient: rcpt, Params: s.cfg.Localize(notifytype.TemplateParams(params, tenant), locale, zone),
			CreatedAt: m.CreatedAt, Attempt: m.Attempts, Tenant: tenant}
		if nf, ok := s.cfg.Notifier(m.Notifier); ok {
			msg.Category = nf.Category
		}
		parts, err = pv.PreviewMessage(msg)
	case channels.Previewer:
		r := channels.Recipient{}
		if rcpt != nil {
			r = *rcpt
		}
		parts, err = pv.Preview(m.Notifier, s.cfg.Localize(notifytype.TemplateParams(params, tenant), locale, zone), r)
	default:
		return notFoundError("channel %q cannot preview its messages", m.Channel)
	}
	if err != nil {
		return errorf(http.StatusUnprocessableEntity, wire.CodeInvalidParams, "render %s on %s: %v", m.Notifier, m.Channel, err)
	}
	out := deliveryPreviewJSON{ID: m.ID, Notifier: m.Notifier, Channel: m.Channel, Recipient: m.Recipient,
		Locale: m.Locale, Params: params, Parts: make([]partJSON, len(parts))}
	if m.Batch != nil {
		out.BatchCount = &m.Batch.Count
	}
	for i, p := range parts {
		out.Parts[i] = partJSON{Name: p.Name, Value: p.Value}
	}
	wire.WriteJSON(w, http.StatusOK, out)
	return nil
}

// deliveryPreviewJSON is GET /v1/deliveries/{id}/preview.
type deliveryPreviewJSON struct {
	ID        string         `json:"id"`
	Notifier  string         `json:"notifier"`
	Channel   string         `json:"channel"`
	Recipient *string        `json:"recipient"`
	Locale    string         `json:"locale"`
	Params    map[string]any `json:"params"`
	// BatchCount is how many notifications the delivery's batch holds; null
	// for a delivery that carries no batch.
	BatchCount *int       `json:"batch_count"`
	Parts      []partJSON `json:"parts"`
}

// messageParams is the params a delivery's templates see, as the send job
// builds them: the notification's params, with the batch's fields for a
// delivery that carries a batch.
func messageParams(m *stores.DeliveryMessage) (map[string]any, error) {
	params := map[string]any{}
	if m.Batch == nil {
		if len(m.Params) > 0 {
			if err := json.Unmarshal(m.Params, &params); err != nil {
				return nil, fmt.Errorf("params of %s: %w", m.NotificationID, err)
			}
		}
		return params, nil
	}
	if len(m.Params) > 0 {
		dec := json.NewDecoder(bytes.NewReader(m.Params))
		dec.UseNumber()
		if err := dec.Decode(&params); err != nil {
			return nil, fmt.Errorf("params of %s: %w", m.NotificationID, err)
		}
	}
	var items []any
	if err := json.Unmarshal(m.Batch.Items, &items); err != nil {
		return nil, fmt.Errorf("items of the batch of %s: %w", m.ID, err)
	}
	// Through JSON once more, as the send job does: numbers read as float64.
	raw, err := json.Marshal(templates.BatchParams(params, m.Batch.Count, m.Batch.Actors, items))
	if err != nil {
		return nil, err
	}
	out := map[string]any{}
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// previewChannel returns the configured channel named channel, opened once
// for the operator's endpoints (as `notifyd check` opens it: nothing is
// sent through it).
func (s *Server) previewChannel(channel string) (any, error) {
	st := s.adminState()
	st.previewOnce.Do(func() { st.preview, st.previewErr = s.reg.OpenToCheck(s.cfg) })
	if st.previewErr != nil {
		return nil, st.previewErr
	}
	v, ok := st.preview.Opened(channel)
	if !ok {
		return nil, notFoundError("channel %q is not configured (channels.%s)", channel, channel)
	}
	return v, nil
}

// previewer returns the configured channel named channel as a Previewer.
func (s *Server) previewer(channel string) (channels.Previewer, error) {
	v, err := s.previewChannel(channel)
	if err != nil {
		return nil, err
	}
	pv, ok := v.(channels.Previewer)
	if !ok {
		return nil, notFoundError("channel %q cannot preview its messages", channel)
	}
	return pv, nil
}

// overviewJSON is GET /v1/overview.
type overviewJSON struct {
	Since time.Time `json:"since"`
	Until time.Time `json:"until"`
	// Hours are the starts of the 24 hours covered, oldest first.
	Hours      []time.Time     `json:"hours"`
	Deliveries []hourCountJSON `json:"deliveries"`
	// FailureRate is, per hour, the deliveries that ended failed, refused,
	// expired or digest_failed among those that ended sent or so.
	FailureRate []failureRateJSON `json:"failure_rate"`
	Queues      []queueJSON       `json:"queues"`
}

type hourCountJSON struct {
	Hour    time.Time `json:"hour"`
	Channel string    `json:"channel"`
	Status  string    `json:"status"`
	Count   int       `json:"count"`
}

type failureRateJSON struct {
	Hour   time.Time `json:"hour"`
	Failed int       `json:"failed"`
	Ended  int       `json:"ended"`
	// Rate is Failed / Ended; null in an hour where nothing ended.
	Rate *float64 `json:"rate"`
}

type queueJSON struct {
	Queue     string `json:"queue"`
	Available int    `json:"available"`
	Running   int    `json:"running"`
	Retryable int    `json:"retryable"`
	Scheduled int    `json:"scheduled"`
}

// failedStatuses and sentStatuses are what the failure rate divides.
var (
	failedStatuses = []string{string(notifytype.StatusFailed), string(notifytype.StatusRefused),
		string(notifytype.StatusExpired), string(notifytype.StatusDigestFailed)}
	sentStatuses = []string{string(notifytype.StatusSent), string(notifytype.StatusDigestSent),
		string(notifytype.StatusDelivered), string(notifytype.StatusBounced), string(notifytype.StatusComplained)}
)

// overview is GET /v1/overview: the last 24 hours of the ledger (deliveries
// per hour, channel and status; the failure rate per hour) and the depth of
// each of the daemon's queues, for the console's charts. Its reads are
// bounded: one index range per status and channel over the 24 hours, and a
// capped count per queue and state.
func (s *Server) overview(w http.ResponseWriter, r *http.Request) error {
	if _, err := strictQuery(r, nil, nil); err != nil {
		return err
	}
	now := s.clock().UTC()
	until := now.Truncate(time.Hour).Add(time.Hour)
	since := until.Add(-24 * time.Hour)
	counts, err := stores.LedgerHours(r.Context(), s.read(), since)
	if err != nil {
		return err
	}
	out := overviewJSON{Since: since, Until: until, Deliveries: []hourCountJSON{}, Queues: []queueJSON{}}
	byHour := map[time.Time]*failureRateJSON{}
	for h := since; h.Before(until); h = h.Add(time.Hour) {
		out.Hours = append(out.Hours, h)
		out.FailureRate = append(out.FailureRate, failureRateJSON{Hour: h})
	}
	for i := range out.FailureRate {
		byHour[out.FailureRate[i].Hour] = &out.FailureRate[i]
	}
	for _, c := range counts {
		out.Deliveries = append(out.Deliveries, hourCountJSON{Hour: c.Hour, Channel: c.Channel, Status: c.Status, Count: c.Count})
		fr := byHour[c.Hour]
		if fr == nil {
			continue // changed after the current hour began: a clock ahead
		}
		switch {
		case slices.Contains(failedStatuses, c.Status):
			fr.Failed += c.Count
			fr.Ended += c.Count
		case slices.Contains(sentStatuses, c.Status):
			fr.Ended += c.Count
		}
	}
	for i := range out.FailureRate {
		if fr := &out.FailureRate[i]; fr.Ended > 0 {
			rate := float64(fr.Failed) / float64(fr.Ended)
			fr.Rate = &rate
		}
	}
	if len(s.queues) > 0 {
		depths, err := stores.QueueDepths(r.Context(), s.read(), s.queues)
		if err != nil {
			return err
		}
		index := map[string]int{}
		for _, d := range depths {
			i, ok := index[d.Queue]
			if !ok {
				i = len(out.Queues)
				index[d.Queue] = i
				out.Queues = append(out.Queues, queueJSON{Queue: d.Queue})
			}
			q := &out.Queues[i]
			switch d.State {
			case "available":
				q.Available = d.Count
			case "running":
				q.Running = d.Count
			case "retryable":
				q.Retryable = d.Count
			case "scheduled":
				q.Scheduled = d.Count
			}
		}
	}
	wire.WriteJSON(w, http.StatusOK, out)
	return nil
}

// cancelByID is DELETE /v1/notifications/{id}?notifier=&key=: cancels the
// notification with that id as DELETE /v1/notifications/{notifier}/{key}
// does, once the request has named it twice. notifier and key are required
// and must be the notification's: a confirmation shown to a person ("cancel
// comment.created / c-1?") is checked against the object the request
// deletes, and an id is a path segment no key can turn into another route.
// 409 confirm_mismatch when they differ, 404 for an unknown id.
func (s *Server) cancelByID(w http.ResponseWriter, r *http.Request) error {
	q, err := strictQuery(r, []string{"notifier", "key"}, nil)
	if err != nil {
		return err
	}
	id := r.PathValue("id")
	if !uuidv7.Valid(id) {
		return notFoundError("no notification %s (DELETE /v1/notifications/{notifier}/{key} cancels by notifier and key)", quote(id))
	}
	notifier, key := q.Get("notifier"), q.Get("key")
	if notifier == "" {
		return fieldError("notifier", "is required: the notifier of the notification to cancel, as a confirmation")
	}
	if key == "" {
		return fieldError("key", "is required: the key of the notification to cancel, as a confirmation")
	}
	n, err := stores.GetNotification(r.Context(), s.pool, id, 0, s.reg.Inbox())
	if errors.Is(err, stores.ErrNotFound) {
		return notFoundError("no notification %q", id)
	}
	if err != nil {
		return err
	}
	if err := inTenant(r, n.Tenant, "notification "+id); err != nil {
		return err
	}
	if n.Notifier != notifier || n.Key != key {
		return &wire.Error{Status: http.StatusConflict, Code: CodeConfirmMismatch,
			Message: fmt.Sprintf("notification %s is %s/%s, not %s/%s: nothing was cancelled", id, quote(n.Notifier), quote(n.Key),
				quote(notifier), quote(key)),
			Details: []any{wire.FieldDetail{Field: "key", Message: "does not name the notification of this id"}}}
	}
	return s.cancel(w, r, n.Tenant, n.Notifier, n.Key)
}

// notRetry answers GET /v1/deliveries/retry as the mux answers a method a
// route does not have (the bulk retry is POST), rather than reading "retry"
// as a delivery id.
func notRetry(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("id") != "retry" {
			h.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Allow", "POST")
		wire.WriteError(w, r, errorf(http.StatusMethodNotAllowed, wire.CodeMethodNotAllowed,
			"%s is not allowed on %s; allowed: POST", r.Method, r.URL.Path))
	})
}
