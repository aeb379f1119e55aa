package email

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/config"
)

// DigestMessage is one recipient's digest email.
type DigestMessage = channels.Digest

// SendDigest renders the digest templates for d and sends the email, with the
// same connections, rate limit, timeout and error classification as Send. It
// fails (permanently) when New got no digest config, when d has no items, or
// when the recipient has no valid email address.
func (s *Sender) SendDigest(ctx context.Context, d channels.Digest) error {
	if s.digest == nil {
		return channels.Permanent(errors.New("email: digest templates are not configured"))
	}
	r := d.Recipient
	to, err := recipientAddress(r)
	if err != nil {
		return channels.Permanent(fmt.Errorf("digest email to recipient %s: %w", r.ID, err))
	}
	data := digestData(d.Data, s.digest.maxItems)
	if len(data.Items) == 0 {
		return channels.Permanent(fmt.Errorf("digest email to recipient %s: no items", r.ID))
	}
	data.Recipient = r
	subject, text, html, err := s.digest.set.renderDigest(r, data)
	if err != nil {
		return channels.Permanent(fmt.Errorf("digest email to recipient %s: %w", r.ID, err))
	}
	m, err := s.message(d.DeliveryID, to, subject, text, html, ListUnsubscribeData{
		Recipient: r, DeliveryID: d.DeliveryID, Digest: true,
	})
	if err != nil {
		return channels.Permanent(fmt.Errorf("digest email to recipient %s: %w", r.ID, err))
	}
	m.SetGenHeader("X-Notifyd-Digest", strconv.Itoa(data.Count))
	if err := s.deliver(ctx, m); err != nil {
		return fmt.Errorf("send digest email to recipient %s: %w", r.ID, err)
	}
	return nil
}

// digestData caps the items at maxItems (zero or less: no cap) and sets Count
// and More to match.
func digestData(d config.DigestData, maxItems int) config.DigestData {
	d.Count = max(d.Count, len(d.Items))
	if maxItems > 0 && len(d.Items) > maxItems {
		d.Items = d.Items[:maxItems:maxItems]
	}
	d.More = d.Count - len(d.Items)
	return d
}
