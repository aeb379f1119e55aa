package notifyd

import (
	"errors"
	"fmt"
)

// ErrUnknownNotifier is returned by SendTx when the client has a Config and the
// notifier is not declared in it.
var ErrUnknownNotifier = errors.New("unknown notifier")

// ErrTooManyRecipients is returned by SendTx when the client has a Config and
// the inline recipients (after removing duplicates) exceed the notifier's
// max_recipients. Audiences that grow past the limit through topics are
// rejected at fan-out instead (the notification's status becomes rejected).
var ErrTooManyRecipients = errors.New("too many recipients")

// ErrNotFound is returned by CancelTx when (notifier, key) was never sent.
var ErrNotFound = errors.New("notification not found")

// InputError is a malformed Notification: a missing or over-long field.
type InputError struct {
	// Field is the offending field's JSON name ("key", "recipients[3].id").
	Field   string
	Message string
}

func (e *InputError) Error() string { return fmt.Sprintf("%s: %s", e.Field, e.Message) }
