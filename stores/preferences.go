package stores

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// RecipientLockClass is the first key of the two-key, transaction-scoped
// advisory lock pg_advisory_xact_lock(RecipientLockClass, hashtext(recipient))
// that ReplacePreferences, PutMute and EraseRecipient take first. It
// serialises two replaces of the same rule set (without it both would delete
// nothing and then collide inserting the same keys), keeps the mute limit
// under concurrent writes, and makes an erasure wait for a settings write in
// flight. The two-key form lives in a lock space of its own: it never
// collides with a one-key advisory lock. Two recipients whose ids hash alike only wait for each other briefly.
const RecipientLockClass = 7344

const lockRecipientSQL = `SELECT pg_advisory_xact_lock($1::int4, hashtext($2))`

// PreferenceRule is one stored preference rule of a recipient: Scope
// is "*", "category:<c>" or "notifier:<n>", Channel "*" or a channel name,
// Mode immediate, digest or off. Validation is the caller's
// (notifytype.Rule.Validate); the database stores what it is given.
type PreferenceRule struct {
	Scope   string
	Channel string
	Mode    string
}

// listPreferencesSQL reads a rule set in byte order of (scope, channel): "*"
// sorts before "category:…", which sorts before "notifier:…", so the list
// reads from the least to the most specific scope.
const listPreferencesSQL = `
SELECT scope, channel, mode
FROM notify_preferences
WHERE recipient = $1
ORDER BY scope COLLATE "C", channel COLLATE "C"`

// ListPreferences returns recipient's rules, least specific scope first. A
// recipient without rules (or without a profile) has an empty, non-nil list.
func ListPreferences(ctx context.Context, db DB, recipient string) ([]PreferenceRule, error) {
	rows, err := db.Query(ctx, listPreferencesSQL, recipient)
	if err != nil {
		return nil, fmt.Errorf("list preferences of %s: %w", recipient, err)
	}
	defer rows.Close()
	rules := []PreferenceRule{}
	for rows.Next() {
		var r PreferenceRule
		if err := rows.Scan(&r.Scope, &r.Channel, &r.Mode); err != nil {
			return nil, fmt.Errorf("list preferences of %s: %w", recipient, err)
		}
		rules = append(rules, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list preferences of %s: %w", recipient, err)
	}
	return rules, nil
}

const (
	deletePreferencesSQL = `DELETE FROM notify_preferences WHERE recipient = $1`

	insertPreferencesSQL = `
INSERT INTO notify_preferences (recipient, scope, channel, mode)
SELECT $1, u.scope, u.channel, u.mode
FROM unnest($2::text[], $3::text[], $4::text[]) AS u(scope, channel, mode)`
)

// ReplacePreferences replaces recipient's whole rule set with rules (none
// clears it). Call it inside a transaction: the delete and the insert go in
// one round trip, after the recipient lock (RecipientLockClass), so a
// concurrent replace of the same set waits and the last one to commit wins
// whole. Two rules with the same (scope, channel) violate the primary key:
// the caller checks for duplicates first.
func ReplacePreferences(ctx context.Context, tx DB, recipient string, rules []PreferenceRule) error {
	scopes := make([]string, len(rules))
	chans := make([]string, len(rules))
	modes := make([]string, len(rules))
	for i, r := range rules {
		scopes[i], chans[i], modes[i] = r.Scope, r.Channel, r.Mode
	}
	b := &pgx.Batch{}
	b.Queue(lockRecipientSQL, RecipientLockClass, recipient)
	b.Queue(deletePreferencesSQL, recipient)
	if len(rules) > 0 {
		b.Queue(insertPreferencesSQL, recipient, scopes, chans, modes)
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("replace preferences of %s: %w", recipient, err)
	}
	return nil
}
