package stores

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
)

// A change-log position (a seq) is only a number, and another database can
// reach the same number: a dump restored into a fresh database, a backup
// restored to an earlier point, a copy made with CREATE DATABASE … TEMPLATE.
// The epoch names the log a position belongs to, so a stream cursor can carry
// both and a position from another log is never read as one of this log's.
//
// It is computed from the server, not stored in a table, because a dump
// carries every table row into the copy. What differs between a database and
// any copy of it:
//
//   - the cluster's system identifier (pg_control_system()), set by initdb:
//     a dump restored into another cluster, or a pg_upgrade, gets a new one;
//   - the database's OID: a dump restored into a new database of the same
//     cluster, a database dropped and restored under its old name, and a
//     CREATE DATABASE … TEMPLATE copy each get a new one;
//   - the WAL timeline: a physical backup restored to a point in time (which
//     keeps both of the above) starts a new timeline when it comes up, and so
//     does a standby promoted after a failover, whose log may lack the last
//     transactions of the old primary and so hand out their positions again.
//
// A copy that keeps all three is a crash-consistent copy of the data
// directory (a storage or provider snapshot brought up by crash recovery),
// which nothing in the server tells from the original restarting. For that
// one the operator changes the epoch by hand, with a setting of the database
// that is part of it: ALTER DATABASE … SET notifyd.change_log_epoch = '…'
// (docs/operations.md, Backups). Unset, it adds nothing.
//
// They are hashed into 16 hex digits: short, the same for every replica
// of the daemon on one database, and stable across restarts of the daemon
// and of the server.
const changeLogEpochSQL = `
SELECT s.system_identifier::text, d.oid::bigint, substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8),
       coalesce(current_setting('notifyd.change_log_epoch', true), '')
FROM pg_control_system() s, pg_database d
WHERE d.datname = current_database()`

// ChangeLogEpoch returns the epoch of the change log of db's database: 16
// lowercase hex digits that every connection to this database reads the same
// and that a restored or copied database reads differently (see the top of
// this file for what goes into it), as does the database after an operator
// changed its notifyd.change_log_epoch setting (read by sessions that start
// after the change). Read it on the connection the positions
// it qualifies are read on: a daemon pointed at another database reads
// another epoch.
//
// It needs a primary: pg_current_wal_lsn fails during recovery.
func ChangeLogEpoch(ctx context.Context, db DB) (string, error) {
	var (
		system, timeline, set string
		oid                   int64
	)
	if err := db.QueryRow(ctx, changeLogEpochSQL).Scan(&system, &oid, &timeline, &set); err != nil {
		return "", fmt.Errorf("read the epoch of the inbox change log: %w", err)
	}
	in := fmt.Appendf(nil, "notifyd change log/%s/%d/%s", system, oid, timeline)
	if set != "" {
		in = fmt.Appendf(in, "/%s", set)
	}
	sum := sha256.Sum256(in)
	return hex.EncodeToString(sum[:8]), nil
}
