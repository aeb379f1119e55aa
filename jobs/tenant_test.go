package jobs

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/notifyd/notifyd/notifytype"
)

func TestDecodeTenant(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		record  string
		want    *notifytype.Tenant
		wantErr bool
	}{
		{name: "none", record: "", want: nil},
		{name: "null", record: "null", want: nil},
		{
			name:   "record",
			record: `{"id":"acme","name":"Acme","branding":{"logo_url":"https://acme.test/l.png","primary_color":"#123456"},"preferences":[]}`,
			want: &notifytype.Tenant{ID: "acme", Name: "Acme",
				Branding: notifytype.Branding{LogoURL: "https://acme.test/l.png", PrimaryColor: "#123456"}},
		},
		{name: "malformed", record: `{"id":1}`, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := decodeTenant(json.RawMessage(tc.record))
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("tenant = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestTenantDefaults(t *testing.T) {
	t.Parallel()
	// A tenant's default rules never carry a tenant of their own, whatever
	// the record says: they rank below every recipient rule.
	got, err := tenantDefaults(json.RawMessage(`{"id":"acme","preferences":[{"scope":"billing","channel":"email","mode":"off","tenant":"acme"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	want := []notifytype.Rule{{Scope: "billing", Channel: "email", Mode: notifytype.Mode("off")}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("defaults = %+v, want %+v", got, want)
	}
	if got, err := tenantDefaults(nil); got != nil || err != nil {
		t.Errorf("no record: %v, %v", got, err)
	}
}
