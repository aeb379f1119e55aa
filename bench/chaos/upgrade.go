package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"
)

// previousRelease is the commit of the release before this one, notifyd
// 0.4.0 (CHANGELOG.md; migration 00038 and its function files): its
// replicas must keep working beside this release's on a database this
// release migrated (docs/upgrading.md). Move both on with each release.
const (
	previousRelease        = "9e543db"
	previousReleaseVersion = "0.4.0"
)

// buildPrevious builds the previous release's notifyd from this repository's
// history into dir.
func (e *env) buildPrevious(ctx context.Context, dir string) (string, error) {
	root, err := moduleRoot(ctx)
	if err != nil {
		return "", err
	}
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return "", err
	}
	archive := exec.CommandContext(ctx, "sh", "-c", `git -C "$1" archive "$2" | tar -x -C "$3"`, "sh", root, previousRelease, src)
	if out, err := archive.CombinedOutput(); err != nil {
		return "", fmt.Errorf("the previous release %s is not in this clone's history (a shallow clone?): %w\n%s", previousRelease, err, out)
	}
	bin := filepath.Join(dir, "notifyd-previous")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/notifyd")
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build the previous release: %w\n%s", err, out)
	}
	return bin, nil
}

// runUpgrade: a rolling upgrade under load. The previous release runs on
// its own schema with a 3,000-recipient fan-out going and one-recipient
// notifications at 20/s; this release migrates the database while it runs;
// the previous replica is restarted on the migrated schema; this release's
// replica joins and both serve side by side; then the previous one is
// drained. Nothing lost, nothing failed, no duplicate outside a crash window.
func runUpgrade(ctx context.Context, e *env, r *result, seed uint64) error {
	s, err := newStage(ctx, e, r, "upgrade", e.shared, seed)
	if err != nil {
		return err
	}
	defer s.close()
	t := time.Now()
	prev, err := e.buildPrevious(ctx, s.dir)
	if err != nil {
		return err
	}
	r.note("built the previous release %s (%s) in %s", previousReleaseVersion, previousRelease, time.Since(t).Round(time.Second))

	n := scaled(e, 3000)
	cfg := daemonConfig{fanoutChunk: 250, send: chaosSend, sendBatch: chaosSendBatch}
	oldCfg := cfg
	oldCfg.bin = prev
	old, err := s.oneDaemon(ctx, oldCfg, n) // migrated by the previous release
	if err != nil {
		return err
	}
	const key = "upgrade-1"
	id, err := s.send(ctx, old, key, ids(0, n))
	if err != nil {
		return err
	}

	// This release's replica (its config written now; it migrates and
	// starts later).
	newSlot, err := s.addSlot(ctx, "new", cfg)
	if err != nil {
		return err
	}
	var (
		mu      sync.Mutex
		targets = []*slot{old}
	)
	smalls := s.startTrickle(ctx, "upgrade-small", n, func(ctx context.Context, i int, key, recipient string) (string, error) {
		mu.Lock()
		sl := targets[i%len(targets)]
		mu.Unlock()
		id, err := s.send(ctx, sl, key, []string{recipient})
		if err != nil && sl != newSlot {
			// A replica that is draining closed its listener: a load
			// balancer sends the request to another one, as this does.
			s.logf("send %s to %s: %v; sent to %s instead", key, sl.name, err, newSlot.name)
			id, err = s.send(ctx, newSlot, key, []string{recipient})
		}
		return id, err
	})
	defer smalls.Stop()
	pause := func(d time.Duration) error {
		if !sleep(ctx, d) { // load runs for this long: the scenario's timeline
			return ctx.Err()
		}
		return nil
	}

	if err := pause(3 * time.Second); err != nil {
		return err
	}
	// Migrations first, while the previous release serves.
	t = time.Now()
	if err := e.migrateWith(ctx, e.bin, newSlot.cfgPath); err != nil {
		return fmt.Errorf("this release's migrate beside a running previous release: %w", err)
	}
	r.note("this release migrated the database in %s while the previous one served", time.Since(t).Round(time.Millisecond))
	if err := s.start(ctx, newSlot); err != nil {
		return err
	}
	setTargets := func(sl ...*slot) {
		mu.Lock()
		targets = sl
		mu.Unlock()
	}
	// A previous-release replica that restarts during the rollout starts
	// on the migrated schema; requests go elsewhere while it is down, as
	// a load balancer's readiness check makes them.
	setTargets(newSlot)
	old.proc.stop(40 * time.Second)
	if err := s.start(ctx, old); err != nil {
		return fmt.Errorf("the previous release does not start on the migrated database: %w", err)
	}
	setTargets(old, newSlot)
	r.note("both releases serve side by side")
	if err := pause(15 * time.Second); err != nil {
		return err
	}
	setTargets(newSlot)
	old.proc.stop(40 * time.Second)
	r.note("the previous release drained; this release alone")
	if err := pause(3 * time.Second); err != nil {
		return err
	}
	committed, refused := smalls.Stop()
	r.note("%d one-recipient notifications answered 202 during the rollout, %d refused", len(committed), len(refused))
	if len(refused) > 0 {
		r.fail("%d sends were refused during the rollout", len(refused))
	}

	snap, ok := s.waitFor(ctx, id, key, verifyReserve, func(snap *snapshot) bool {
		return snap.final() && snap.nonTerminal == 0 && len(snap.rows) == n && snap.inboxIDs == n
	})
	if !ok {
		r.fail("the large notification did not settle within the time budget")
	}
	snaps := map[string]*snapshot{}
	inbox := map[string]int{key: n}
	s.settleSmalls(ctx, r, committed, snaps, inbox)
	s.report(ctx)
	s.stopAll()
	if snap == nil {
		return fmt.Errorf("no snapshot of %s", id)
	}
	if snap, err = s.db.snapshot(context.WithoutCancel(ctx), id, key); err != nil {
		return err
	}
	snaps[key] = snap
	verify(r, snaps, s.mail.receipts(), expectation{
		inbox:        inbox,
		mustArrive:   func(row ledgerRow) bool { return row.channel == "email" },
		arrivals:     n + len(committed),
		strictWindow: true,
		dupBound:     2 * lanesBound(1),
		boundWhy:     fmt.Sprintf("2 drains of the previous release × %d lanes sending email, if a drain outlasts its 40 s", lanesBound(1)),
	})
	return nil
}
