package jobs

import (
	"encoding/json"
	"reflect"
	"testing"
)

// A batch of digests decodes each notification's params once, and every
// digest gets a copy of its own: a channel that changes one item's params
// (nested objects and arrays included) changes no other.
func TestParamsCacheGivesEachDigestItsOwnCopy(t *testing.T) {
	raw := json.RawMessage(`{"actor": "ada", "n": 3, "post": {"title": "Hi", "tags": ["a", "b"]}}`)
	c := paramsCache{}
	first := c.params(raw)
	want := map[string]any{"actor": "ada", "n": json.Number("3"),
		"post": map[string]any{"title": "Hi", "tags": []any{"a", "b"}}}
	if !reflect.DeepEqual(first, want) {
		t.Fatalf("decoded %#v, want %#v", first, want)
	}
	first["actor"] = "bob"
	first["post"].(map[string]any)["title"] = "changed"
	first["post"].(map[string]any)["tags"].([]any)[0] = "z"
	second := c.params(raw)
	if !reflect.DeepEqual(second, want) {
		t.Fatalf("after a change to the first copy the second is %#v, want %#v", second, want)
	}
	if len(c) != 1 {
		t.Fatalf("%d entries cached for one params value", len(c))
	}
	if got := c.params(json.RawMessage(`[1,`)); len(got) != 0 {
		t.Fatalf("malformed params decoded as %#v, want empty", got)
	}
	if got := c.params(nil); len(got) != 0 {
		t.Fatalf("no params decoded as %#v, want empty", got)
	}
}
