package channels

import (
	"errors"
	"fmt"
	"time"
)

// Kind says what the send job does after a failed send.
type Kind int

const (
	// KindTemporary retries the delivery with backoff until retry.max_age, then
	// expires it. It is the kind of any error a channel did not classify.
	KindTemporary Kind = iota
	// KindPermanent refuses the delivery at once; it is never retried.
	KindPermanent
	// KindGone refuses the delivery and marks the recipient's address for this
	// channel unusable (a webhook answering 410 Gone).
	KindGone
	// KindRateLimited snoozes the delivery for RetryAfter without consuming an
	// attempt.
	KindRateLimited
)

// String returns the kind's name as used in logs.
func (k Kind) String() string {
	switch k {
	case KindPermanent:
		return "permanent"
	case KindGone:
		return "gone"
	case KindRateLimited:
		return "rate_limited"
	default:
		return "temporary"
	}
}

// Error is a classified send error.
type Error struct {
	Kind Kind
	// RetryAfter is how long to wait before the next try. Zero means the send job
	// picks the backoff (or, for KindRateLimited, a short default).
	RetryAfter time.Duration
	Err        error
}

func (e *Error) Error() string {
	if e.Err == nil {
		return e.Kind.String()
	}
	return e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// Temporary marks err as worth retrying. A zero after lets the send job back off.
func Temporary(err error, after time.Duration) error {
	return &Error{Kind: KindTemporary, RetryAfter: after, Err: err}
}

// Permanent marks err as final: the delivery is refused and never retried.
func Permanent(err error) error { return &Error{Kind: KindPermanent, Err: err} }

// Gone marks err as final and the recipient's address for the channel unusable.
func Gone(err error) error { return &Error{Kind: KindGone, Err: err} }

// RateLimited asks the send job to try again after the given duration without
// counting an attempt. A zero after means a short default chosen by the job.
func RateLimited(err error, after time.Duration) error {
	return &Error{Kind: KindRateLimited, RetryAfter: after, Err: err}
}

// Errorf is fmt.Errorf wrapped as the given kind.
func Errorf(kind Kind, format string, args ...any) error {
	return &Error{Kind: kind, Err: fmt.Errorf(format, args...)}
}

// Classify returns what to do after err. A nil error has no kind and is not
// classified; callers check for nil first. An error that is not (and does not
// wrap) an *Error is temporary with no RetryAfter.
func Classify(err error) (Kind, time.Duration) {
	var ce *Error
	if errors.As(err, &ce) {
		return ce.Kind, ce.RetryAfter
	}
	return KindTemporary, 0
}

// SuppressError is a permanent send error that also says the address must
// not be tried again on the channel (an SMTP server answering that the
// mailbox does not exist): the send job refuses the delivery and adds
// (channel, Address) to the suppression list, so later deliveries to it are
// `suppressed` without a provider call. Build it with Suppress.
type SuppressError struct {
	// Address is the recipient's address on the channel, as sent.
	Address string
	// Reason is recorded with the suppression (the server's reply).
	Reason string
	Err    error
}

func (e *SuppressError) Error() string { return e.Err.Error() }

func (e *SuppressError) Unwrap() error { return e.Err }

// Suppress marks err as permanent and address as one to suppress on the
// channel, for the given reason. Classify reads it as KindPermanent.
func Suppress(err error, address, reason string) error {
	return &SuppressError{Address: address, Reason: reason, Err: Permanent(err)}
}

// SuppressionOf returns the SuppressError in err's chain, if any.
func SuppressionOf(err error) (*SuppressError, bool) {
	var se *SuppressError
	if errors.As(err, &se) {
		return se, true
	}
	return nil, false
}
