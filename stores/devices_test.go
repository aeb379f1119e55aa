package stores_test

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/notifyd/notifyd/internal/testing/pgtest"
	"github.com/notifyd/notifyd/stores"
)

func TestDevices(t *testing.T) {
	t.Parallel()
	tx := pgtest.Tx(t)
	ctx := t.Context()

	phone, created, err := stores.PutDevice(ctx, tx, "r-dev", "", "ios", "aa01", "com.acme.app")
	if err != nil || !created {
		t.Fatalf("put phone: %v created %v", err, created)
	}
	tablet, _, err := stores.PutDevice(ctx, tx, "r-dev", "", "android", "fcm-1", "com.acme.app")
	if err != nil {
		t.Fatal(err)
	}
	other, _, err := stores.PutDevice(ctx, tx, "r-other", "", "ios", "aa01", "com.acme.app")
	if err != nil || other == phone {
		t.Fatalf("the same token for another recipient: %v, id %s", err, other)
	}
	// The same token again is the same device: its app replaced, failures
	// cleared, its id kept.
	if err := stores.DevicesFailed(ctx, tx, []string{phone}); err != nil {
		t.Fatal(err)
	}
	again, created, err := stores.PutDevice(ctx, tx, "r-dev", "", "ios", "aa01", "com.acme.app2")
	if err != nil || created || again != phone {
		t.Fatalf("put phone again: id %s (want %s), created %v, %v", again, phone, created, err)
	}
	list, err := stores.ListDevices(ctx, tx, "r-dev", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].ID != phone || list[0].App != "com.acme.app2" || list[0].Failures != 0 ||
		list[0].Platform != "ios" || list[1].ID != tablet || list[1].Token != "fcm-1" {
		t.Fatalf("list: %+v", list)
	}

	// A batch's devices of one platform, in one read.
	of, err := stores.ListDevicesOf(ctx, tx, "ios", []string{"r-dev", "r-other", "r-none"})
	if err != nil {
		t.Fatal(err)
	}
	if len(of) != 2 || len(of["r-dev"]) != 1 || of["r-dev"][0].ID != phone || len(of["r-other"]) != 1 {
		t.Fatalf("ios devices of three recipients: %+v", of)
	}

	if err := stores.DevicesSucceeded(ctx, tx, []string{phone}); err != nil {
		t.Fatal(err)
	}
	if err := stores.DevicesFailed(ctx, tx, []string{tablet}); err != nil {
		t.Fatal(err)
	}
	list, _ = stores.ListDevices(ctx, tx, "r-dev", "")
	if list[0].LastSuccessAt == nil || list[1].LastSuccessAt != nil || list[1].Failures != 1 {
		t.Fatalf("after outcomes: %+v", list)
	}

	// A recipient deletes only their own.
	if err := stores.DeleteDevice(ctx, tx, "r-dev", "", other); !errors.Is(err, stores.ErrNotFound) {
		t.Fatalf("delete another's: %v", err)
	}
	if err := stores.DeleteDevice(ctx, tx, "r-dev", "", "' OR 1=1 --"); !errors.Is(err, stores.ErrNotFound) {
		t.Fatalf("delete bad id: %v", err)
	}
	if err := stores.DeleteDevice(ctx, tx, "r-dev", "", phone); err != nil {
		t.Fatal(err)
	}
	if err := stores.RemoveDevices(ctx, tx, []string{tablet}); err != nil {
		t.Fatal(err)
	}
	if list, _ = stores.ListDevices(ctx, tx, "r-dev", ""); len(list) != 0 {
		t.Fatalf("left: %+v", list)
	}
	if list, _ = stores.ListDevices(ctx, tx, "r-other", ""); len(list) != 1 {
		t.Fatalf("the other recipient's device went too: %+v", list)
	}
}

func TestDeviceLimit(t *testing.T) {
	t.Parallel()
	tx := pgtest.Tx(t)
	ctx := t.Context()
	for i := range stores.MaxDevices {
		if _, _, err := stores.PutDevice(ctx, tx, "r-many", "", "android", fmt.Sprintf("tok-%02d", i), "com.acme.app"); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := stores.PutDevice(ctx, tx, "r-many", "", "android", "tok-new", "com.acme.app"); !errors.Is(err, stores.ErrTooManyDevices) {
		t.Fatalf("device %d: %v, want ErrTooManyDevices", stores.MaxDevices+1, err)
	}
	// A token registered already is not a new device.
	if _, created, err := stores.PutDevice(ctx, tx, "r-many", "", "android", "tok-07", "com.acme.app"); err != nil || created {
		t.Fatalf("re-registering at the limit: created %v, %v", created, err)
	}
	if n := countRows(t, tx, `SELECT count(*) FROM notify_devices WHERE recipient = 'r-many'`); n != stores.MaxDevices {
		t.Fatalf("%d devices", n)
	}
}

// Registrations racing for a recipient's last places cannot pass the limit
// together: each counts under the recipient lock.
func TestDeviceLimitUnderConcurrency(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewDB(t)
	ctx := t.Context()
	const racers = 30
	for round := range 3 {
		rid := fmt.Sprintf("r-race-%d", round)
		var wg sync.WaitGroup
		errs := make([]error, racers)
		for i := range racers {
			wg.Go(func() {
				_, _, errs[i] = stores.PutDevice(ctx, pool, rid, "", "ios", fmt.Sprintf("%064x", i), "com.acme.app")
			})
		}
		wg.Wait()
		var refused int
		for _, err := range errs {
			switch {
			case errors.Is(err, stores.ErrTooManyDevices):
				refused++
			case err != nil:
				t.Fatal(err)
			}
		}
		n := countRows(t, pool, `SELECT count(*) FROM notify_devices WHERE recipient = $1`, rid)
		if n != stores.MaxDevices || refused != racers-stores.MaxDevices {
			t.Fatalf("round %d: %d devices stored, %d refused; want %d and %d", round, n, refused, stores.MaxDevices,
				racers-stores.MaxDevices)
		}
	}
}

// The fan-out reads, with each candidate, which of the asked-for
// registrations the recipient has.
func TestFanoutCandidatesRegistrations(t *testing.T) {
	t.Parallel()
	tx := pgtest.Tx(t)
	ctx := t.Context()
	const id = "00000000-0000-7000-8000-00000000d001"
	exec(t, tx, `INSERT INTO notify_notifications (id, notifier, key, recipients, reasons, status, normalized)
		VALUES ($1, 'n', 'reg', ARRAY['reg-a', 'reg-b', 'reg-c', 'reg-d'], ARRAY['r', 'r', 'r', 'r'], 'pending', true)`, id)
	if err := stores.CreateLanes(ctx, tx, id, nil); err != nil {
		t.Fatal(err)
	}
	for _, d := range [][3]string{{"reg-a", "ios", "t1"}, {"reg-a", "ios", "t2"}, {"reg-a", "android", "t3"}, {"reg-b", "android", "t4"}} {
		if _, _, err := stores.PutDevice(ctx, tx, d[0], "", d[1], d[2], "com.acme.app"); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := stores.PutPushSubscription(ctx, tx, "reg-c", "", "https://push.test/c", "k", "a"); err != nil {
		t.Fatal(err)
	}
	read := func(registrations []string) map[string][]string {
		t.Helper()
		cands, err := stores.FanoutCandidates(ctx, tx, id, 0, 100, []string{"*"}, true, time.Now(), registrations, 0)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string][]string{}
		for _, c := range cands {
			slices.Sort(c.Registrations)
			out[c.Recipient] = c.Registrations
		}
		return out
	}
	all := []string{stores.RegistrationPushSubscription, stores.RegistrationDevice + "ios", stores.RegistrationDevice + "android"}
	got := read(all)
	want := map[string][]string{"reg-a": {"device:android", "device:ios"}, "reg-b": {"device:android"},
		"reg-c": {"push_subscription"}, "reg-d": {}}
	for r, w := range want {
		if !slices.Equal(got[r], w) {
			t.Errorf("%s has %v, want %v", r, got[r], w)
		}
	}
	// Only what is asked for is read.
	if got := read([]string{stores.RegistrationDevice + "ios"}); !slices.Equal(got["reg-a"], []string{"device:ios"}) ||
		len(got["reg-b"]) != 0 || len(got["reg-c"]) != 0 {
		t.Errorf("asked for ios devices: %v", got)
	}
	if got := read(nil); len(got["reg-a"]) != 0 || len(got["reg-c"]) != 0 {
		t.Errorf("asked for nothing: %v", got)
	}
}
