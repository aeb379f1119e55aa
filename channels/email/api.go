package email

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
	"time"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/channels/deliverytag"
)

// maxAnswer is how much of an API's answer is read.
const maxAnswer = 64 << 10

// newHTTPClient is an API provider's own client, with up to lanes idle
// connections kept, so that it needs no handshake per message. It opens no
// more than lanes connections either: a message whose lane is free waits
// for the connection the last answer is giving back rather than dialling
// one more, which the idle pool (lanes) would close again.
func newHTTPClient(lanes int) *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = lanes
	t.MaxIdleConns = lanes
	t.MaxConnsPerHost = lanes
	// A request is mostly the message (base64 for SES): a buffer that holds
	// all of it writes it in one system call rather than one per 4 KiB.
	t.WriteBufferSize = 64 << 10
	return &http.Client{Transport: t}
}

// newAPI returns the API of an entry whose kind is not smtp.
func newAPI(pc *Provider, client *http.Client, clock func() time.Time) (api, error) {
	base := strings.TrimSuffix(pc.Endpoint, "/")
	def := func(u string) string {
		if base == "" {
			return u
		}
		return base
	}
	c := apiClient{client: client, name: pc.DisplayName()}
	switch pc.Kind {
	case KindSES:
		creds := awsCredentials{AccessKeyID: pc.AccessKeyID, SecretAccessKey: pc.SecretAccessKey, SessionToken: pc.SessionToken}
		return &sesAPI{apiClient: c, base: def("https://email." + pc.Region + ".amazonaws.com"),
			signer: newSigV4Signer(creds, pc.Region, "ses"), config: pc.ConfigurationSet, clock: clock}, nil
	case KindSendGrid:
		return &sendgridAPI{apiClient: c, base: def("https://api.sendgrid.com"), key: pc.APIKey}, nil
	case KindPostmark:
		stream := pc.MessageStream
		if stream == "" {
			stream = "outbound"
		}
		return &postmarkAPI{apiClient: c, base: def("https://api.postmarkapp.com"), token: pc.ServerToken, stream: stream}, nil
	case KindMailgun:
		return &mailgunAPI{apiClient: c, base: def("https://api.mailgun.net"), domain: pc.Domain, key: pc.APIKey}, nil
	case KindResend:
		return &resendAPI{apiClient: c, base: def("https://api.resend.com"), key: pc.APIKey}, nil
	}
	return nil, fmt.Errorf("unknown provider kind %q", pc.Kind)
}

type apiClient struct {
	client *http.Client
	name   string
}

// sendAPI sends o through p's API and returns the provider's message id.
// A request that fails on the way (no connection, a timeout, a dropped
// answer) is temporary: the next provider gets the message.
func (s *Sender) sendAPI(ctx context.Context, p *provider, o *outgoing) (string, error) {
	req, _, err := p.Via.api.request(ctx, o)
	if err != nil {
		return "", channels.Permanent(fmt.Errorf("%s: %w", p.Name, err))
	}
	c := p.Via.api.common()
	res, err := c.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%w)", context.Cause(ctx), err) // both: the timeout, and the net.Error the send job reads
		}
		return "", channels.Temporary(fmt.Errorf("%s: %w", p.Name, err), 0)
	}
	body, err := io.ReadAll(io.LimitReader(res.Body, maxAnswer))
	res.Body.Close()
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%w)", context.Cause(ctx), err) // both: the timeout, and the net.Error the send job reads
		}
		return "", channels.Temporary(fmt.Errorf("%s: read its answer: %w", p.Name, err), 0)
	}
	return p.Via.api.result(res.StatusCode, res.Header, body, o)
}

// common returns the part every API shares.
func (c *apiClient) common() *apiClient { return c }

// fault is the error of an answer that is the provider's, not the
// message's: 429 is rate limited (with its Retry-After), anything else
// temporary. Either way the next provider gets the message.
func (c *apiClient) fault(status int, h http.Header, detail string) error {
	err := fmt.Errorf("%s answered %d: %s", c.name, status, detail)
	if status == http.StatusTooManyRequests {
		return channels.RateLimited(err, retryAfter(h))
	}
	return channels.Temporary(err, 0)
}

// refused is the error of an answer refusing the message or its recipient:
// permanent, no other provider is tried.
func (c *apiClient) refused(status int, detail string) error {
	return channels.Permanent(fmt.Errorf("%s refused the message (%d): %s", c.name, status, detail))
}

// retryAfter reads a Retry-After header in seconds (0 when absent).
func retryAfter(h http.Header) time.Duration {
	if n, err := strconv.Atoi(strings.TrimSpace(h.Get("Retry-After"))); err == nil && n > 0 {
		return time.Duration(n) * time.Second
	}
	return 0
}

func oneLine(b []byte) string {
	t := strings.Join(strings.Fields(string(b)), " ")
	if len(t) > 300 {
		t = t[:300]
	}
	return t
}

func jsonRequest(ctx context.Context, url string, v any) (*http.Request, []byte, error) {
	body, err := json.Marshal(v)
	if err != nil {
		return nil, nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	return req, body, nil
}

// --- Amazon SES (API v2 SendEmail, raw content, Signature Version 4) ---

type sesAPI struct {
	apiClient
	base, config string
	signer       *sigV4Signer
	clock        func() time.Time
}

// SESPath is the SES v2 SendEmail path.
const SESPath = "/v2/email/outbound-emails"

func (a *sesAPI) request(ctx context.Context, o *outgoing) (*http.Request, []byte, error) {
	raw, err := o.rawMessage()
	if err != nil {
		return nil, nil, err
	}
	from, to, err := o.addresses()
	if err != nil {
		return nil, nil, err
	}
	// The body is written out rather than marshalled from a map: the raw
	// message is most of it, and base64 needs no JSON escaping, so it is
	// encoded once, straight into the body.
	fromJSON, err := json.Marshal(from.String())
	if err != nil {
		return nil, nil, err
	}
	toJSON, err := json.Marshal(to.String())
	if err != nil {
		return nil, nil, err
	}
	b := make([]byte, 0, base64.StdEncoding.EncodedLen(len(raw))+len(fromJSON)+len(toJSON)+len(a.config)+128)
	b = append(b, `{"FromEmailAddress":`...)
	b = append(b, fromJSON...)
	b = append(b, `,"Destination":{"ToAddresses":[`...)
	b = append(b, toJSON...)
	b = append(b, `]},"Content":{"Raw":{"Data":"`...)
	b = base64.StdEncoding.AppendEncode(b, raw)
	b = append(b, `"}}`...)
	// SES echoes message tags in its published events (mail.tags).
	tag, err := json.Marshal(o.tag)
	if err != nil {
		return nil, nil, err
	}
	b = append(b, `,"EmailTags":[{"Name":"`+deliverytag.Field+`","Value":`...)
	b = append(b, tag...)
	b = append(b, `}]`...)
	if a.config != "" {
		cs, err := json.Marshal(a.config)
		if err != nil {
			return nil, nil, err
		}
		b = append(b, `,"ConfigurationSetName":`...)
		b = append(b, cs...)
	}
	b = append(b, '}')
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.base+SESPath, bytes.NewReader(b))
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	a.signer.sign(req, b, a.clock())
	return req, b, nil
}

// SES's error types (X-Amzn-ErrorType) that refuse the message itself.
var sesRefusals = map[string]bool{"MessageRejected": true, "BadRequestException": true}

func (a *sesAPI) result(status int, h http.Header, body []byte, o *outgoing) (string, error) {
	var ans struct {
		MessageID string `json:"MessageId"`
		Message   string `json:"message"`
		Message2  string `json:"Message"`
		Type      string `json:"__type"`
		Code      string `json:"code"`
	}
	_ = json.Unmarshal(body, &ans)
	if status/100 == 2 {
		if ans.MessageID == "" {
			return "", channels.Temporary(fmt.Errorf("%s answered %d without a MessageId", a.name, status), 0)
		}
		return ans.MessageID, nil
	}
	typ := h.Get("X-Amzn-ErrorType")
	if typ == "" {
		typ = ans.Type
		if typ == "" {
			typ = ans.Code
		}
	}
	typ, _, _ = strings.Cut(typ, ":")
	if i := strings.LastIndexByte(typ, '#'); i >= 0 {
		typ = typ[i+1:]
	}
	msg := ans.Message
	if msg == "" {
		msg = ans.Message2
	}
	if msg == "" {
		msg = oneLine(body)
	}
	detail := typ + ": " + msg
	switch {
	case sesRefusals[typ]:
		return "", a.refused(status, detail)
	case typ == "TooManyRequestsException" || typ == "LimitExceededException" || typ == "Throttling":
		return "", channels.RateLimited(fmt.Errorf("%s answered %d: %s", a.name, status, detail), retryAfter(h))
	}
	return "", a.fault(status, h, detail)
}

// --- SendGrid (v3 mail send) ---

type sendgridAPI struct {
	apiClient
	base, key string
}

// SendGridPath is SendGrid's v3 mail send path.
const SendGridPath = "/v3/mail/send"

type sgAddress struct {
	Email string `json:"email"`
	Name  string `json:"name,omitempty"`
}

type sgContent struct {
	Type  string `json:"type"`
	Value string `json:"value"`
}

func (a *sendgridAPI) request(ctx context.Context, o *outgoing) (*http.Request, []byte, error) {
	from, to, headers, err := o.structured()
	if err != nil {
		return nil, nil, err
	}
	var content []sgContent
	if o.text != "" {
		content = append(content, sgContent{"text/plain", o.text}) // SendGrid wants text/plain first
	}
	if o.html != "" {
		content = append(content, sgContent{"text/html", o.html})
	}
	body := map[string]any{
		"personalizations": []any{map[string]any{"to": []sgAddress{{Email: to.Address, Name: to.Name}}}},
		"from":             sgAddress{Email: from.Address, Name: from.Name},
		"subject":          o.subject,
		"content":          content,
		"headers":          headers,
		"custom_args":      map[string]string{deliverytag.Field: o.tag},
	}
	req, b, err := jsonRequest(ctx, a.base+SendGridPath, body)
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+a.key)
	return req, b, nil
}

func (a *sendgridAPI) result(status int, h http.Header, body []byte, o *outgoing) (string, error) {
	if status/100 == 2 {
		return h.Get("X-Message-Id"), nil
	}
	var ans struct {
		Errors []struct {
			Message string  `json:"message"`
			Field   *string `json:"field"`
		} `json:"errors"`
	}
	_ = json.Unmarshal(body, &ans)
	var parts []string
	recipient := false
	for _, e := range ans.Errors {
		f := ""
		if e.Field != nil {
			f = *e.Field
		}
		parts = append(parts, strings.TrimSpace(f+" "+e.Message))
		if strings.HasPrefix(f, "personalizations") && strings.Contains(f, ".to") {
			recipient = true
		}
	}
	detail := strings.Join(parts, "; ")
	if detail == "" {
		detail = oneLine(body)
	}
	switch {
	case status == http.StatusBadRequest && recipient, status == http.StatusRequestEntityTooLarge:
		return "", a.refused(status, detail)
	}
	return "", a.fault(status, h, detail)
}

// --- Postmark (/email) ---

type postmarkAPI struct {
	apiClient
	base, token, stream string
}

// PostmarkPath is Postmark's single-email path.
const PostmarkPath = "/email"

func (a *postmarkAPI) request(ctx context.Context, o *outgoing) (*http.Request, []byte, error) {
	from, to, err := o.addresses()
	if err != nil {
		return nil, nil, err
	}
	hs, err := o.headers()
	if err != nil {
		return nil, nil, err
	}
	type header struct{ Name, Value string }
	headers := make([]header, 0, len(hs))
	for _, h := range hs {
		headers = append(headers, header{h[0], h[1]})
	}
	body := map[string]any{
		"From":          from.String(),
		"To":            to.String(),
		"Subject":       o.subject,
		"Headers":       headers,
		"MessageStream": a.stream,
		"Metadata":      map[string]string{deliverytag.Field: o.tag},
	}
	if o.text != "" {
		body["TextBody"] = o.text
	}
	if o.html != "" {
		body["HtmlBody"] = o.html
	}
	req, b, err := jsonRequest(ctx, a.base+PostmarkPath, body)
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("X-Postmark-Server-Token", a.token)
	return req, b, nil
}

func (a *postmarkAPI) result(status int, h http.Header, body []byte, o *outgoing) (string, error) {
	var ans struct {
		ErrorCode int    `json:"ErrorCode"`
		Message   string `json:"Message"`
		MessageID string `json:"MessageID"`
	}
	_ = json.Unmarshal(body, &ans)
	if status/100 == 2 && ans.ErrorCode == 0 {
		return ans.MessageID, nil
	}
	detail := fmt.Sprintf("ErrorCode %d: %s", ans.ErrorCode, ans.Message)
	if status == http.StatusUnprocessableEntity {
		switch ans.ErrorCode {
		case 300: // Invalid email request
			return "", a.refused(status, detail)
		case 406: // Inactive recipient: it bounced or complained before
			_, to, _ := o.addresses()
			addr := ""
			if to != nil {
				addr = to.Address
			}
			return "", channels.Suppress(fmt.Errorf("%s refused the recipient (%d): %s", a.name, status, detail),
				addr, "postmark 406: "+ans.Message)
		}
	}
	return "", a.fault(status, h, detail)
}

// --- Mailgun (messages.mime) ---

type mailgunAPI struct {
	apiClient
	base, domain, key string
}

func (a *mailgunAPI) request(ctx context.Context, o *outgoing) (*http.Request, []byte, error) {
	raw, err := o.rawMessage()
	if err != nil {
		return nil, nil, err
	}
	_, to, err := o.addresses()
	if err != nil {
		return nil, nil, err
	}
	var b bytes.Buffer
	w := multipart.NewWriter(&b)
	_ = w.WriteField("to", to.Address)
	_ = w.WriteField("v:"+deliverytag.Field, o.tag)
	hdr := textproto.MIMEHeader{}
	hdr.Set("Content-Disposition", `form-data; name="message"; filename="message.mime"`)
	hdr.Set("Content-Type", "message/rfc822")
	part, err := w.CreatePart(hdr)
	if err != nil {
		return nil, nil, err
	}
	_, _ = part.Write(raw)
	if err := w.Close(); err != nil {
		return nil, nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.base+"/v3/"+a.domain+"/messages.mime", bytes.NewReader(b.Bytes()))
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Content-Type", w.FormDataContentType())
	req.SetBasicAuth("api", a.key)
	return req, b.Bytes(), nil
}

func (a *mailgunAPI) result(status int, h http.Header, body []byte, o *outgoing) (string, error) {
	var ans struct {
		ID      string `json:"id"`
		Message string `json:"message"`
	}
	_ = json.Unmarshal(body, &ans)
	if status/100 == 2 {
		return strings.Trim(ans.ID, "<>"), nil
	}
	detail := ans.Message
	if detail == "" {
		detail = oneLine(body)
	}
	if status == http.StatusBadRequest || status == http.StatusRequestEntityTooLarge {
		return "", a.refused(status, detail)
	}
	return "", a.fault(status, h, detail)
}

// --- Resend (/emails) ---

type resendAPI struct {
	apiClient
	base, key string
}

// ResendPath is Resend's send path.
const ResendPath = "/emails"

func (a *resendAPI) request(ctx context.Context, o *outgoing) (*http.Request, []byte, error) {
	from, to, headers, err := o.structured()
	if err != nil {
		return nil, nil, err
	}
	body := map[string]any{
		"from":    from.String(),
		"to":      []string{to.String()},
		"subject": o.subject,
		"headers": headers,
		"tags":    []map[string]string{{"name": deliverytag.Field, "value": o.tag}},
	}
	if o.text != "" {
		body["text"] = o.text
	}
	if o.html != "" {
		body["html"] = o.html
	}
	req, b, err := jsonRequest(ctx, a.base+ResendPath, body)
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+a.key)
	// Resend keeps the key a day: a retry of a delivery it accepted is not
	// sent twice.
	req.Header.Set("Idempotency-Key", o.delivery)
	return req, b, nil
}

// Resend's error names that refuse the message or its recipient when
// answered with 422 (or 400).
var resendRefusals = map[string]bool{"validation_error": true, "invalid_parameter": true,
	"missing_required_field": true, "invalid_attachment": true}

func (a *resendAPI) result(status int, h http.Header, body []byte, o *outgoing) (string, error) {
	var ans struct {
		ID      string `json:"id"`
		Name    string `json:"name"`
		Message string `json:"message"`
	}
	_ = json.Unmarshal(body, &ans)
	if status/100 == 2 {
		if ans.ID == "" {
			return "", channels.Temporary(errors.New(a.name+" answered without an id"), 0)
		}
		return ans.ID, nil
	}
	detail := ans.Name + ": " + ans.Message
	if (status == http.StatusUnprocessableEntity || status == http.StatusBadRequest) && resendRefusals[ans.Name] {
		return "", a.refused(status, detail)
	}
	return "", a.fault(status, h, detail)
}
