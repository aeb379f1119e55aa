package stream

import (
	"strconv"
	"strings"
)

// A stream cursor is the id of an event and what a client sends back as
// Last-Event-ID: "<epoch>.<seq>", the epoch of the database's change log
// (stores.ChangeLogEpoch, 16 lowercase hex digits) and a position in it (a
// non-negative decimal seq), for example "9c1f2e7a40d3b815.1099511693313".
// The seq alone does not say which log it is a position of: a restored or
// copied database reaches the same numbers with other changes behind them.
// Clients treat the whole string as opaque.

// epochLen is the length of an epoch (stores.ChangeLogEpoch).
const epochLen = 16

// cursor is a parsed Last-Event-ID.
type cursor struct {
	// epoch is the log the position is in; empty for a bare seq (legacy).
	epoch string
	seq   int64
}

// parseCursor reads a Last-Event-ID. It accepts "<epoch>.<seq>" and, for one
// release, a bare seq: the form before cursors named their database, which
// clients connected across the upgrade still hold (see handler.replay for
// what it is taken to mean). ok is false for anything else, which no stream
// has sent.
func parseCursor(s string) (c cursor, ok bool) {
	epoch, num, qualified := strings.Cut(s, ".")
	if !qualified {
		num = s
	} else if !isEpoch(epoch) {
		return cursor{}, false
	}
	// Digits only (ParseInt would take a sign), and no leading zero: the
	// form a stream sends, the only one.
	if num == "" || strings.TrimLeft(num, "0123456789") != "" || len(num) > 1 && num[0] == '0' {
		return cursor{}, false
	}
	seq, err := strconv.ParseInt(num, 10, 64)
	if err != nil {
		return cursor{}, false // out of range
	}
	if qualified {
		c.epoch = epoch
	}
	c.seq = seq
	return c, true
}

// isEpoch reports whether s has the shape of an epoch.
func isEpoch(s string) bool {
	if len(s) != epochLen {
		return false
	}
	for i := range len(s) {
		if !('0' <= s[i] && s[i] <= '9' || 'a' <= s[i] && s[i] <= 'f') {
			return false
		}
	}
	return true
}

// appendCursor appends the cursor of seq in the log of epoch to b.
func appendCursor(b []byte, epoch string, seq int64) []byte {
	b = append(b, epoch...)
	b = append(b, '.')
	return strconv.AppendInt(b, seq, 10)
}
