package main

import (
	"encoding/json"
	"hash/fnv"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/notifyd/notifyd/channels/webhook"
	"github.com/notifyd/notifyd/internal/smtpcapture"
)

// receipts is what a sink accepted: the delivery id of every accepted
// message in acceptance order.
type receipts struct {
	order   []string
	foreign int // accepted messages without a recognisable delivery id
	// digests are the digest ids (Message-IDs of X-Notifyd-Digest emails) in
	// acceptance order; they are not delivery ids.
	digests []string
}

// counts returns how many times each delivery id was accepted.
func (r receipts) counts() map[string]int {
	m := make(map[string]int, len(r.order))
	for _, id := range r.order {
		m[id]++
	}
	return m
}

// mailbox is the SMTP sink: smtpcapture records every message it accepts.
type mailbox struct {
	*smtpcapture.Server
}

func newMailbox() (*mailbox, error) {
	s, err := smtpcapture.New("127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	return &mailbox{s}, nil
}

// receipts maps each accepted message to its delivery id, the local part of
// its Message-ID (<delivery-id@domain>).
func (m *mailbox) receipts() receipts {
	var r receipts
	for _, msg := range m.Messages() {
		id := strings.TrimSuffix(strings.TrimPrefix(msg.MessageID, "<"), ">")
		local, domain, ok := strings.Cut(id, "@")
		if !ok || domain != mailDomain || len(local) != 36 {
			r.foreign++
			continue
		}
		if msg.Header.Get("X-Notifyd-Digest") != "" {
			r.digests = append(r.digests, local)
			continue
		}
		r.order = append(r.order, local)
	}
	return r
}

// hookbox is the webhook receiver. It verifies every signature, answers 503
// to the first attempt of the deliveries flaky selects (a temporary failure
// that must be retried), and records every message it accepts (2xx).
type hookbox struct {
	srv   *httptest.Server
	flaky func(id string) bool
	// tarpit, when set, makes a host that never answers: a request that
	// arrives before heal is held until its sender gives up, and never
	// recorded; after heal the box answers like any other.
	tarpit bool
	healed atomic.Bool
	stop   chan struct{}

	mu       sync.Mutex
	order    []string
	times    []time.Time
	refusals map[string]int
	badSig   int
	holding  int
	gaveUp   time.Time // when a sender first gave up on a held request
}

func newHookbox(flaky func(id string) bool) *hookbox {
	h := &hookbox{flaky: flaky, refusals: map[string]int{}, stop: make(chan struct{})}
	h.srv = httptest.NewServer(http.HandlerFunc(h.serve))
	return h
}

// newTarpit returns a hookbox that never answers until heal.
func newTarpit() *hookbox {
	h := &hookbox{refusals: map[string]int{}, tarpit: true, stop: make(chan struct{})}
	h.srv = httptest.NewServer(http.HandlerFunc(h.serve))
	return h
}

// heal makes a tarpit answer the requests that arrive from now on.
func (h *hookbox) heal() { h.healed.Store(true) }

// held counts the requests a tarpit is holding now.
func (h *hookbox) held() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.holding
}

// firstGaveUp is when a sender first gave up on a request a tarpit held
// (zero: none yet).
func (h *hookbox) firstGaveUp() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.gaveUp
}

func (h *hookbox) serve(w http.ResponseWriter, r *http.Request) {
	if h.tarpit && !h.healed.Load() {
		h.mu.Lock()
		h.holding++
		h.mu.Unlock()
		select {
		case <-r.Context().Done(): // the sender gave up: nothing was accepted
		case <-h.stop:
		}
		h.mu.Lock()
		h.holding--
		if h.gaveUp.IsZero() {
			h.gaveUp = time.Now()
		}
		h.mu.Unlock()
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	id := r.Header.Get("webhook-id")
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := webhook.Verify(destinationSecret(body), r.Header, body, 5*time.Minute); err != nil {
		// Accept it anyway (a refusal would turn it into a refused
		// delivery) but count it: an unverifiable webhook is a failure.
		h.badSig++
	}
	if h.flaky != nil && h.flaky(id) && h.refusals[id] == 0 {
		h.refusals[id]++
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	h.order = append(h.order, id)
	h.times = append(h.times, time.Now())
	w.WriteHeader(http.StatusNoContent)
}

func (h *hookbox) receipts() receipts {
	h.mu.Lock()
	defer h.mu.Unlock()
	var r receipts
	for _, id := range h.order {
		if len(id) != 36 {
			r.foreign++
			continue
		}
		r.order = append(r.order, id)
	}
	return r
}

func (h *hookbox) badSignatures() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.badSig
}

func (h *hookbox) close() {
	close(h.stop)
	h.srv.Close()
}

// oneIn returns a deterministic selector of about 1 in n ids, salted by seed.
func oneIn(n uint64, seed uint64) func(string) bool {
	return func(id string) bool {
		f := fnv.New64a()
		_, _ = f.Write([]byte(id))
		return (f.Sum64()^seed)%n == 0
	}
}

// destinationSecret is the secret a webhook's destination verifies it with:
// the recipient's, derived from the channel secret, or the notifier's for a
// notifier-level webhook (data.recipient null). "" when the body says neither,
// which fails the verification.
func destinationSecret(body []byte) string {
	var b struct {
		Data struct {
			Notifier  string `json:"notifier"`
			Recipient *struct {
				ID string `json:"id"`
			} `json:"recipient"`
		} `json:"data"`
	}
	if json.Unmarshal(body, &b) != nil {
		return ""
	}
	var secret string
	if b.Data.Recipient != nil {
		secret, _ = webhook.RecipientSecret(webhookSecret, b.Data.Recipient.ID)
	} else {
		secret, _ = webhook.NotifierSecret(webhookSecret, b.Data.Notifier)
	}
	return secret
}
