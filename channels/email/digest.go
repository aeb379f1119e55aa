package email

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/templates"
)

// SendDigest renders the digest templates for d and sends the email, with the
// same connections, rate limit, timeout and error classification as Send. The
// email's Message-ID is derived from d.ID, so every attempt at a digest
// carries the same one. The templates list the first digest.max_items of
// d.Items and count the rest in .More. It fails (permanently) when New got no
// digest config, when d has no items, or when the recipient has no valid
// email address.
func (s *Sender) SendDigest(ctx context.Context, d channels.Digest) error {
	if s.digest == nil {
		return channels.Permanent(errors.New("email: digest templates are not configured"))
	}
	r := d.Recipient
	to, err := recipientAddress(r)
	if err != nil {
		return channels.Permanent(fmt.Errorf("digest email to recipient %s: %w", r.ID, err))
	}
	data := digestData(d, s.digest.maxItems)
	if len(data.Items) == 0 {
		return channels.Permanent(fmt.Errorf("digest email to recipient %s: no items", r.ID))
	}
	data.Recipient = r
	subject, text, html, err := s.digest.set.renderDigest(r, data)
	if err != nil {
		return channels.Permanent(fmt.Errorf("digest email to recipient %s: %w", r.ID, err))
	}
	var scopes []string
	if s.unsub != nil {
		scopes = s.unsub.digestScopes(d.Items)
	}
	m, err := s.message(d.ID, to, subject, text, html, r.ID, scopes)
	if err != nil {
		return channels.Permanent(fmt.Errorf("digest email to recipient %s: %w", r.ID, err))
	}
	m.SetGenHeader("X-Notifyd-Digest", strconv.Itoa(data.Count))
	if err := s.deliver(ctx, m, d.ID, subject, text, html); err != nil {
		return fmt.Errorf("send digest email to recipient %s: %w", r.ID, err)
	}
	return nil
}

// digestData is the templates' dot for d: at most maxItems items (zero or
// less: no cap), Count at least the number of items, and More the rest. The
// caller's items are not changed.
func digestData(d channels.Digest, maxItems int) templates.DigestData {
	items := d.Items
	if maxItems > 0 && len(items) > maxItems {
		items = items[:maxItems]
	}
	out := templates.DigestData{Items: make([]templates.DigestItem, len(items)), Count: max(d.Count, len(d.Items))}
	for i, it := range items {
		out.Items[i] = templates.DigestItem{Notifier: it.Notifier, Key: it.Key, Category: it.Category, Reason: it.Reason,
			Title: it.Title, Body: it.Body, URL: it.URL, Params: it.Params, CreatedAt: it.CreatedAt}
	}
	out.More = out.Count - len(out.Items)
	out.Locale = d.Locale
	return out
}
