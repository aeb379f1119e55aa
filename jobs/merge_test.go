package jobs

import (
	"slices"
	"testing"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/stores"
)

func TestMergeChunk(t *testing.T) {
	t.Parallel()
	rank := func(r string) int {
		return slices.Index([]string{"assigned", "author", "mentioned", "subscribed"}, r)
	}
	c := func(src int, id, reason string) stores.Candidate {
		return stores.Candidate{Source: src, Recipient: id, Reason: reason}
	}
	tests := []struct {
		name        string
		cands       []stores.Candidate
		window      int
		topics      int
		wantIDs     []string
		wantReasons []string
		wantCursor  string
		wantInline  int
		wantDone    bool
	}{
		{
			name:   "nothing left",
			window: 3, topics: 1,
			wantDone: true,
		},
		{
			name:        "inline only, not full",
			cands:       []stores.Candidate{c(0, "a", "author"), c(0, "b", "mentioned")},
			window:      3,
			wantIDs:     []string{"a", "b"},
			wantReasons: []string{"author", "mentioned"},
			wantCursor:  "b", wantInline: 2, wantDone: true,
		},
		{
			name:        "inline full: more may follow",
			cands:       []stores.Candidate{c(0, "a", "author"), c(0, "b", "author")},
			window:      2,
			wantIDs:     []string{"a", "b"},
			wantReasons: []string{"author", "author"},
			wantCursor:  "b", wantInline: 2,
		},
		{
			name: "topic full cuts the inline window at its last row",
			cands: []stores.Candidate{
				c(0, "a", "author"), c(0, "m", "author"), c(0, "z", "author"),
				c(1, "b", "subscribed"), c(1, "c", "subscribed"), c(1, "d", "subscribed"),
			},
			window: 3, topics: 1,
			wantIDs:     []string{"a", "b", "c", "d"},
			wantReasons: []string{"author", "subscribed", "subscribed", "subscribed"},
			wantCursor:  "d", wantInline: 1,
		},
		{
			name: "strongest reason wins across sources",
			cands: []stores.Candidate{
				c(0, "a", "mentioned"), c(1, "a", "assigned"), c(2, "a", "subscribed"), c(2, "b", "subscribed"),
			},
			window: 5, topics: 2,
			wantIDs:     []string{"a", "b"},
			wantReasons: []string{"assigned", "subscribed"},
			wantCursor:  "b", wantInline: 1, wantDone: true,
		},
		{
			name:   "unknown reasons rank after known ones",
			cands:  []stores.Candidate{c(0, "a", "whatever"), c(1, "a", "subscribed")},
			window: 5, topics: 1,
			wantIDs:     []string{"a"},
			wantReasons: []string{"subscribed"},
			wantCursor:  "a", wantInline: 1, wantDone: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rank := func(r string) int {
				if i := rank(r); i >= 0 {
					return i
				}
				return 100
			}
			m := mergeChunk(tt.cands, tt.window, tt.topics, rank)
			var ids, reasons []string
			for _, r := range m.recipients {
				ids = append(ids, r.ID)
				reasons = append(reasons, r.Reason)
			}
			if !slices.Equal(ids, tt.wantIDs) || !slices.Equal(reasons, tt.wantReasons) {
				t.Errorf("recipients = %v %v, want %v %v", ids, reasons, tt.wantIDs, tt.wantReasons)
			}
			cursor := ""
			if m.cursor != nil {
				cursor = *m.cursor
			}
			if cursor != tt.wantCursor || m.inlineTaken != tt.wantInline || m.done != tt.wantDone {
				t.Errorf("cursor=%q inline=%d done=%t, want %q %d %t", cursor, m.inlineTaken, m.done,
					tt.wantCursor, tt.wantInline, tt.wantDone)
			}
		})
	}
}

// The registrations the fan-out asks stores about are named as the
// channels name them: the candidates statement spells them out in SQL.
func TestRegistrationNamesAgree(t *testing.T) {
	t.Parallel()
	if stores.RegistrationPushSubscription != channels.PushSubscriptionAddress ||
		stores.RegistrationDevice+"ios" != channels.DeviceAddress("ios") {
		t.Fatalf("stores names %q and %q, channels %q and %q", stores.RegistrationPushSubscription,
			stores.RegistrationDevice+"ios", channels.PushSubscriptionAddress, channels.DeviceAddress("ios"))
	}
}
