package stores

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Mute silences a notifier or a topic for one recipient. Target is
// "notifier:<name>" or "topic:<topic>"; Until is when the mute ends (nil: until
// it is removed). A mute is active while Until is nil or in the future by the
// database's clock — the clock the fan-out reads mutes with.
type Mute struct {
	Target string
	Until  *time.Time
}

// ErrMuteExpired is returned by PutMute when until is not in the future.
var ErrMuteExpired = errors.New("mute ends in the past")

// ErrTooManyMutes is returned by PutMute when the recipient already has the
// maximum number of active mutes.
var ErrTooManyMutes = errors.New("too many mutes")

// listMutesSQL reads the active mutes only: an expired row is as good as
// absent (the fan-out reads with the same condition) until PutMute or an
// erasure removes it.
const listMutesSQL = `
SELECT target, until
FROM notify_mutes
WHERE recipient = $1 AND (until IS NULL OR until > now())
ORDER BY target COLLATE "C"`

// ListMutes returns recipient's active mutes in target byte order (empty,
// not nil, when there are none).
func ListMutes(ctx context.Context, db DB, recipient string) ([]Mute, error) {
	rows, err := db.Query(ctx, listMutesSQL, recipient)
	if err != nil {
		return nil, fmt.Errorf("list mutes of %s: %w", recipient, err)
	}
	mutes, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Mute, error) {
		var m Mute
		err := row.Scan(&m.Target, &m.Until)
		m.Until = utcPtr(m.Until)
		return m, err
	})
	if err != nil {
		return nil, fmt.Errorf("list mutes of %s: %w", recipient, err)
	}
	if mutes == nil {
		mutes = []Mute{}
	}
	return mutes, nil
}

const (
	deleteExpiredMutesSQL = `DELETE FROM notify_mutes WHERE recipient = $1 AND until <= now()`

	countOtherMutesSQL = `SELECT count(*) FROM notify_mutes WHERE recipient = $1 AND target <> $2`

	// putMuteSQL writes nothing when until is not in the future: the check
	// uses the database's clock, like every reader of mutes.
	putMuteSQL = `
INSERT INTO notify_mutes AS m (recipient, target, until)
SELECT $1, $2, $3::timestamptz
WHERE $3::timestamptz IS NULL OR $3::timestamptz > now()
ON CONFLICT (recipient, target) DO UPDATE SET until = EXCLUDED.until, created_at = now()
RETURNING m.target, m.until`
)

// PutMute mutes target for recipient until until (nil: until unmuted),
// replacing an existing mute of the same target, and returns the mute as
// stored. It returns ErrMuteExpired when until is not after the database's
// now, and ErrTooManyMutes when recipient already has maxActive mutes of other
// targets (maxActive <= 0: no limit). Validating target is the caller's.
//
// Call it in a transaction: it takes the recipient lock (RecipientLockClass)
// so that the limit holds under concurrent writes, and it deletes the
// recipient's expired mutes on the way.
func PutMute(ctx context.Context, tx DB, recipient, target string, until *time.Time, maxActive int) (*Mute, error) {
	if _, err := tx.Exec(ctx, lockRecipientSQL, RecipientLockClass, recipient); err != nil {
		return nil, fmt.Errorf("mute %s for %s: %w", target, recipient, err)
	}
	if _, err := tx.Exec(ctx, deleteExpiredMutesSQL, recipient); err != nil {
		return nil, fmt.Errorf("mute %s for %s: %w", target, recipient, err)
	}
	if maxActive > 0 {
		var n int
		if err := tx.QueryRow(ctx, countOtherMutesSQL, recipient, target).Scan(&n); err != nil {
			return nil, fmt.Errorf("mute %s for %s: %w", target, recipient, err)
		}
		if n >= maxActive {
			return nil, fmt.Errorf("mute %s for %s: %w: %d active, at most %d", target, recipient, ErrTooManyMutes, n, maxActive)
		}
	}
	var m Mute
	err := tx.QueryRow(ctx, putMuteSQL, recipient, target, until).Scan(&m.Target, &m.Until)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("mute %s for %s: %w", target, recipient, ErrMuteExpired)
	}
	if err != nil {
		return nil, fmt.Errorf("mute %s for %s: %w", target, recipient, err)
	}
	m.Until = utcPtr(m.Until)
	return &m, nil
}

// unmuteSQL deletes the mute, expired or not, and reports whether it was
// still active.
const unmuteSQL = `
DELETE FROM notify_mutes
WHERE recipient = $1 AND target = $2
RETURNING (until IS NULL OR until > now())`

// Unmute removes recipient's mute of target and reports whether an active
// mute was removed (an expired one is removed too, and reported as false).
func Unmute(ctx context.Context, db DB, recipient, target string) (bool, error) {
	var active bool
	err := db.QueryRow(ctx, unmuteSQL, recipient, target).Scan(&active)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("unmute %s for %s: %w", target, recipient, err)
	}
	return active, nil
}
