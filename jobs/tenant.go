package jobs

import (
	"encoding/json"

	"github.com/notifyd/notifyd/notifytype"
)

// A notification's tenant reaches the jobs as the JSON record the stores read
// (the tenants row as notify_* functions return it). The fan-out reads its
// default rules and branding from it; the send job reads the branding its
// templates render with. Both decode it here, so a field the record gains is
// read the same way on either side.

// decodeTenant reads a tenant record ({"id", "name", "branding", ...}) as
// templates see it; nil for none.
func decodeTenant(record json.RawMessage) (*notifytype.Tenant, error) {
	if len(record) == 0 || string(record) == "null" {
		return nil, nil
	}
	var t struct {
		ID       string              `json:"id"`
		Name     string              `json:"name"`
		Branding notifytype.Branding `json:"branding"`
	}
	if err := json.Unmarshal(record, &t); err != nil {
		return nil, err
	}
	return &notifytype.Tenant{ID: t.ID, Name: t.Name, Branding: t.Branding}, nil
}

// tenantDefaults are the default rules of the tenant record a fan-out read
// (stores.FanoutState.TenantRecord); none without a tenant.
func tenantDefaults(record json.RawMessage) ([]notifytype.Rule, error) {
	if len(record) == 0 || string(record) == "null" {
		return nil, nil
	}
	var t struct {
		Preferences []notifytype.Rule `json:"preferences"`
	}
	if err := json.Unmarshal(record, &t); err != nil {
		return nil, err
	}
	for i := range t.Preferences {
		t.Preferences[i].Tenant = ""
	}
	return t.Preferences, nil
}
