package stores

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// upsertPreferencesSQL writes rules into recipient $1's set, replacing the
// mode of a rule with the same (scope, channel) and leaving the others —
// unless the recipient was erased at or after $6 ($5 is its pseudonym,
// ErasedID): a link minted before an erasure must not bring the recipient's
// settings back.
const upsertPreferencesSQL = `
INSERT INTO notify_preferences (recipient, scope, channel, mode)
SELECT $1, u.scope, u.channel, u.mode
FROM unnest($2::text[], $3::text[], $4::text[]) AS u(scope, channel, mode)
WHERE NOT EXISTS (SELECT 1 FROM notify_erased_recipients WHERE pseudonym = $5 AND erased_at >= $6)
ON CONFLICT (recipient, scope, channel) DO UPDATE SET mode = EXCLUDED.mode`

// erasedSinceSQL reports whether the recipient of pseudonym $1 was erased at
// or after $2.
const erasedSinceSQL = `SELECT EXISTS (SELECT 1 FROM notify_erased_recipients WHERE pseudonym = $1 AND erased_at >= $2)`

// ErrErased is returned by PutPreferenceRules for a recipient erased since
// the instant it was given: nothing was written.
var ErrErased = errors.New("the recipient was erased")

// PutPreferenceRules adds rules to recipient's rule set (a rule with the same
// scope and channel is replaced; the rest of the set is kept), after the
// recipient lock (RecipientLockClass), in one round trip: what a one-click
// unsubscribe writes, for a link issued at issued. A recipient erased at or
// after issued gets nothing written (ErrErased): the erasure took the lock
// too, so it either committed before (and is seen) or waits. Call it inside
// a transaction. Validation is the caller's, and rules must not repeat a
// (scope, channel).
func PutPreferenceRules(ctx context.Context, tx DB, recipient string, issued time.Time, rules []PreferenceRule) error {
	if len(rules) == 0 {
		return nil
	}
	scopes := make([]string, len(rules))
	chans := make([]string, len(rules))
	modes := make([]string, len(rules))
	for i, r := range rules {
		scopes[i], chans[i], modes[i] = r.Scope, r.Channel, r.Mode
	}
	pseudonym := ErasedID(recipient)
	var erased bool
	b := &pgx.Batch{}
	b.Queue(lockRecipientSQL, RecipientLockClass, recipient)
	b.Queue(erasedSinceSQL, pseudonym, issued).QueryRow(func(row pgx.Row) error { return row.Scan(&erased) })
	b.Queue(upsertPreferencesSQL, recipient, scopes, chans, modes, pseudonym, issued)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("put preference rules of %s: %w", recipient, err)
	}
	if erased {
		return fmt.Errorf("put preference rules of %s: %w", recipient, ErrErased)
	}
	return nil
}
