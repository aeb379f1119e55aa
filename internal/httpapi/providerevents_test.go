package httpapi_test

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/notifyd/notifyd/channels/deliverytag"
	"github.com/notifyd/notifyd/internal/httpapi"
	"github.com/notifyd/notifyd/internal/providerevents"
)

const eventsPath = "/v1/providers/%s/events"

// eventsDelivery inserts a sent delivery of notification nid with the
// provider's message id msgID and returns its id.
func (b *bundle) eventsDelivery(t *testing.T, n int, channel, recipient, msgID string) string {
	t.Helper()
	nid := fmt.Sprintf("01900000-0000-7000-8000-0000000f%04d", n)
	id := fmt.Sprintf("01900000-0000-7000-8000-0000000e%04d", n)
	ctx := t.Context()
	if _, err := b.pool.Exec(ctx, `INSERT INTO notify_notifications (id, notifier, key, status, normalized)
		VALUES ($1::uuid, 'comment.created', $1::text, 'fanned_out', true)`, nid); err != nil {
		t.Fatal(err)
	}
	if _, err := b.pool.Exec(ctx, `INSERT INTO notify_deliveries (id, notification_id, notifier, key, recipient, channel, mode, status, provider_message_id)
		VALUES ($1, $2::uuid, 'comment.created', $2::text, $3, $4, 'immediate', 'sent', nullif($5, ''))`, id, nid, recipient, channel, msgID); err != nil {
		t.Fatal(err)
	}
	return id
}

// ledger is what the provider events changed: a delivery's status and its
// events, and the suppression list.
func (b *bundle) ledger(t *testing.T, id string) (status string, events []string, suppressed []string) {
	t.Helper()
	ctx := t.Context()
	if err := b.pool.QueryRow(ctx, `SELECT status FROM notify_deliveries WHERE id = $1`, id).Scan(&status); err != nil {
		t.Fatal(err)
	}
	rows, err := b.pool.Query(ctx, `SELECT type || coalesce(nullif(' ' || detail, ' '), '') FROM notify_delivery_events WHERE delivery_id = $1 ORDER BY at, type`, id)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var s string
		_ = rows.Scan(&s)
		events = append(events, s)
	}
	rows.Close()
	rows, err = b.pool.Query(ctx, `SELECT channel || ':' || address || ' ' || reason FROM notify_suppressions ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var s string
		_ = rows.Scan(&s)
		suppressed = append(suppressed, s)
	}
	rows.Close()
	return status, events, suppressed
}

func (b *bundle) eventCount(t *testing.T) int {
	t.Helper()
	var n int
	if err := b.pool.QueryRow(t.Context(), `SELECT (SELECT count(*) FROM notify_delivery_events) + (SELECT count(*) FROM notify_suppressions)`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func num(r response, k string) int {
	f, _ := r.body[k].(float64)
	return int(f)
}

// --- Amazon SES through SNS ---

type snsSigner struct {
	key      *rsa.PrivateKey
	certPEM  []byte
	certFile string
}

func newSNSSigner(t *testing.T) *snsSigner {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sns.test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	s := &snsSigner{key: key, certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
	s.certFile = filepath.Join(t.TempDir(), "sns.pem")
	if err := os.WriteFile(s.certFile, s.certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return s
}

// sign signs m as SNS does (version "1" SHA1withRSA, "2" SHA256withRSA).
func (s *snsSigner) sign(t *testing.T, m map[string]string, version string) []byte {
	t.Helper()
	keys := []string{"Message", "MessageId", "Subject", "Timestamp", "TopicArn", "Type"}
	if m["Type"] != "Notification" {
		keys = []string{"Message", "MessageId", "SubscribeURL", "Timestamp", "Token", "TopicArn", "Type"}
	}
	var b strings.Builder
	for _, k := range keys {
		if v, ok := m[k]; ok {
			b.WriteString(k + "\n" + v + "\n")
		}
	}
	var sig []byte
	var err error
	if version == "1" {
		h := sha1.Sum([]byte(b.String()))
		sig, err = rsa.SignPKCS1v15(rand.Reader, s.key, crypto.SHA1, h[:])
	} else {
		h := sha256.Sum256([]byte(b.String()))
		sig, err = rsa.SignPKCS1v15(rand.Reader, s.key, crypto.SHA256, h[:])
	}
	if err != nil {
		t.Fatal(err)
	}
	m["SignatureVersion"], m["Signature"] = version, base64.StdEncoding.EncodeToString(sig)
	if m["SigningCertURL"] == "" {
		m["SigningCertURL"] = "https://sns.us-east-1.amazonaws.com/SimpleNotificationService-test.pem"
	}
	out, _ := json.Marshal(m)
	return out
}

const topicARN = "arn:aws:sns:us-east-1:123456789012:ses-events"

// sesBounce is SES's documented bounce notification, for messageID.
func sesBounce(messageID, tag string) string {
	tags := ""
	if tag != "" {
		tags = `, "tags": {"` + deliverytag.Field + `": ["` + tag + `"]}`
	}
	return `{"notificationType":"Bounce","bounce":{"bounceType":"Permanent","reportingMTA":"dns; email.example.com",
"bouncedRecipients":[{"emailAddress":"jane@example.com","status":"5.1.1","action":"failed","diagnosticCode":"smtp; 550 5.1.1 <jane@example.com>... User"}],
"bounceSubType":"General","timestamp":"2029-12-31T14:59:38.237Z","feedbackId":"00000138111222aa-33322211-cccc-cccc-cccc-ddddaaaa068a-000000","remoteMtaIp":"127.0.2.0"},
"mail":{"timestamp":"2029-12-31T14:59:38.237Z","source":"john@example.com","sourceArn":"arn:aws:ses:us-east-1:888888888888:identity/example.com",
"sourceIp":"127.0.3.0","sendingAccountId":"123456789012","messageId":"` + messageID + `","destination":["jane@example.com"]` + tags + `}}`
}

const sesDelivery = `{"notificationType":"Delivery","mail":{"timestamp":"2029-12-31T05:00:00.000Z","source":"john@example.com",
"messageId":"%s","destination":["ada@example.com"]},"delivery":{"timestamp":"2029-12-31T05:00:01.000Z","processingTimeMillis":546,
"recipients":["ada@example.com"],"smtpResponse":"250 ok:  Message 64111812 accepted","reportingMTA":"a8-70.smtp-out.amazonses.com"}}`

const sesComplaint = `{"notificationType":"Complaint","complaint":{"userAgent":"AnyCompany Feedback Loop (V0.01)","complainedRecipients":[{"emailAddress":"ada@example.com"}],
"complaintFeedbackType":"abuse","arrivalDate":"2029-12-31T05:10:00.000Z","timestamp":"2029-12-31T05:10:01.000Z","feedbackId":"000001378603177f-18c07c78-fa81-4a58-9dd1-fedc3cb8f49a-000000"},
"mail":{"timestamp":"2029-12-31T05:00:00.000Z","messageId":"%s","source":"john@example.com","destination":["ada@example.com"]}}`

func snsNotification(id, message string) map[string]string {
	return map[string]string{"Type": "Notification", "MessageId": id, "TopicArn": topicARN, "Subject": "Amazon SES Email Event Notification",
		"Message": message, "Timestamp": fixedNow.Add(-time.Minute).Format("2006-01-02T15:04:05.000Z")}
}

func sesConfig(certFile, hosts string) string {
	return testConfig + fmt.Sprintf("providers:\n  ses: {topic_arns: [%s], cert_file: %q, cert_hosts: [%s]}\n", topicARN, certFile, hosts)
}

// SES events through SNS, signed with SignatureVersion 1 and 2 by a key the
// test makes, its certificate in providers.ses.cert_file: a bounce matched by
// its signed delivery tag suppresses the address and bounces the delivery; a
// delivery then a complaint matched by SES's message id deliver and then
// complain. A forged signature, another topic, a stale timestamp, a message
// seen before and an unknown message change nothing.
func TestProviderEventsSES(t *testing.T) {
	t.Parallel()
	sns := newSNSSigner(t)
	b := setup(t, setupOpts{yaml: sesConfig(sns.certFile, "")})
	tagger, _ := deliverytag.New(tokenSecret)
	jane := b.eventsDelivery(t, 1, "email", "u-jane", "")
	ada := b.eventsDelivery(t, 2, "email", "u-ada", "ses-msg-ada")
	post := func(body []byte) response {
		return b.raw(t, "POST", fmt.Sprintf(eventsPath, "ses"), bytes.NewReader(body), http.Header{"Content-Type": {"text/plain; charset=UTF-8"}, "X-Amz-Sns-Message-Type": {"Notification"}})
	}

	// Refused, changing nothing: a forged signature (the body changed
	// after signing), another topic, a stale message, an unknown version.
	bounce := sns.sign(t, snsNotification("sns-1", sesBounce("ses-msg-jane", tagger.Tag(jane))), "1")
	forged := bytes.Replace(bounce, []byte("Permanent"), []byte("Transient"), 1)
	other := snsNotification("sns-x", sesBounce("ses-msg-jane", tagger.Tag(jane)))
	other["TopicArn"] = "arn:aws:sns:us-east-1:999999999999:someone-else"
	stale := snsNotification("sns-y", sesBounce("ses-msg-jane", tagger.Tag(jane)))
	stale["Timestamp"] = fixedNow.Add(-2 * time.Hour).Format(time.RFC3339)
	for name, body := range map[string][]byte{"forged": forged, "other topic": sns.sign(t, other, "2"), "stale": sns.sign(t, stale, "2")} {
		if r := post(body); r.status != http.StatusForbidden {
			t.Errorf("%s: %d %s, want 403", name, r.status, r.raw)
		}
	}
	if n := b.eventCount(t); n != 0 {
		t.Fatalf("refused requests wrote %d rows", n)
	}

	// The bounce, SignatureVersion 1, matched by its tag (SES's message id
	// is not the one stored).
	r := post(bounce)
	if r.status != http.StatusOK || num(r, "matched") != 1 || num(r, "recorded") != 1 {
		t.Fatalf("bounce: %d %s", r.status, r.raw)
	}
	status, events, sup := b.ledger(t, jane)
	if status != "bounced" || len(events) != 1 || !strings.HasPrefix(events[0], "bounced hard: smtp; 550 5.1.1") ||
		len(sup) != 1 || !strings.HasPrefix(sup[0], "email:jane@example.com hard (ses): hard: smtp; 550 5.1.1") {
		t.Fatalf("after the bounce: %s %q %q", status, events, sup)
	}
	// The same SNS message again (SNS retries): 200, nothing new.
	if r := post(bounce); r.status != http.StatusOK || num(r, "recorded") != 0 {
		t.Fatalf("replayed bounce: %d %s", r.status, r.raw)
	}

	// Delivery then complaint, SignatureVersion 2, matched by message id.
	for i, msg := range []string{fmt.Sprintf(sesDelivery, "ses-msg-ada"), fmt.Sprintf(sesComplaint, "ses-msg-ada")} {
		if r := post(sns.sign(t, snsNotification("sns-ada-"+strconv.Itoa(i), msg), "2")); r.status != http.StatusOK || num(r, "recorded") != 1 {
			t.Fatalf("ada %d: %d %s", i, r.status, r.raw)
		}
	}
	status, events, sup = b.ledger(t, ada)
	if status != "complained" || len(events) != 2 || !strings.HasPrefix(events[0], "delivered 250 ok") || events[1] != "complained abuse" ||
		len(sup) != 2 || sup[0] != "email:ada@example.com complaint (ses): abuse" {
		t.Fatalf("ada: %s %q %q", status, events, sup)
	}

	// An unknown message, and a forged tag: 200, nothing written.
	before := b.eventCount(t)
	for i, msg := range []string{fmt.Sprintf(sesComplaint, "nobody"), sesBounce("nobody", jane+"_AAAAAAAAAAAAAAAA")} {
		if r := post(sns.sign(t, snsNotification("sns-unknown-"+strconv.Itoa(i), msg), "2")); r.status != http.StatusOK || num(r, "matched") != 0 {
			t.Fatalf("unknown %d: %d %s", i, r.status, r.raw)
		}
	}
	if n := b.eventCount(t); n != before {
		t.Fatalf("unknown messages wrote %d rows", n-before)
	}

	// GET /v1/deliveries/{id} lists the events.
	d := b.do(t, "GET", "/v1/deliveries/"+ada, adminToken, nil)
	evs, _ := d.body["events"].([]any)
	if d.status != http.StatusOK || d.body["status"] != "complained" || len(evs) != 2 {
		t.Fatalf("GET delivery: %d %s", d.status, d.raw)
	}
	if e := evs[1].(map[string]any); e["type"] != "complained" || e["source"] != "ses" || e["detail"] != "abuse" || e["at"] != "2029-12-31T05:10:01Z" {
		t.Fatalf("event %v", e)
	}
}

// A SubscriptionConfirmation is confirmed (its SubscribeURL fetched) only
// for a configured topic, and the signing certificate is fetched only from
// an allowed host, once.
func TestProviderEventsSNSSubscriptionAndCertificateFetch(t *testing.T) {
	t.Parallel()
	sns := newSNSSigner(t)
	var confirms, certs atomic.Int32
	aws := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/cert.pem":
			certs.Add(1)
			_, _ = w.Write(sns.certPEM)
		case "/":
			if r.URL.Query().Get("Action") == "ConfirmSubscription" && r.URL.Query().Get("Token") == "tok" {
				confirms.Add(1)
			}
			_, _ = w.Write([]byte("<ConfirmSubscriptionResponse/>"))
		}
	}))
	t.Cleanup(aws.Close)
	host := strings.TrimPrefix(aws.URL, "https://")
	b := setup(t, setupOpts{yaml: sesConfig("", strconv.Quote(host)), options: func(o *httpapi.Options) { o.ProviderClient = aws.Client() }})
	sub := func(topic, subscribeURL, certURL string) map[string]string {
		return map[string]string{"Type": "SubscriptionConfirmation", "MessageId": "sub-1", "Token": "tok", "TopicArn": topic,
			"Message": "You have chosen to subscribe to the topic " + topic + ".", "SubscribeURL": subscribeURL,
			"Timestamp": fixedNow.Format(time.RFC3339), "SigningCertURL": certURL}
	}
	post := func(body []byte) response {
		return b.raw(t, "POST", fmt.Sprintf(eventsPath, "ses"), bytes.NewReader(body), http.Header{"X-Amz-Sns-Message-Type": {"SubscriptionConfirmation"}})
	}
	confirmURL := aws.URL + "/?Action=ConfirmSubscription&TopicArn=" + url.QueryEscape(topicARN) + "&Token=tok"
	// Refused: another topic; a certificate or SubscribeURL on another host.
	for name, m := range map[string]map[string]string{
		"other topic":      sub("arn:aws:sns:us-east-1:999999999999:other", confirmURL, aws.URL+"/cert.pem"),
		"certificate host": sub(topicARN, confirmURL, "https://evil.test/cert.pem"),
		"subscribe host":   sub(topicARN, "https://evil.test/?Action=ConfirmSubscription", aws.URL+"/cert.pem"),
	} {
		if r := post(sns.sign(t, m, "2")); r.status != http.StatusForbidden {
			t.Errorf("%s: %d %s, want 403", name, r.status, r.raw)
		}
	}
	if confirms.Load() != 0 {
		t.Fatal("a refused subscription was confirmed")
	}
	r := post(sns.sign(t, sub(topicARN, confirmURL, aws.URL+"/cert.pem"), "1"))
	if r.status != http.StatusOK || r.body["confirmed"] != true || confirms.Load() != 1 {
		t.Fatalf("confirmation: %d %s (confirmed %d)", r.status, r.raw, confirms.Load())
	}
	// The certificate is cached: a second message fetches nothing.
	fetched := certs.Load()
	if r := post(sns.sign(t, sub(topicARN, confirmURL, aws.URL+"/cert.pem"), "2")); r.status != http.StatusOK || certs.Load() != fetched {
		t.Fatalf("second message: %d %s, certificate fetched %d times", r.status, r.raw, certs.Load())
	}
}

// --- SendGrid ---

// SendGrid's Event Webhook, signed with an ECDSA key the test makes: the
// documented events of one message (processed, deferred, delivered, open by
// Apple's proxy, click, bounce) are recorded, matched by the X-Message-Id
// in sg_message_id, and the hard bounce suppresses. A bad signature or an
// old timestamp is a 403.
func TestProviderEventsSendGrid(t *testing.T) {
	t.Parallel()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalPKIXPublicKey(&key.PublicKey)
	b := setup(t, setupOpts{yaml: testConfig + "providers:\n  sendgrid: {public_key: " + base64.StdEncoding.EncodeToString(der) + "}\n"})
	id := b.eventsDelivery(t, 3, "email", "u-sg", "14c5d75ce93.dfd.64b469")
	ts := fixedNow.Unix()
	body := fmt.Sprintf(`[
{"email":"example@test.com","timestamp":%[1]d,"smtp-id":"<14c5d75ce93.dfd.64b469@ismtpd-555>","event":"processed","category":"cat facts","sg_event_id":"rbtnWrG1DVDGGGFHFyun0A==","sg_message_id":"14c5d75ce93.dfd.64b469.filter0001.16648.5515E0B88.000000000000000000000"},
{"email":"example@test.com","timestamp":%[1]d,"smtp-id":"<14c5d75ce93.dfd.64b469@ismtpd-555>","event":"deferred","category":"cat facts","sg_event_id":"t7LEShmowp86DTSUW8M-pA==","sg_message_id":"14c5d75ce93.dfd.64b469.filter0001.16648.5515E0B88.000000000000000000000","response":"400 try again later","attempt":"5"},
{"email":"example@test.com","timestamp":%[1]d,"smtp-id":"<14c5d75ce93.dfd.64b469@ismtpd-555>","event":"delivered","category":"cat facts","sg_event_id":"rWVYmVk90MjZJ9iohOBa3w==","sg_message_id":"14c5d75ce93.dfd.64b469.filter0001.16648.5515E0B88.000000000000000000000","response":"250 OK"},
{"email":"example@test.com","timestamp":%[1]d,"smtp-id":"<14c5d75ce93.dfd.64b469@ismtpd-555>","event":"open","sg_machine_open":true,"category":"cat facts","sg_event_id":"FOTFFO0ecsBE-zxFXfs6WA==","sg_message_id":"14c5d75ce93.dfd.64b469.filter0001.16648.5515E0B88.000000000000000000000","useragent":"Mozilla/5.0","ip":"255.255.255.255"},
{"email":"example@test.com","timestamp":%[1]d,"smtp-id":"<14c5d75ce93.dfd.64b469@ismtpd-555>","event":"click","category":"cat facts","sg_event_id":"kCAi1KttyQdEKHhdC-nuEA==","sg_message_id":"14c5d75ce93.dfd.64b469.filter0001.16648.5515E0B88.000000000000000000000","useragent":"Mozilla/5.0","ip":"255.255.255.255","url":"http://www.sendgrid.com/"},
{"email":"example@test.com","timestamp":%[1]d,"smtp-id":"<14c5d75ce93.dfd.64b469@ismtpd-555>","event":"bounce","category":"cat facts","sg_event_id":"6g4ZI7SA-xmRDv57GoPIPw==","sg_message_id":"14c5d75ce93.dfd.64b469.filter0001.16648.5515E0B88.000000000000000000000","reason":"500 unknown recipient","status":"5.0.0","type":"bounce"}
]`, ts)
	sign := func(ts int64, body string) http.Header {
		sum := sha256.Sum256([]byte(strconv.FormatInt(ts, 10) + body))
		sig, err := ecdsa.SignASN1(rand.Reader, key, sum[:])
		if err != nil {
			t.Fatal(err)
		}
		return http.Header{"Content-Type": {"application/json"}, providerevents.SendGridSignatureHeader: {base64.StdEncoding.EncodeToString(sig)},
			providerevents.SendGridTimestampHeader: {strconv.FormatInt(ts, 10)}}
	}
	path := fmt.Sprintf(eventsPath, "sendgrid")
	forged := sign(ts, body)
	if r := b.raw(t, "POST", path, strings.NewReader(strings.Replace(body, "bounce", "blocked", 1)), forged); r.status != http.StatusForbidden {
		t.Fatalf("forged: %d %s", r.status, r.raw)
	}
	old := ts - 3600
	if r := b.raw(t, "POST", path, strings.NewReader(body), sign(old, body)); r.status != http.StatusForbidden {
		t.Fatalf("old timestamp: %d %s", r.status, r.raw)
	}
	if r := b.raw(t, "POST", path, strings.NewReader(body), http.Header{}); r.status != http.StatusForbidden {
		t.Fatalf("unsigned: %d %s", r.status, r.raw)
	}
	if n := b.eventCount(t); n != 0 {
		t.Fatalf("refused requests wrote %d rows", n)
	}
	r := b.raw(t, "POST", path, strings.NewReader(body), sign(ts, body))
	if r.status != http.StatusOK || num(r, "received") != 5 || num(r, "ignored") != 1 || num(r, "recorded") != 5 {
		t.Fatalf("events: %d %s", r.status, r.raw)
	}
	status, events, sup := b.ledger(t, id)
	want := "bounced hard: 500 unknown recipient|clicked http://www.sendgrid.com/|deferred 400 try again later|delivered 250 OK|opened"
	if status != "bounced" || strings.Join(events, "|") != want || len(sup) != 1 || !strings.HasPrefix(sup[0], "email:example@test.com hard (sendgrid)") {
		t.Fatalf("after the events: %s %q %q", status, events, sup)
	}
	var machine bool
	if err := b.pool.QueryRow(t.Context(), `SELECT machine FROM notify_delivery_events WHERE type = 'opened'`).Scan(&machine); err != nil || !machine {
		t.Fatalf("Apple's proxy open not flagged: %v %v", machine, err)
	}
	// SendGrid retries the same batch (signed again): nothing new.
	if r := b.raw(t, "POST", path, strings.NewReader(body), sign(ts+1, body)); r.status != http.StatusOK || num(r, "recorded") != 0 {
		t.Fatalf("retry: %d %s", r.status, r.raw)
	}
}

// --- Postmark ---

// Postmark's documented webhooks, with the basic auth credentials of the
// webhook URL: a delivery then a hard bounce (matched by the delivery tag
// in Metadata) and a spam complaint; wrong credentials are a 401.
func TestProviderEventsPostmark(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{yaml: testConfig + "providers:\n  postmark: {username: hooks, password: s3cret}\n"})
	tagger, _ := deliverytag.New(tokenSecret)
	id := b.eventsDelivery(t, 4, "email", "u-pm", "883953f4-6105-42a2-a16a-77a8eac79483")
	path := fmt.Sprintf(eventsPath, "postmark")
	delivery := `{"RecordType":"Delivery","ServerID":23,"MessageStream":"outbound","MessageID":"883953f4-6105-42a2-a16a-77a8eac79483",
"Recipient":"john@example.com","Tag":"welcome-email","DeliveredAt":"2029-12-31T15:01:00.000Z","Details":"Test delivery webhook details","Metadata":{"a_key":"a_value"}}`
	bounce := `{"RecordType":"Bounce","MessageStream":"outbound","ID":4323372036854775807,"Type":"HardBounce","TypeCode":1,"Name":"Hard bounce",
"Tag":"Test","MessageID":"00000000-0000-0000-0000-000000000000","Metadata":{"` + deliverytag.Field + `":"` + tagger.Tag(id) + `"},"ServerID":23,
"Description":"The server was unable to deliver your message (ex: unknown user, mailbox not found).","Details":"Test bounce details",
"Email":"john@example.com","From":"sender@example.com","BouncedAt":"2029-12-31T15:02:00.000Z","DumpAvailable":true,"Inactive":true,"CanActivate":true,"Subject":"Test subject"}`
	auth := func(u, p string) http.Header {
		return http.Header{"Content-Type": {"application/json"}, "Authorization": {"Basic " + base64.StdEncoding.EncodeToString([]byte(u+":"+p))}}
	}
	for _, h := range []http.Header{auth("hooks", "wrong"), auth("other", "s3cret"), {}} {
		if r := b.raw(t, "POST", path, strings.NewReader(bounce), h); r.status != http.StatusUnauthorized || r.header.Get("WWW-Authenticate") == "" {
			t.Fatalf("bad credentials: %d %s", r.status, r.raw)
		}
	}
	if n := b.eventCount(t); n != 0 {
		t.Fatalf("refused requests wrote %d rows", n)
	}
	for _, body := range []string{bounce, delivery, bounce} { // the bounce first, then again: converges
		if r := b.raw(t, "POST", path, strings.NewReader(body), auth("hooks", "s3cret")); r.status != http.StatusOK {
			t.Fatalf("%d %s", r.status, r.raw)
		}
	}
	status, events, sup := b.ledger(t, id)
	if status != "bounced" || len(events) != 2 || events[0] != "delivered Test delivery webhook details" ||
		!strings.HasPrefix(events[1], "bounced hard: HardBounce The server was unable") || len(sup) != 1 ||
		!strings.HasPrefix(sup[0], "email:john@example.com hard (postmark)") {
		t.Fatalf("after the events: %s %q %q", status, events, sup)
	}
	// An unknown message: 200 (Postmark would retry anything else), nothing written.
	before := b.eventCount(t)
	unknown := strings.Replace(delivery, "883953f4", "ffffffff", 1)
	if r := b.raw(t, "POST", path, strings.NewReader(unknown), auth("hooks", "s3cret")); r.status != http.StatusOK || num(r, "matched") != 0 || b.eventCount(t) != before {
		t.Fatalf("unknown message: %d %s", r.status, r.raw)
	}
}

// --- Mailgun ---

// Mailgun's documented webhook payload, signed with HMAC-SHA256 of
// timestamp + token: a permanent failure matched by message id bounces
// and suppresses; a temporary one is deferred. A bad signature or an old
// timestamp is a 406 (Mailgun does not retry it).
func TestProviderEventsMailgun(t *testing.T) {
	t.Parallel()
	const signingKey = "key-test-signing"
	b := setup(t, setupOpts{yaml: testConfig + "providers:\n  mailgun: {signing_key: " + signingKey + "}\n"})
	id := b.eventsDelivery(t, 5, "email", "u-mg", "20291231192638.000be97f99f8cea1@sample.mailgun.com")
	path := fmt.Sprintf(eventsPath, "mailgun")
	payload := func(ts int64, token, sig, eventID, severity string) string {
		if sig == "" {
			m := hmac.New(sha256.New, []byte(signingKey))
			m.Write([]byte(strconv.FormatInt(ts, 10) + token))
			sig = hex.EncodeToString(m.Sum(nil))
		}
		return fmt.Sprintf(`{"signature":{"timestamp":"%d","token":"%s","signature":"%s"},
"event-data":{"id":"%s","timestamp":%d.912345,"log-level":"error","event":"failed","severity":"%s","reason":"generic",
"recipient":"alice@example.com","recipient-domain":"example.com","envelope":{"sender":"bob@sample.mailgun.com","transport":"smtp","targets":"alice@example.com"},
"message":{"headers":{"to":"Alice <alice@example.com>","message-id":"20291231192638.000be97f99f8cea1@sample.mailgun.com","from":"Bob <bob@sample.mailgun.com>","subject":"Test permanent_fail webhook"},"attachments":[],"size":111},
"delivery-status":{"code":550,"message":"No such user","description":"","attempt-no":1,"tls":true,"certificate-verified":true},
"flags":{"is-routed":false,"is-authenticated":true,"is-system-test":false,"is-test-mode":false},"user-variables":{"my_var_1":"Mailgun Variable #1"}}}`,
			ts, token, sig, eventID, ts, severity)
	}
	ts := fixedNow.Unix()
	for name, body := range map[string]string{
		"forged": payload(ts, "tok-1", strings.Repeat("ab", 32), "ev-1", "permanent"),
		"old":    payload(ts-3600, "tok-2", "", "ev-1", "permanent"),
	} {
		if r := b.raw(t, "POST", path, strings.NewReader(body), http.Header{"Content-Type": {"application/json"}}); r.status != http.StatusNotAcceptable {
			t.Fatalf("%s: %d %s", name, r.status, r.raw)
		}
	}
	if n := b.eventCount(t); n != 0 {
		t.Fatalf("refused requests wrote %d rows", n)
	}
	for _, body := range []string{payload(ts, "tok-3", "", "ev-temp", "temporary"), payload(ts, "tok-4", "", "ev-1", "permanent"),
		payload(ts, "tok-5", "", "ev-1", "permanent")} {
		if r := b.raw(t, "POST", path, strings.NewReader(body), http.Header{"Content-Type": {"application/json"}}); r.status != http.StatusOK {
			t.Fatalf("%d %s", r.status, r.raw)
		}
	}
	status, events, sup := b.ledger(t, id)
	if status != "bounced" || len(events) != 2 || len(sup) != 1 || !strings.HasPrefix(sup[0], "email:alice@example.com hard (mailgun): hard: 550 No such user") {
		t.Fatalf("after the events: %s %q %q", status, events, sup)
	}
}

// --- Twilio ---

// Twilio's status callbacks, signed as X-Twilio-Signature: delivered, then
// undelivered with 30006 (a landline) for another message, which suppresses
// the number on the sms channel. A bad signature is a 403.
func TestProviderEventsTwilio(t *testing.T) {
	t.Parallel()
	const authToken = "12345678901234567890123456789012"
	b := setup(t, setupOpts{yaml: testConfig + "providers:\n  twilio: {auth_token: " + authToken + ", url: \"https://notify.example.com/v1/providers/twilio/events\"}\n"})
	ok := b.eventsDelivery(t, 6, "sms", "u-tw", "SM1f0e8ae6ade43cb3c0ce4525424e404f")
	gone := b.eventsDelivery(t, 7, "sms", "u-tw2", "SMd7ab9d4e1d4a4a0d9cbb1bbd1e4a2f10")
	path := fmt.Sprintf(eventsPath, "twilio")
	callback := func(sid, status, code, to string) url.Values {
		v := url.Values{"SmsSid": {sid}, "SmsStatus": {status}, "MessageStatus": {status}, "To": {to}, "MessageSid": {sid},
			"AccountSid": {"AC25e16e9a716a4a1786a7c83f58e30482"}, "From": {"+15017122661"}, "ApiVersion": {"2010-04-01"}}
		if code != "" {
			v.Set("ErrorCode", code)
		}
		return v
	}
	send := func(form url.Values, sig string) response {
		if sig == "" {
			sig = providerevents.TwilioSignature(authToken, "https://notify.example.com/v1/providers/twilio/events", form)
		}
		return b.raw(t, "POST", path, strings.NewReader(form.Encode()), http.Header{"Content-Type": {"application/x-www-form-urlencoded"}, "X-Twilio-Signature": {sig}})
	}
	if r := send(callback("SM1f0e8ae6ade43cb3c0ce4525424e404f", "delivered", "", "+15558675310"), "bm90IGEgc2lnbmF0dXJl"); r.status != http.StatusForbidden {
		t.Fatalf("forged: %d %s", r.status, r.raw)
	}
	if n := b.eventCount(t); n != 0 {
		t.Fatalf("refused request wrote %d rows", n)
	}
	for _, f := range []url.Values{callback("SM1f0e8ae6ade43cb3c0ce4525424e404f", "sent", "", "+15558675310"),
		callback("SM1f0e8ae6ade43cb3c0ce4525424e404f", "delivered", "", "+15558675310"),
		callback("SMd7ab9d4e1d4a4a0d9cbb1bbd1e4a2f10", "undelivered", "30006", "+15558675311")} {
		if r := send(f, ""); r.status != http.StatusOK {
			t.Fatalf("%d %s", r.status, r.raw)
		}
	}
	if status, events, _ := b.ledger(t, ok); status != "delivered" || len(events) != 1 {
		t.Fatalf("delivered: %s %q", status, events)
	}
	status, events, sup := b.ledger(t, gone)
	if status != "bounced" || len(events) != 1 || len(sup) != 1 || sup[0] != "sms:+15558675311 hard (twilio): hard: error 30006" {
		t.Fatalf("undelivered: %s %q %q", status, events, sup)
	}
}

// A provider without a providers.<kind> section has no route.
func TestProviderEventsNotConfigured(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, kind := range []string{"ses", "sendgrid", "nope"} {
		if r := b.raw(t, "POST", fmt.Sprintf(eventsPath, kind), strings.NewReader("{}"), nil); r.status != http.StatusNotFound {
			t.Errorf("%s: %d %s", kind, r.status, r.raw)
		}
	}
}
