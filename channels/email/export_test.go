package email

import "context"

// DeliverRaw sends body, a rendered message, from the envelope sender from
// to rcpts as deliver does after rendering: the multi-recipient transaction
// no notification makes, for the conversation tests.
func (s *Sender) DeliverRaw(ctx context.Context, from string, rcpts []string, body []byte) error {
	return s.failover(ctx, &outgoing{from: from, rcpts: rcpts, smtpBody: bytesMessage(body)})
}
