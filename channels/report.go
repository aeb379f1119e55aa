package channels

import "context"

// Report is what a channel tells the send job about one Send or SendBulk
// beyond its error: which provider took (or refused) the message. The send
// job records it on the delivery's ledger row and with each failed attempt,
// so an operator can see which of several SMTP servers accepted an email.
type Report struct {
	// Provider names the server or service that answered last, for example
	// "smtp-b.example.test:587" or "twilio". Empty: the channel has one
	// provider and does not say.
	Provider string
	// ProviderMessageID is the id the provider gave the message it accepted
	// (an SES MessageId, a SendGrid X-Message-Id), the key its delivery
	// events name the message by. Empty: nothing was accepted, or the
	// provider gives no id.
	ProviderMessageID string
}

type reportKey struct{}

// WithReport returns a context carrying a fresh Report for one Send; the send
// job reads it after Send returns.
func WithReport(ctx context.Context) (context.Context, *Report) {
	r := &Report{}
	return context.WithValue(ctx, reportKey{}, r), r
}

// SetProvider records on ctx's Report (if any) the provider that answered.
// A channel calls it as it goes: the last call before Send returns wins.
func SetProvider(ctx context.Context, provider string) {
	if r, ok := ctx.Value(reportKey{}).(*Report); ok {
		r.Provider = provider
	}
}

// SetProviderMessageID records on ctx's Report (if any) the id the provider
// gave the message it accepted. A channel calls it with SetProvider when a
// send succeeds.
func SetProviderMessageID(ctx context.Context, id string) {
	if r, ok := ctx.Value(reportKey{}).(*Report); ok {
		r.ProviderMessageID = id
	}
}
