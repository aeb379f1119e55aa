package config

import (
	"strings"
	"testing"
)

// TestSectionWithStepsIntoLists: a numeric part of a With key sets a key of
// that entry of a list; an entry the list does not have is an error; the
// section it was made from is left as it was.
func TestSectionWithStepsIntoLists(t *testing.T) {
	t.Parallel()
	c, err := Parse("t.yaml", []byte(`
channels:
  sms:
    providers:
      - {kind: twilio}
      - {kind: vonage, base_url: "https://api.nexmo.com"}
`))
	if err != nil {
		t.Fatal(err)
	}
	sec := c.Channels["sms"]
	got, err := sec.With("", map[string]any{"providers.1.base_url": "http://127.0.0.1:1", "providers.0.name": "a"})
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{"providers.1.base_url": "http://127.0.0.1:1", "providers.0.name": "a",
		"providers.0.kind": "twilio", "providers.1.kind": "vonage"} {
		if v, _ := got.Value(key); v != want {
			t.Errorf("%s = %q, want %q", key, v, want)
		}
	}
	if v, _ := sec.Value("providers.1.base_url"); v != "https://api.nexmo.com" {
		t.Errorf("the original changed: %q", v)
	}
	if _, err := sec.With("", map[string]any{"providers.2.base_url": "x"}); err == nil || !strings.Contains(err.Error(), "providers.2") {
		t.Errorf("a missing entry: %v", err)
	}
}
