package httpapi

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"

	"github.com/notifyd/notifyd/channels"
)

// openAPIDocument is the OpenAPI 3.1 description of the whole HTTP API: the
// routes of this package and the ones the daemon mounts (the inbox stream,
// /metrics, /riverui/). openapi_test.go checks it against the handlers: every
// route is documented, every documented route exists, every example and
// every response the tests provoke validates against its schema. The channel
// names in it are the built-in ones; openAPIFor writes a registry's in.
//
//go:embed openapi.json
var openAPIDocument []byte

// openAPIFor returns the document with reg's channels in the enums that name
// channels: a delivery's channel (every registered channel), a preference
// rule's channel ("*" and the per-recipient ones) and the effective
// preferences' channel keys (the per-recipient ones); and with its device
// platforms in a device's platform.
func openAPIFor(reg *channels.Registry) ([]byte, error) {
	var doc map[string]any
	if err := json.Unmarshal(openAPIDocument, &doc); err != nil {
		return nil, err
	}
	schemas, _ := dig(doc, "components", "schemas").(map[string]any)
	set := func(names []string, path ...string) error {
		m, ok := dig(schemas, path...).(map[string]any)
		if !ok {
			return fmt.Errorf("openapi.json: no schema at %v", path)
		}
		m["enum"] = names
		return nil
	}
	per := reg.PerRecipient()
	if err := set(reg.Names(), "Delivery", "properties", "channel"); err != nil {
		return nil, err
	}
	if err := set(append([]string{"*"}, per...), "PreferenceRule", "properties", "channel"); err != nil {
		return nil, err
	}
	if err := set(per, "EffectiveNotifier", "properties", "channels", "propertyNames"); err != nil {
		return nil, err
	}
	if err := set(reg.Names(), "DeliveryDetail", "properties", "channel"); err != nil {
		return nil, err
	}
	for _, schema := range []string{"DeviceInput", "Device"} {
		if err := set(nonNilStrings(reg.Platforms()), schema, "properties", "platform"); err != nil {
			return nil, err
		}
	}
	var original map[string]any
	_ = json.Unmarshal(openAPIDocument, &original)
	if reflect.DeepEqual(jsonRound(doc), original) {
		return openAPIDocument, nil // the built-in channels: the document as written
	}
	return json.MarshalIndent(doc, "", "  ")
}

// nonNilStrings is s, or an empty list for nil (an enum of nothing).
func nonNilStrings(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// jsonRound returns v as encoding/json decodes its encoding ([]string
// becomes []any), so it compares with a decoded document.
func jsonRound(v any) any {
	b, _ := json.Marshal(v)
	var out any
	_ = json.Unmarshal(b, &out)
	return out
}

func dig(v any, path ...string) any {
	for _, k := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

// openAPI is GET /v1/openapi.json: the document, with this daemon's
// channels. It is public: it describes the API, not anybody's data.
func (s *Server) openAPI(w http.ResponseWriter, _ *http.Request) error {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(s.openapi)
	return nil
}
