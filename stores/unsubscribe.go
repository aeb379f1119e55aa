package stores

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// upsertPreferencesSQL writes rules into recipient $1's set, replacing the
// mode of a rule with the same (scope, channel) and leaving the others.
const upsertPreferencesSQL = `
INSERT INTO notify_preferences (recipient, scope, channel, mode)
SELECT $1, u.scope, u.channel, u.mode
FROM unnest($2::text[], $3::text[], $4::text[]) AS u(scope, channel, mode)
ON CONFLICT (recipient, scope, channel) DO UPDATE SET mode = EXCLUDED.mode`

// PutPreferenceRules adds rules to recipient's rule set (a rule with the same
// scope and channel is replaced; the rest of the set is kept), after the
// recipient lock (RecipientLockClass), in one round trip: what a one-click
// unsubscribe writes. Call it inside a transaction. Validation is the
// caller's, and rules must not repeat a (scope, channel).
func PutPreferenceRules(ctx context.Context, tx DB, recipient string, rules []PreferenceRule) error {
	if len(rules) == 0 {
		return nil
	}
	scopes := make([]string, len(rules))
	chans := make([]string, len(rules))
	modes := make([]string, len(rules))
	for i, r := range rules {
		scopes[i], chans[i], modes[i] = r.Scope, r.Channel, r.Mode
	}
	b := &pgx.Batch{}
	b.Queue(lockRecipientSQL, RecipientLockClass, recipient)
	b.Queue(upsertPreferencesSQL, recipient, scopes, chans, modes)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("put preference rules of %s: %w", recipient, err)
	}
	return nil
}
