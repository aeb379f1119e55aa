package stores_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/notifyd/notifyd/internal/testing/pgtest"
	"github.com/notifyd/notifyd/stores"
)

func TestReplacePreferences(t *testing.T) {
	t.Parallel()
	tx := pgtest.Tx(t)
	ctx := t.Context()

	got, err := stores.ListPreferences(ctx, tx, "pref-a")
	if err != nil || got == nil || len(got) != 0 {
		t.Fatalf("no rules: %v %v, want an empty non-nil list", got, err)
	}
	other := []stores.PreferenceRule{{Scope: "*", Channel: "*", Mode: "off"}}
	if err := stores.ReplacePreferences(ctx, tx, "pref-b", other); err != nil {
		t.Fatal(err)
	}

	first := []stores.PreferenceRule{
		{Scope: "notifier:comment.created", Channel: "email", Mode: "digest"},
		{Scope: "*", Channel: "email", Mode: "off"},
		{Scope: "category:comments", Channel: "*", Mode: "immediate"},
		{Scope: "*", Channel: "*", Mode: "immediate"},
	}
	if err := stores.ReplacePreferences(ctx, tx, "pref-a", first); err != nil {
		t.Fatal(err)
	}
	// Least specific scope first, then the channel: byte order.
	want := []stores.PreferenceRule{first[3], first[1], first[2], first[0]}
	if got, err = stores.ListPreferences(ctx, tx, "pref-a"); err != nil || !slices.Equal(got, want) {
		t.Fatalf("after first replace: %v %v, want %v", got, err, want)
	}

	// A replace is whole: rules not given are gone, a kept key takes the new mode.
	second := []stores.PreferenceRule{{Scope: "*", Channel: "email", Mode: "digest"}}
	if err := stores.ReplacePreferences(ctx, tx, "pref-a", second); err != nil {
		t.Fatal(err)
	}
	if got, err = stores.ListPreferences(ctx, tx, "pref-a"); err != nil || !slices.Equal(got, second) {
		t.Fatalf("after second replace: %v %v, want %v", got, err, second)
	}
	if err := stores.ReplacePreferences(ctx, tx, "pref-a", nil); err != nil {
		t.Fatal(err)
	}
	if got, err = stores.ListPreferences(ctx, tx, "pref-a"); err != nil || len(got) != 0 {
		t.Fatalf("after clearing: %v %v", got, err)
	}
	// Another recipient's rules were never touched.
	if got, err = stores.ListPreferences(ctx, tx, "pref-b"); err != nil || !slices.Equal(got, other) {
		t.Fatalf("pref-b: %v %v, want %v", got, err, other)
	}
}

// TestReplacePreferencesConcurrently races whole replaces of one rule set:
// each must succeed, and the set left is exactly one of those written (never
// a mix, never a unique violation from two inserts of the same keys).
func TestReplacePreferencesConcurrently(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewDB(t)
	ctx := context.Background()
	sets := make([][]stores.PreferenceRule, 8)
	for i := range sets {
		mode := []string{"immediate", "off"}[i%2]
		sets[i] = []stores.PreferenceRule{
			{Scope: "*", Channel: "*", Mode: mode},
			{Scope: fmt.Sprintf("notifier:n%d", i), Channel: "email", Mode: "digest"},
			{Scope: "category:shared", Channel: "in_app", Mode: mode},
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, len(sets))
	for i := range sets {
		wg.Go(func() {
			errs[i] = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				return stores.ReplacePreferences(ctx, tx, "pref-race", sets[i])
			})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("replace %d: %v", i, err)
		}
	}
	got, err := stores.ListPreferences(ctx, pool, "pref-race")
	if err != nil {
		t.Fatal(err)
	}
	for _, set := range sets {
		want := slices.Clone(set)
		slices.SortFunc(want, func(a, b stores.PreferenceRule) int {
			if a.Scope != b.Scope {
				return strings.Compare(a.Scope, b.Scope)
			}
			return strings.Compare(a.Channel, b.Channel)
		})
		if slices.Equal(got, want) {
			return
		}
	}
	t.Fatalf("rule set after concurrent replaces is none of those written: %v", got)
}
