package stores

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
)

// A change-log position (a seq) is only a number, and another database can
// reach the same number: a dump restored into a fresh database, a copy made
// with CREATE DATABASE … TEMPLATE, another cluster altogether. The epoch
// names the log a position belongs to, so a stream cursor can carry both and
// a position from another log is never read as one of this log's.
//
// It is computed from the server, not stored in a table, because a dump
// carries every table row into the copy. What differs between a database and
// any logical copy of it:
//
//   - the cluster's system identifier (pg_control_system()), set by initdb:
//     a dump restored into another cluster, or a pg_upgrade, gets a new one;
//   - the database's OID: a dump restored into a new database of the same
//     cluster, a database dropped and restored under its old name, and a
//     CREATE DATABASE … TEMPLATE copy each get a new one.
//
// A physical copy keeps both: a streaming standby promoted after a failover,
// a backup restored to a point in time, a storage snapshot. The first is the
// same log going on (the standby replayed the primary's WAL, so every
// position a client holds is there with the same changes behind it, and a
// position past its end is refused: stream.Handler resets a cursor beyond
// the newest change), so a failover keeps every cursor valid; the WAL
// timeline, which a promotion moves on, is not part of the epoch. A
// point-in-time restore, or a promotion that lost the old primary's last
// commits (asynchronous replication), goes on from an earlier point of the
// same log and may hand out positions clients hold again for other changes.
// For those the operator changes the epoch by hand, with a setting of the
// database that is part of it: ALTER DATABASE … SET notifyd.change_log_epoch
// = '…' (docs/operations.md, Backups). Unset, it adds nothing.
//
// They are hashed into 16 hex digits: short, the same for every replica
// of the daemon on one database, and stable across restarts of the daemon
// and of the server, and across failovers.
//
// The previous release's epoch also hashed the current WAL timeline (read
// from the WAL insert position, on a primary only); ChangeLogEpochs returns
// it too, so a cursor a client got from that release before an upgrade is
// still recognised as this log's.
const changeLogEpochSQL = `
SELECT s.system_identifier::text, d.oid::bigint,
       CASE WHEN pg_is_in_recovery() THEN '' ELSE substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8) END,
       coalesce(current_setting('notifyd.change_log_epoch', true), '')
FROM pg_control_system() s, pg_database d
WHERE d.datname = current_database()`

// ChangeLogEpoch returns the epoch of the change log of db's database: 16
// lowercase hex digits that every connection to this database reads the same
// (on its primary or on a standby promoted in its place) and that a
// restored or copied database reads differently (see the top of this file
// for what goes into it), as does the database after an operator changed
// its notifyd.change_log_epoch setting (read by sessions that start after
// the change). Read it on the connection the positions it qualifies are
// read on: a daemon pointed at another database reads another epoch.
func ChangeLogEpoch(ctx context.Context, db DB) (string, error) {
	epoch, _, err := ChangeLogEpochs(ctx, db)
	return epoch, err
}

// ChangeLogEpochs returns ChangeLogEpoch and the epoch the previous release
// computed for the same log as it is now (with the current WAL timeline; ""
// on a standby, where that release could not read it): a cursor of either
// is a position of this log.
func ChangeLogEpochs(ctx context.Context, db DB) (epoch, previous string, err error) {
	var (
		system, timeline, set string
		oid                   int64
	)
	if err := db.QueryRow(ctx, changeLogEpochSQL).Scan(&system, &oid, &timeline, &set); err != nil {
		return "", "", fmt.Errorf("read the epoch of the inbox change log: %w", err)
	}
	hash := func(in []byte) string {
		if set != "" {
			in = fmt.Appendf(in, "/%s", set)
		}
		sum := sha256.Sum256(in)
		return hex.EncodeToString(sum[:8])
	}
	epoch = hash(fmt.Appendf(nil, "notifyd change log/%s/%d", system, oid))
	if timeline != "" {
		previous = hash(fmt.Appendf(nil, "notifyd change log/%s/%d/%s", system, oid, timeline))
	}
	return epoch, previous, nil
}
