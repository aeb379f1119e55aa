package notifyd_test

import (
	"context"
	"testing"
)

// The audit log is append-only: the application's role (notifyd_app) may
// neither write nor read it, and the daemon's own role may insert but not
// update, delete a recent row, or truncate; only a row older than 30 days
// (what retention removes) may be deleted.
func TestAuditIsAppendOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	owner, app, _ := appSetup(t)
	insert := `INSERT INTO notify_audit (id, at, actor, actor_kind, action) VALUES ($1, $2::timestamptz, 'x', 'cli', 'probe')`
	for _, q := range []string{
		`INSERT INTO notify_audit (id, at, actor, actor_kind, action) VALUES ('0190b8a4-0000-7000-8000-0000000000a1', now(), 'x', 'cli', 'probe')`,
		`UPDATE notify_audit SET actor = 'y'`, `DELETE FROM notify_audit`, `SELECT count(*) FROM notify_audit`,
	} {
		if _, err := app.Exec(ctx, q); !insufficientPrivilege(err) {
			t.Errorf("the application role ran %q: %v, want insufficient privilege", q, err)
		}
	}
	if _, err := owner.Exec(ctx, insert, "0190b8a4-0000-7000-8000-0000000000b1", "now"); err != nil {
		t.Fatal(err)
	}
	if _, err := owner.Exec(ctx, insert, "0190b8a4-0000-7000-8000-0000000000b2", "2000-01-01T00:00:00Z"); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{`UPDATE notify_audit SET actor = 'y'`, `DELETE FROM notify_audit`,
		`DELETE FROM notify_audit WHERE id = '0190b8a4-0000-7000-8000-0000000000b1'`, `TRUNCATE notify_audit`} {
		if _, err := owner.Exec(ctx, q); !insufficientPrivilege(err) {
			t.Errorf("the daemon's role ran %q: %v, want it refused", q, err)
		}
	}
	tag, err := owner.Exec(ctx, `DELETE FROM notify_audit WHERE at < now() - interval '30 days'`)
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("retention's delete of the old row: %v (%d rows)", err, tag.RowsAffected())
	}
	var n int
	if err := owner.QueryRow(ctx, `SELECT count(*) FROM notify_audit`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("rows left: %d (%v), want the recent one", n, err)
	}
}
