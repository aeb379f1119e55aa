package channels

import (
	"fmt"
	netmail "net/mail"
	"net/url"
	"regexp"
	"strings"
)

// SuppressibleAddress reports whether a Plugin's Address names a profile
// field that is a destination a suppression list can hold: an email address,
// a webhook URL or a phone number. A channel with any other Address (or none)
// is never suppressed.
func SuppressibleAddress(field string) bool {
	return field == "email" || field == "webhook_url" || field == "phone"
}

// e164 is an E.164 phone number: +, a country code, at most 15 digits.
var e164 = regexp.MustCompile(`^\+[1-9][0-9]{7,14}$`)

// CheckSuppressionAddress reports what is wrong with address as a value of
// the profile field (a Plugin's Address) on a suppression list: an email
// field wants a bare address ("ann@example.test"), a webhook_url field an
// absolute URL.
func CheckSuppressionAddress(field, address string) error {
	a := strings.TrimSpace(address)
	if a == "" || len(a) > 320 {
		return fmt.Errorf("want 1 to 320 bytes")
	}
	switch field {
	case "email":
		p, err := netmail.ParseAddress(a)
		if err != nil || p.Address != a || p.Name != "" {
			return fmt.Errorf("%q is not a bare email address such as ann@example.test", address)
		}
	case "phone":
		if !e164.MatchString(a) {
			return fmt.Errorf("%q is not an E.164 phone number such as +14155550100", address)
		}
	case "webhook_url":
		u, err := url.Parse(a)
		if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
			return fmt.Errorf("%q is not an absolute http(s) URL", address)
		}
	default:
		return fmt.Errorf("the %s field is not an address a suppression can hold", field)
	}
	return nil
}
