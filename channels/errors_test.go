package channels_test

import (
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/notifyd/notifyd/channels"
)

func TestClassify(t *testing.T) {
	t.Parallel()
	cause := errors.New("connection reset")
	tests := []struct {
		name  string
		err   error
		kind  channels.Kind
		after time.Duration
	}{
		{"unclassified", cause, channels.KindTemporary, 0},
		{"a standard library error", io.ErrUnexpectedEOF, channels.KindTemporary, 0},
		{"temporary, the job picks the backoff", channels.Temporary(cause, 0), channels.KindTemporary, 0},
		{"temporary with a wait", channels.Temporary(cause, 30*time.Second), channels.KindTemporary, 30 * time.Second},
		{"permanent", channels.Permanent(cause), channels.KindPermanent, 0},
		{"gone", channels.Gone(cause), channels.KindGone, 0},
		{"rate limited, the job's default wait", channels.RateLimited(cause, 0), channels.KindRateLimited, 0},
		{"rate limited with Retry-After", channels.RateLimited(cause, 90*time.Second), channels.KindRateLimited, 90 * time.Second},
		{"Errorf", channels.Errorf(channels.KindPermanent, "550 %s", "no such user"), channels.KindPermanent, 0},
		{"wrapped once", fmt.Errorf("send to u1: %w", channels.Gone(cause)), channels.KindGone, 0},
		{"wrapped twice", fmt.Errorf("batch: %w", fmt.Errorf("send: %w", channels.RateLimited(cause, time.Minute))),
			channels.KindRateLimited, time.Minute},
		{"joined with an unclassified error", errors.Join(cause, channels.Permanent(cause)), channels.KindPermanent, 0},
		{"the outermost classification wins", channels.Permanent(channels.Temporary(cause, time.Second)), channels.KindPermanent, 0},
		{"a literal Error", &channels.Error{Kind: channels.KindRateLimited, RetryAfter: 5 * time.Second},
			channels.KindRateLimited, 5 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			kind, after := channels.Classify(tt.err)
			if kind != tt.kind || after != tt.after {
				t.Fatalf("Classify(%v) = %v, %v; want %v, %v", tt.err, kind, after, tt.kind, tt.after)
			}
		})
	}
}

func TestClassifiedErrorKeepsItsCause(t *testing.T) {
	t.Parallel()
	cause := errors.New("421 try later")
	for _, err := range []error{
		channels.Temporary(cause, 0), channels.Permanent(cause), channels.Gone(cause), channels.RateLimited(cause, time.Second),
	} {
		if !errors.Is(err, cause) || err.Error() != cause.Error() {
			t.Fatalf("%v (%T) does not wrap its cause or changes its message", err, err)
		}
	}
	if got := (&channels.Error{Kind: channels.KindGone}).Error(); got != "gone" {
		t.Fatalf("an Error without a cause reads %q, want its kind", got)
	}
}

func TestKindString(t *testing.T) {
	t.Parallel()
	for kind, want := range map[channels.Kind]string{
		channels.KindTemporary: "temporary", channels.KindPermanent: "permanent", channels.KindGone: "gone",
		channels.KindRateLimited: "rate_limited", channels.Kind(99): "temporary",
	} {
		if got := kind.String(); got != want {
			t.Errorf("Kind(%d).String() = %q, want %q", int(kind), got, want)
		}
	}
}
