package stream_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notifyd/notifyd/internal/pgcluster"
	"github.com/notifyd/notifyd/internal/stream"
	"github.com/notifyd/notifyd/internal/testing/pgtest"
)

// A cursor is a position in one database's change log. A dump restored
// elsewhere has the same positions with other changes after them, so a
// cursor of the original must reset there, never replay; on the original it
// replays as before. And when the database a running daemon reads is
// restored under it, its streams end and their clients reset.
func TestCursorOfARestoredDatabaseResets(t *testing.T) {
	t.Parallel()
	pgDump, pgRestore := pgProgram(t, "pg_dump"), pgProgram(t, "pg_restore")
	admin := adminConn(t)
	poolA, urlA := pgtest.NewDBURL(t)
	nameA := poolA.Config().ConnConfig.Database
	hubA := newHub(t, poolA)
	srvA := serve(t, hubA, stream.HandlerOptions{}, nil)
	run(t, hubA)
	const me = "restore-me"

	// A client streaming from A, with two items.
	running := connect(t, srvA, me, "")
	running.expectCounts(t, 0, 0)
	before := create(t, poolA, me, me)
	running.expectCreated(t, before[0])
	running.expectCreated(t, before[1])
	at := running.expectCounts(t, 2, 2)
	epochA := at.epoch(t)

	// A's dump, restored into a new database B of the same server.
	dump := filepath.Join(t.TempDir(), "a.dump")
	runProgram(t, pgDump, "--format=custom", "--file="+dump, "--dbname="+urlA)
	nameB := fmt.Sprintf("notifyd_restored_%d_%d", os.Getpid(), restoreCounter.Add(1))
	createDatabase(t, admin, nameB, true)
	urlB := withDatabase(t, urlA, nameB)
	runProgram(t, pgRestore, "--single-transaction", "--no-owner", "--dbname="+urlB, dump)

	// Both go on, each with changes of its own after the cursor.
	onlyA := create(t, poolA, me)[0]
	running.expectCreated(t, onlyA)
	last := running.expectCounts(t, 3, 3)
	poolB, err := pgxpool.New(t.Context(), urlB)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(poolB.Close)
	create(t, poolB, me) // B's own change after the cursor
	hubB := newHub(t, poolB)
	srvB := serve(t, hubB, stream.HandlerOptions{}, nil)
	run(t, hubB)

	// On B, A's cursor resets: replaying B's change after it would be a
	// change A never had, and A's own one would be missed.
	onB := connect(t, srvB, me, at.id)
	reset := onB.next(t)
	if reset.name != "reset" {
		t.Fatalf("A's cursor on B: event %s %s (id %s), want reset", reset.name, reset.data, reset.id)
	}
	epochB := reset.epoch(t)
	if epochB == epochA {
		t.Fatalf("B has A's epoch %s", epochA)
	}
	if counts := onB.expectCounts(t, 3, 3); counts.id != reset.id {
		t.Fatalf("counts id %s after reset %s", counts.id, reset.id)
	}
	live := create(t, poolB, me)[0]
	if ev := onB.expectCreated(t, live); ev.epoch(t) != epochB {
		t.Fatalf("live event id %s on B, want epoch %s", ev.id, epochB)
	}
	onB.expectCounts(t, 4, 4)
	// B's own cursors resume on B.
	resumedB := connect(t, srvB, me, reset.id)
	resumedB.expectCreated(t, live)
	resumedB.expectCounts(t, 4, 4)

	// On A, the same cursor replays A's change after it, and so does the
	// bare seq a client from before cursors named their database holds.
	for _, id := range []string{at.id, strconv.FormatInt(at.seq(t), 10)} {
		onA := connect(t, srvA, me, id)
		if ev := onA.expectCreated(t, onlyA); ev.id != last.id {
			t.Fatalf("replay from %s on A: id %s, want %s", id, ev.id, last.id)
		}
		onA.expectCounts(t, 3, 3)
		onA.close()
	}

	// Now A itself is restored from the dump, under the running client:
	// dropped (its connections with it), created again, the dump restored.
	if _, err := admin.Exec(t.Context(), "DROP DATABASE "+pgx.Identifier{nameA}.Sanitize()+" WITH (FORCE)"); err != nil {
		t.Fatal(err)
	}
	createDatabase(t, admin, nameA, false) // pgtest drops it
	runProgram(t, pgRestore, "--single-transaction", "--no-owner", "--dbname="+urlA, dump)

	// The Hub finds another epoch and ends the stream; nothing of the new
	// database reached it.
	ended := time.After(time.Minute)
	for open := true; open; {
		select {
		case ev, ok := <-running.events:
			if open = ok; ok && ev.comment == "" {
				t.Fatalf("event %s %s (id %s) after the restore, want the stream to end", ev.name, ev.data, ev.id)
			}
		case <-ended:
			t.Fatal("the stream of the restored database still open after a minute")
		}
	}
	// The pool's other connections died with the database; a client
	// retries a stream that failed on one, this test does not.
	poolA.Reset()

	// Its client reconnects with the last id it saw, and resets.
	back := connect(t, srvA, me, last.id)
	reset = back.next(t)
	if reset.name != "reset" {
		t.Fatalf("A's cursor on the restored A: event %s %s (id %s), want reset", reset.name, reset.data, reset.id)
	}
	if e := reset.epoch(t); e == epochA || e == epochB {
		t.Fatalf("the restored A has epoch %s (A %s, B %s)", e, epochA, epochB)
	}
	back.expectCounts(t, 2, 2)
	again := create(t, poolA, me)[0]
	back.expectCreated(t, again)
	back.expectCounts(t, 3, 3)
}

var restoreCounter atomic.Int64

// pgProgram returns the path of a PostgreSQL client program of the test
// server's installation. Without one the test is skipped, except under CI.
func pgProgram(t *testing.T, name string) string {
	t.Helper()
	if dir, err := pgcluster.FindBinaries(); err == nil {
		if p := filepath.Join(dir, name); fileExists(p) {
			return p
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s not found", name)
	}
	t.Skipf("%s not found", name)
	return ""
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func runProgram(t *testing.T, program string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, program, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(program), strings.Join(args, " "), err, out)
	}
}

// adminConn connects to the test server's maintenance database, to create
// and drop databases.
func adminConn(t *testing.T) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// createDatabase creates an empty database (from template0, which nobody is
// ever connected to). With drop, it is dropped at cleanup.
func createDatabase(t *testing.T, admin *pgx.Conn, name string, drop bool) {
	t.Helper()
	if _, err := admin.Exec(t.Context(), "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+" TEMPLATE template0"); err != nil {
		t.Fatal(err)
	}
	if !drop {
		return
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Error(err)
		}
	})
}

// withDatabase returns the URL dbURL with another database name.
func withDatabase(t *testing.T, dbURL, name string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		t.Skipf("the test database's address is not a postgres:// URL (%v)", err)
	}
	u.Path, u.RawPath = "/"+name, ""
	q := u.Query()
	q.Del("dbname")
	u.RawQuery = q.Encode()
	return u.String()
}
