package stores_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/notifyd/notifyd/internal/testing/pgtest"
	"github.com/notifyd/notifyd/stores"
)

var epochShape = regexp.MustCompile(`^[0-9a-f]{16}$`)

func TestChangeLogEpochNamesTheDatabase(t *testing.T) {
	t.Parallel()
	a := pgtest.NewDB(t)
	b := pgtest.NewDB(t) // another copy of the same template: the same rows

	epochA, err := stores.ChangeLogEpoch(t.Context(), a)
	if err != nil {
		t.Fatal(err)
	}
	if !epochShape.MatchString(epochA) {
		t.Fatalf("epoch %q is not 16 lowercase hex digits", epochA)
	}
	// Every connection, and a transaction, read the same one; writing to the
	// log does not move it.
	tx, err := a.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(t.Context())
	chgCreate(t, tx, "epoch", "epoch-me")
	if again, err := stores.ChangeLogEpoch(t.Context(), tx); err != nil || again != epochA {
		t.Fatalf("epoch in a writing transaction %q, %v; want %q", again, err, epochA)
	}
	if err := tx.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	conns := make([]string, 3)
	for i := range conns {
		c, err := a.Acquire(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Release() // held, so each read is on another connection
		if conns[i], err = stores.ChangeLogEpoch(t.Context(), c); err != nil {
			t.Fatal(err)
		}
	}
	for _, e := range conns {
		if e != epochA {
			t.Fatalf("epochs on three connections %q, want %q", conns, epochA)
		}
	}

	epochB, err := stores.ChangeLogEpoch(t.Context(), b)
	if err != nil {
		t.Fatal(err)
	}
	if epochB == epochA {
		t.Fatalf("two databases of one server, copies of one template, share the epoch %q", epochA)
	}

	// The operator's lever, for a copy nothing in the server tells apart:
	// the database's notifyd.change_log_epoch setting, read by new sessions.
	name := pgx.Identifier{b.Config().ConnConfig.Database}.Sanitize()
	if _, err := b.Exec(t.Context(), "ALTER DATABASE "+name+" SET notifyd.change_log_epoch = 'restored-1'"); err != nil {
		t.Fatal(err)
	}
	b.Reset() // new sessions
	bumped, err := stores.ChangeLogEpoch(t.Context(), b)
	if err != nil {
		t.Fatal(err)
	}
	if bumped == epochB || bumped == epochA || !epochShape.MatchString(bumped) {
		t.Fatalf("epoch %q after setting notifyd.change_log_epoch (before: %q; A: %q)", bumped, epochB, epochA)
	}
}

// The previous release's epoch (with the WAL timeline) is returned beside
// the current one, so its cursors resume after an upgrade; the current one
// leaves the timeline out, so a failover keeps it.
func TestChangeLogEpochsKnowsThePreviousRelease(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewDB(t)
	ctx := context.Background()
	var system, timeline string
	var oid int64
	if err := pool.QueryRow(ctx, `SELECT s.system_identifier::text, d.oid::bigint, substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8)
		FROM pg_control_system() s, pg_database d WHERE d.datname = current_database()`).Scan(&system, &oid, &timeline); err != nil {
		t.Fatal(err)
	}
	hash := func(s string) string {
		sum := sha256.Sum256([]byte(s))
		return hex.EncodeToString(sum[:8])
	}
	epoch, previous, err := stores.ChangeLogEpochs(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	if want := hash(fmt.Sprintf("notifyd change log/%s/%d/%s", system, oid, timeline)); previous != want {
		t.Errorf("previous epoch %s, want the previous release's %s", previous, want)
	}
	if want := hash(fmt.Sprintf("notifyd change log/%s/%d", system, oid)); epoch != want {
		t.Errorf("epoch %s, want %s (no timeline)", epoch, want)
	}
}
