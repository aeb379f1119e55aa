package jobs_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/notifyd/notifyd/jobs"
)

// A send job's ids are stored packed, 16 bytes each, and come back as the
// same strings; a job in the older list form, and ids that are not UUIDs,
// round-trip too.
func TestSendArgsPackTheirIDs(t *testing.T) {
	t.Parallel()
	ids := []string{"01900000-0000-7000-8000-0000000000e1", "019ad2b4-5f3e-7c41-9a0b-ffeeddccbbaa"}
	b, err := json.Marshal(jobs.SendArgs{DeliveryIDs: ids})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "delivery_ids") || len(b) > 60 {
		t.Errorf("stored args %s, want the ids packed", b)
	}
	var back jobs.SendArgs
	if err := json.Unmarshal(b, &back); err != nil || !slices.Equal(back.DeliveryIDs, ids) {
		t.Fatalf("round trip: %v %v, want %v", back.DeliveryIDs, err, ids)
	}

	var old jobs.SendArgs
	if err := json.Unmarshal([]byte(`{"delivery_ids": ["`+ids[0]+`"]}`), &old); err != nil || !slices.Equal(old.DeliveryIDs, ids[:1]) {
		t.Fatalf("list form: %v %v", old.DeliveryIDs, err)
	}

	odd := []string{"not-a-uuid", ids[0]}
	b, err = json.Marshal(jobs.SendArgs{DeliveryIDs: odd})
	if err != nil {
		t.Fatal(err)
	}
	var oddBack jobs.SendArgs
	if err := json.Unmarshal(b, &oddBack); err != nil || !slices.Equal(oddBack.DeliveryIDs, odd) {
		t.Fatalf("non-UUID ids: stored %s, read %v %v", b, oddBack.DeliveryIDs, err)
	}

	var bad jobs.SendArgs
	if err := json.Unmarshal([]byte(`{"ids": "AAEC"}`), &bad); err == nil {
		t.Error("ids of 3 bytes decoded without an error")
	}
}
