package stores

import (
	"context"
	"fmt"

	"github.com/notifyd/notifyd/stores/uuidv7"
)

// A recipient registers where pushes reach them: browsers (push
// subscriptions, push.go) and mobile devices (devices.go). The two stores
// differ in their columns; what they do with a registration is the same and
// lives here.

// byRecipient groups registrations by their recipient, for a channel that
// read a send batch's in one statement.
func byRecipient[T any](regs []T, recipient func(T) string) map[string][]T {
	out := make(map[string][]T)
	for _, r := range regs {
		out[recipient(r)] = append(out[recipient(r)], r)
	}
	return out
}

// deleteRegistration runs sql, a delete of recipient's registration id
// ($1 recipient, $2 id, $3 tenant, empty for any); ErrNotFound when it
// deleted nothing (id not a UUID, another recipient's, or, for a tenant
// other than "", not registered under it). what names the registration in
// errors ("device").
func deleteRegistration(ctx context.Context, db DB, sql, what, recipient, tenant, id string) error {
	if !uuidv7.Valid(id) {
		return ErrNotFound
	}
	tag, err := db.Exec(ctx, sql, recipient, id, tenant)
	if err != nil {
		return fmt.Errorf("delete %s %s: %w", what, id, err)
	}
	if tag.RowsAffected() == 0 {
		return ErrNotFound
	}
	return nil
}
