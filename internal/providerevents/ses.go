package providerevents

import (
	"context"
	"crypto"
	"crypto/rsa"
	"crypto/sha1" // #nosec G505 -- SNS SignatureVersion 1 is SHA1withRSA
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/notifyd/notifyd/channels/deliverytag"
	"github.com/notifyd/notifyd/stores"
)

// snsMessage is an SNS HTTP(S) delivery: a Notification, a
// SubscriptionConfirmation or an UnsubscribeConfirmation.
type snsMessage struct {
	Type             string `json:"Type"`
	MessageID        string `json:"MessageId"`
	Token            string `json:"Token"`
	TopicArn         string `json:"TopicArn"`
	Subject          *string
	Message          string `json:"Message"`
	SubscribeURL     string `json:"SubscribeURL"`
	Timestamp        string `json:"Timestamp"`
	SignatureVersion string `json:"SignatureVersion"`
	Signature        string `json:"Signature"`
	SigningCertURL   string `json:"SigningCertURL"`
}

// stringToSign is what SNS signs: the message's fields, in this order,
// each as "Name\nvalue\n" (Subject only when the message has one).
func (m *snsMessage) stringToSign() string {
	var b strings.Builder
	add := func(k, v string) { b.WriteString(k + "\n" + v + "\n") }
	add("Message", m.Message)
	add("MessageId", m.MessageID)
	if m.Type == "Notification" {
		if m.Subject != nil {
			add("Subject", *m.Subject)
		}
	} else {
		add("SubscribeURL", m.SubscribeURL)
	}
	add("Timestamp", m.Timestamp)
	if m.Type != "Notification" {
		add("Token", m.Token)
	}
	add("TopicArn", m.TopicArn)
	add("Type", m.Type)
	return b.String()
}

// snsHost is an SNS endpoint host, the default of providers.ses.cert_hosts.
var snsHost = regexp.MustCompile(`^sns\.[a-z0-9-]+\.amazonaws\.com(\.cn)?$`)

// allowedURL reports whether raw is an https URL on a host SNS certificates
// and subscription confirmations may come from.
func (v *Verifier) allowedURL(raw string) bool {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "https" || u.User != nil || u.Host == "" {
		return false
	}
	if hosts := v.p.SES.CertHosts; len(hosts) > 0 {
		return slices.Contains(hosts, u.Host)
	}
	return snsHost.MatchString(u.Host)
}

func (v *Verifier) readSES(ctx context.Context, r *http.Request, body []byte) (*Result, error) {
	var m snsMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, refuse(http.StatusBadRequest, "not an SNS message: %v", err)
	}
	if !slices.Contains(v.p.SES.TopicARNs, m.TopicArn) {
		return nil, refuse(http.StatusForbidden, "SNS topic %q is not in providers.ses.topic_arns", m.TopicArn)
	}
	if err := v.verifySNS(ctx, &m); err != nil {
		return nil, err
	}
	at, err := time.Parse(time.RFC3339Nano, m.Timestamp)
	if err != nil || !v.within(at, v.p.SES.MaxAge) {
		return nil, refuse(http.StatusForbidden, "SNS message timestamp %q is outside providers.ses.max_age", m.Timestamp)
	}
	switch m.Type {
	case "SubscriptionConfirmation":
		if !v.allowedURL(m.SubscribeURL) {
			return nil, refuse(http.StatusForbidden, "SubscribeURL is not on an allowed SNS host")
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.SubscribeURL, nil)
		if err != nil {
			return nil, refuse(http.StatusBadRequest, "SubscribeURL: %v", err)
		}
		res, err := v.client.Do(req)
		if err != nil {
			return nil, refuse(http.StatusBadGateway, "confirm the SNS subscription: %v", err)
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
		res.Body.Close()
		if res.StatusCode/100 != 2 {
			return nil, refuse(http.StatusBadGateway, "confirm the SNS subscription: SNS answered %d", res.StatusCode)
		}
		return &Result{Confirmed: true}, nil
	case "UnsubscribeConfirmation":
		return &Result{}, nil
	case "Notification":
	default:
		return nil, refuse(http.StatusBadRequest, "unknown SNS message type %q", m.Type)
	}
	evs, ignored, err := sesEvents(m.MessageID, at, []byte(m.Message), v.delivery)
	if err != nil {
		return nil, refuse(http.StatusBadRequest, "SES event: %v", err)
	}
	return &Result{Events: evs, Ignored: ignored}, nil
}

// verifySNS checks m's signature with the configured certificate or the one
// at its SigningCertURL.
func (v *Verifier) verifySNS(ctx context.Context, m *snsMessage) error {
	var h crypto.Hash
	var sum []byte
	s := m.stringToSign()
	switch m.SignatureVersion {
	case "1":
		x := sha1.Sum([]byte(s)) // #nosec G401 -- SNS SignatureVersion 1
		h, sum = crypto.SHA1, x[:]
	case "2":
		x := sha256.Sum256([]byte(s))
		h, sum = crypto.SHA256, x[:]
	default:
		return refuse(http.StatusForbidden, "unknown SNS SignatureVersion %q", m.SignatureVersion)
	}
	sig, err := base64.StdEncoding.DecodeString(m.Signature)
	if err != nil {
		return refuse(http.StatusForbidden, "SNS signature is not base64")
	}
	cert, err := v.snsCert(ctx, m.SigningCertURL)
	if err != nil {
		return err
	}
	pub, ok := cert.PublicKey.(*rsa.PublicKey)
	if !ok {
		return refuse(http.StatusForbidden, "the SNS signing certificate has no RSA key")
	}
	if err := rsa.VerifyPKCS1v15(pub, h, sum, sig); err != nil {
		return refuse(http.StatusForbidden, "bad SNS signature")
	}
	return nil
}

// maxCerts bounds the certificate cache (SNS has a handful per region).
const maxCerts = 32

func (v *Verifier) snsCert(ctx context.Context, certURL string) (*x509.Certificate, error) {
	if v.fileCert != nil {
		return v.fileCert, nil
	}
	if !v.allowedURL(certURL) || !strings.HasSuffix(strings.ToLower(certURL), ".pem") {
		return nil, refuse(http.StatusForbidden, "SigningCertURL %q is not an https .pem on an allowed SNS host", certURL)
	}
	v.certMu.Lock()
	c := v.certs[certURL]
	v.certMu.Unlock()
	if c != nil {
		return c, nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, certURL, nil)
	if err != nil {
		return nil, refuse(http.StatusForbidden, "SigningCertURL: %v", err)
	}
	res, err := v.client.Do(req)
	if err != nil {
		return nil, refuse(http.StatusBadGateway, "fetch the SNS signing certificate: %v", err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, 64<<10))
	if err != nil || res.StatusCode != http.StatusOK {
		return nil, refuse(http.StatusBadGateway, "fetch the SNS signing certificate: %d %v", res.StatusCode, err)
	}
	if c, err = parseCert(b); err != nil {
		return nil, refuse(http.StatusBadGateway, "the SNS signing certificate: %v", err)
	}
	v.certMu.Lock()
	if len(v.certs) >= maxCerts {
		clear(v.certs)
	}
	v.certs[certURL] = c
	v.certMu.Unlock()
	return c, nil
}

func readCertFile(path string) (*x509.Certificate, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parseCert(b)
}

func parseCert(b []byte) (*x509.Certificate, error) {
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("no PEM CERTIFICATE block")
	}
	return x509.ParseCertificate(blk.Bytes)
}

// sesEvent is an SES notification (notificationType) or a published event
// (eventType), the parts read.
type sesEvent struct {
	NotificationType string `json:"notificationType"`
	EventType        string `json:"eventType"`
	Mail             struct {
		MessageID   string              `json:"messageId"`
		Destination []string            `json:"destination"`
		Tags        map[string][]string `json:"tags"`
	} `json:"mail"`
	Bounce *struct {
		BounceType        string `json:"bounceType"`
		BounceSubType     string `json:"bounceSubType"`
		BouncedRecipients []struct {
			EmailAddress   string `json:"emailAddress"`
			Status         string `json:"status"`
			DiagnosticCode string `json:"diagnosticCode"`
		} `json:"bouncedRecipients"`
		Timestamp string `json:"timestamp"`
	} `json:"bounce"`
	Complaint *struct {
		ComplainedRecipients []struct {
			EmailAddress string `json:"emailAddress"`
		} `json:"complainedRecipients"`
		ComplaintFeedbackType string `json:"complaintFeedbackType"`
		Timestamp             string `json:"timestamp"`
	} `json:"complaint"`
	Delivery *struct {
		Recipients   []string `json:"recipients"`
		SMTPResponse string   `json:"smtpResponse"`
		Timestamp    string   `json:"timestamp"`
	} `json:"delivery"`
	DeliveryDelay *struct {
		DelayType         string `json:"delayType"`
		DelayedRecipients []struct {
			EmailAddress   string `json:"emailAddress"`
			DiagnosticCode string `json:"diagnosticCode"`
		} `json:"delayedRecipients"`
		Timestamp string `json:"timestamp"`
	} `json:"deliveryDelay"`
	Reject *struct {
		Reason string `json:"reason"`
	} `json:"reject"`
	Open *struct {
		Timestamp string `json:"timestamp"`
		UserAgent string `json:"userAgent"`
	} `json:"open"`
	Click *struct {
		Timestamp string `json:"timestamp"`
		Link      string `json:"link"`
	} `json:"click"`
	Subscription *struct {
		Timestamp string `json:"timestamp"`
	} `json:"subscription"`
}

// sesEvents maps one SES event (an SNS Notification's Message) to notifyd's
// events, one per recipient it names; at is the SNS timestamp, used when
// the event has none of its own.
func sesEvents(snsID string, at time.Time, msg []byte, delivery func(string) string) ([]stores.ProviderEvent, int, error) {
	var e sesEvent
	if err := json.Unmarshal(msg, &e); err != nil {
		return nil, 0, err
	}
	typ := e.EventType
	if typ == "" {
		typ = e.NotificationType
	}
	base := stores.ProviderEvent{Source: "ses", MessageID: e.Mail.MessageID, At: at}
	if tags := e.Mail.Tags[deliverytag.Field]; len(tags) > 0 {
		base.DeliveryID = delivery(tags[0])
	}
	ts := func(s string) time.Time {
		if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
			return t
		}
		return at
	}
	var out []stores.ProviderEvent
	add := func(i int, typ, addr, detail string, t time.Time, hard bool) {
		ev := base
		ev.Key, ev.Type, ev.Address, ev.Detail, ev.At, ev.Hard = snsID+"/"+strconv.Itoa(i), typ, addr, detail, t, hard
		out = append(out, ev)
	}
	first := ""
	if len(e.Mail.Destination) > 0 {
		first = e.Mail.Destination[0]
	}
	switch typ {
	case "Bounce":
		if e.Bounce == nil {
			return nil, 0, fmt.Errorf("a Bounce without bounce")
		}
		hard := e.Bounce.BounceType == "Permanent"
		kind := "soft"
		if hard {
			kind = "hard"
		}
		for i, b := range e.Bounce.BouncedRecipients {
			diag := b.DiagnosticCode
			if diag == "" {
				diag = e.Bounce.BounceSubType
			}
			add(i, "bounced", b.EmailAddress, joinDetail(kind, diag), ts(e.Bounce.Timestamp), hard)
		}
	case "Complaint":
		if e.Complaint == nil {
			return nil, 0, fmt.Errorf("a Complaint without complaint")
		}
		for i, c := range e.Complaint.ComplainedRecipients {
			add(i, "complained", c.EmailAddress, e.Complaint.ComplaintFeedbackType, ts(e.Complaint.Timestamp), false)
		}
	case "Delivery":
		if e.Delivery == nil {
			return nil, 0, fmt.Errorf("a Delivery without delivery")
		}
		for i, r := range e.Delivery.Recipients {
			add(i, "delivered", r, oneLine(e.Delivery.SMTPResponse), ts(e.Delivery.Timestamp), false)
		}
	case "DeliveryDelay":
		if e.DeliveryDelay == nil {
			return nil, 0, fmt.Errorf("a DeliveryDelay without deliveryDelay")
		}
		for i, r := range e.DeliveryDelay.DelayedRecipients {
			add(i, "deferred", r.EmailAddress, joinDetail(e.DeliveryDelay.DelayType, r.DiagnosticCode), ts(e.DeliveryDelay.Timestamp), false)
		}
	case "Reject":
		reason := ""
		if e.Reject != nil {
			reason = e.Reject.Reason
		}
		add(0, "dropped", first, oneLine(reason), at, false)
	case "Open":
		if e.Open == nil {
			return nil, 0, fmt.Errorf("an Open without open")
		}
		add(0, "opened", first, "", ts(e.Open.Timestamp), false)
	case "Click":
		if e.Click == nil {
			return nil, 0, fmt.Errorf("a Click without click")
		}
		add(0, "clicked", first, e.Click.Link, ts(e.Click.Timestamp), false)
	case "Subscription":
		t := at
		if e.Subscription != nil {
			t = ts(e.Subscription.Timestamp)
		}
		add(0, "unsubscribed", first, "", t, false)
	default: // Send, Rendering Failure, AmazonSnsSubscriptionSucceeded...
		return nil, 1, nil
	}
	return out, 0, nil
}
