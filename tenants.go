package notifyd

import (
	"github.com/notifyd/notifyd/notifytype"

	"strings"
	"unicode"
	"unicode/utf8"
)

// CheckTenantID reports what is wrong with a tenant id, as an *InputError
// for field, or nil: a tenant id is 1 to 255 bytes of UTF-8 without control
// characters.
func CheckTenantID(field, id string) error {
	switch {
	case id == "":
		return &InputError{Field: field, Message: "is required"}
	case len(id) > 255:
		return &InputError{Field: field, Message: "longer than 255 bytes"}
	case !utf8.ValidString(id):
		return &InputError{Field: field, Message: "is not valid UTF-8"}
	case strings.IndexFunc(id, unicode.IsControl) >= 0:
		return &InputError{Field: field, Message: "contains a control character"}
	}
	return nil
}

// Branding is a tenant's branding (PUT /v1/tenants/{id}): its logo and
// colour for templates (.Tenant.Branding), and the From address of its
// emails.
type Branding = notifytype.Branding

// TenantInfo is a tenant as templates see it (.Tenant): ID, Name and
// Branding.
type TenantInfo = notifytype.Tenant
