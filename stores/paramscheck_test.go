package stores_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/internal/testing/pgtest"
	"github.com/notifyd/notifyd/stores"
)

// decode reads JSON as config holds schemas and the API holds params.
func decode(t *testing.T, s string) any {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("%s: %v", s, err)
	}
	return v
}

// What is kept of a schema: the checkable keywords, and nothing whose
// meaning depends on a keyword SQL does not check.
func TestCompileParamsCheckKeepsOnlyWhatTheSchemaImplies(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, schema, want string
	}{
		{"nil", `null`, ``},
		{"nothing checkable", `{"description": "x", "format": "ipv4"}`, ``},
		{"format", `{"format": "uri"}`, `{"format":"uri","formatPattern":"^[A-Za-z][A-Za-z0-9+.-]*:"}`},
		{"object", `{"type": "object", "required": ["b", "a", "a"], "properties": {"a": {"type": "string", "minLength": 1}, "b": {}}}`,
			`{"type":["object"],"required":["a","b"],"properties":{"a":{"type":["string"],"minLength":1},"b":{}}}`},
		{"additionalProperties false", `{"properties": {"a": {"format": "ipv4"}}, "additionalProperties": false}`,
			`{"properties":{"a":{}},"additionalProperties":false}`},
		{"additionalProperties beside patternProperties", `{"patternProperties": {"^x": {}}, "additionalProperties": false, "required": ["a"]}`,
			`{"required":["a"]}`},
		{"additionalProperties a schema", `{"additionalProperties": {"type": "string"}, "required": ["a"]}`, `{"required":["a"]}`},
		{"unchecked properties only", `{"properties": {"a": {"format": "ipv4"}}}`, ``},
		{"$ref hides the node", `{"properties": {"a": {"$ref": "#/$defs/x", "type": "string"}}, "required": ["a"], "$defs": {"x": {"type": "string"}}}`,
			`{"required":["a"]}`},
		{"boolean subschema", `{"properties": {"a": false}, "additionalProperties": false}`,
			`{"properties":{"a":{}},"additionalProperties":false}`},
		{"items", `{"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 10.5}}`,
			`{"type":["array"],"items":{"type":["integer"],"minimum":0,"maximum":10.5}}`},
		{"items beside prefixItems", `{"prefixItems": [{"type": "string"}], "items": {"type": "integer"}}`, ``},
		{"items as a tuple", `{"items": [{"type": "string"}]}`, ``},
		{"scalar enum and const", `{"enum": ["a", 1, null, true], "const": "a"}`, `{"enum":["a",1,null,true],"const":"a"}`},
		{"enum with an object", `{"enum": [{"a": 1}, "a"], "const": [1]}`, ``},
		{"empty enum", `{"enum": []}`, ``},
		{"const null", `{"const": null}`, `{"const":null}`},
		{"draft-04 has no const", `{"$schema": "http://json-schema.org/draft-04/schema#", "const": "a", "maxLength": 3}`, `{"maxLength":3}`},
		{"type list", `{"type": ["string", "null"], "maxLength": 3}`, `{"type":["string","null"],"maxLength":3}`},
		{"exclusive bounds and item counts", `{"exclusiveMinimum": 0, "exclusiveMaximum": 2, "minItems": 1, "maxItems": 3}`,
			`{"exclusiveMinimum":0,"exclusiveMaximum":2,"minItems":1,"maxItems":3}`},
		{"draft-04's exclusive bounds are booleans", `{"$schema": "http://json-schema.org/draft-04/schema#", "minimum": 1, "exclusiveMinimum": true}`,
			`{"minimum":1}`},
	}
	for _, tt := range tests {
		var schema map[string]any
		if s, ok := decode(t, tt.schema).(map[string]any); ok {
			schema = s
		}
		got, err := stores.CompileParamsCheck(schema)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if got.Schema != tt.want {
			t.Errorf("%s: schema %s, want %s", tt.name, got.Schema, tt.want)
		}
		if (got.Check == "") != (tt.want == "") {
			t.Errorf("%s: check %q for schema %q", tt.name, got.Check, got.Schema)
		}
		// Strict mode (slower) only where a filter could unwrap an array.
		if mode, _, _ := strings.Cut(got.Check, " "); got.Check != "" &&
			mode != map[bool]string{true: "strict", false: "lax"}[strings.Contains(got.Schema, `"items"`)] {
			t.Errorf("%s: check in %s mode: %s", tt.name, mode, got.Check)
		}
	}
}

// paramsCase is a schema and instances to check against it.
type paramsCase struct {
	schema    string
	instances []string
}

var paramsCases = []paramsCase{
	{`{"type": "object", "required": ["author_name", "post_title"],
	   "properties": {"author_name": {"type": "string", "minLength": 1, "maxLength": 5}, "post_title": {"type": "string"},
	                  "n": {"type": "integer", "minimum": 1, "maximum": 9}, "x": {"type": ["number", "null"]}}}`,
		[]string{`{"author_name": "Ada", "post_title": "Hi"}`, `{"post_title": "Hi"}`, `{"author_name": "Ada"}`, `{}`,
			`{"author_name": "", "post_title": "Hi"}`, `{"author_name": "Adalovelace", "post_title": "Hi"}`,
			`{"author_name": "Åsa", "post_title": "x"}`, `{"author_name": "日本語日本", "post_title": "x"}`,
			`{"author_name": 7, "post_title": "Hi"}`, `{"author_name": ["Ada"], "post_title": "Hi"}`,
			`{"author_name": "Ada", "post_title": "Hi", "n": 3}`, `{"author_name": "Ada", "post_title": "Hi", "n": 3.0}`,
			`{"author_name": "Ada", "post_title": "Hi", "n": 3.5}`, `{"author_name": "Ada", "post_title": "Hi", "n": 0}`,
			`{"author_name": "Ada", "post_title": "Hi", "n": 10}`, `{"author_name": "Ada", "post_title": "Hi", "n": "3"}`,
			`{"author_name": "Ada", "post_title": "Hi", "n": [3]}`, `{"author_name": "Ada", "post_title": "Hi", "x": null}`,
			`{"author_name": "Ada", "post_title": "Hi", "x": 1e3}`, `{"author_name": "Ada", "post_title": "Hi", "x": "1"}`,
			`{"author_name": "Ada", "post_title": "Hi", "extra": {"any": "thing"}}`}},
	{`{"type": "object", "additionalProperties": false,
	   "properties": {"kind": {"enum": ["a", "b", 3]}, "on": {"const": true}, "tags": {"type": "array", "items": {"type": "string", "maxLength": 2}},
	                  "user": {"type": "object", "required": ["id"], "properties": {"id": {"type": "string"}, "a/b~c": {"type": "boolean"}},
	                           "additionalProperties": false}}}`,
		[]string{`{}`, `{"kind": "a"}`, `{"kind": "c"}`, `{"kind": 3}`, `{"kind": 3.0}`, `{"kind": ["a"]}`, `{"kind": null}`,
			`{"on": true}`, `{"on": false}`, `{"on": [true]}`, `{"other": 1}`, `{"kind": "a", "zzz": 1}`,
			`{"tags": []}`, `{"tags": ["ab", "c"]}`, `{"tags": ["ab", "abc"]}`, `{"tags": ["ab", 3]}`, `{"tags": "ab"}`,
			`{"tags": [["ab"]]}`, `{"user": {"id": "u1"}}`, `{"user": {}}`, `{"user": {"id": "u1", "name": "x"}}`,
			`{"user": {"id": "u1", "a/b~c": true}}`, `{"user": {"id": "u1", "a/b~c": "yes"}}`, `{"user": [{"id": "u1"}]}`,
			`{"user": "u1"}`}},
	{`{"type": "object", "properties": {"s": {"maxLength": 300, "minLength": 256}, "deep": {"items": {"items": {"enum": [1, 2]}}}}}`,
		[]string{`{}`, `{"s": "` + strings.Repeat("é", 256) + `"}`, `{"s": "` + strings.Repeat("x", 255) + `"}`,
			`{"s": "` + strings.Repeat("x", 300) + `"}`, `{"s": "` + strings.Repeat("x", 301) + `"}`, `{"s": 5}`,
			`{"s": "` + strings.Repeat(`a\n`, 150) + `"}`,
			`{"deep": [[1, 2], [2]]}`, `{"deep": [[1, 3]]}`, `{"deep": [1, 2]}`, `{"deep": [[1], "x"]}`}},
	{`{"type": "object", "properties": {"q": {"type": "string", "enum": ["say \"hi\"", "back\\slash", "new\nline"]}}}`,
		[]string{`{"q": "say \"hi\""}`, `{"q": "back\\slash"}`, `{"q": "new\nline"}`, `{"q": "say hi"}`}},
	{`{"type": "object", "properties": {"p": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1.5},
	   "list": {"type": ["array", "string"], "minItems": 1, "maxItems": 2}, "any": {"minItems": 2}}}`,
		[]string{`{"p": 0.5}`, `{"p": 0}`, `{"p": 1.5}`, `{"p": 1.49}`, `{"p": -1}`, `{"p": "0"}`,
			`{"list": ["a"]}`, `{"list": ["a", "b"]}`, `{"list": []}`, `{"list": ["a", "b", "c"]}`, `{"list": "abc"}`,
			`{"any": 5}`, `{"any": [1]}`, `{"any": [1, 2]}`, `{"any": {"a": 1}}`}},
	// Formats: SQL checks a necessary condition of each (formatPatterns).
	{`{"type": "object", "properties": {"link": {"type": "string", "format": "uri"}, "id": {"format": "uuid"},
	   "day": {"format": "date"}, "at": {"format": "date-time"}, "mail": {"type": ["string", "null"], "format": "email"},
	   "links": {"type": "array", "items": {"format": "uri"}}}}`,
		[]string{`{"link": "https://example.com/a?b#c"}`, `{"link": "mailto:ada@example.com"}`, `{"link": "example.com/a"}`,
			`{"link": "/relative"}`, `{"link": ""}`, `{"link": "a#b:c"}`, `{"link": "1http://x"}`, `{"link": 7}`,
			`{"id": "0190c6b2-7a3c-7def-8a12-3456789abcde"}`, `{"id": "0190C6B2-7A3C-7DEF-8A12-3456789ABCDE"}`,
			`{"id": "0190c6b2-7a3c-7def-8a12-3456789abcdx"}`, `{"id": "0190c6b27a3c7def8a123456789abcde"}`, `{"id": 5}`,
			`{"day": "2026-12-07"}`, `{"day": "2026-13-07"}`, `{"day": "2026-12-7"}`, `{"day": "2026-02-30"}`,
			`{"at": "2026-12-07T20:00:00Z"}`, `{"at": "2026-12-07t20:00:00.5+01:00"}`, `{"at": "2026-12-07 20:00:00Z"}`,
			`{"at": "2026-12-07T20:00Z"}`, `{"at": "2026-12-07"}`,
			`{"mail": "ada@example.com"}`, `{"mail": null}`, `{"mail": "ada"}`, `{"mail": "ada@"}`, `{"mail": "@example.com"}`,
			`{"links": ["https://a.example", "b"]}`, `{"links": []}`}},
}

// notify_send's check (the compiled SQL/JSON path) and the walk that
// explains a failure (notify_params_violation) agree on every instance, and
// both accept whatever the full schema accepts; what they refuse, the Go
// validator refuses too, at the same pointer when the failing keyword is
// one of those SQL checks.
func TestParamsCheckAgreesWithItsWalkAndTheSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tx := pgtest.Tx(t)
	for i, c := range paramsCases {
		var yaml bytes.Buffer
		fmt.Fprintf(&yaml, "notifiers:\n  n:\n    params: %s\n    channels:\n      in_app: {title: x}\n", strings.ReplaceAll(c.schema, "\n", " "))
		cfg, err := config.Parse("test.yaml", yaml.Bytes())
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		nf, _ := cfg.Notifier("n")
		check, err := stores.CompileParamsCheck(nf.Params)
		if err != nil || check.Check == "" {
			t.Fatalf("case %d: nothing to check (%v)", i, err)
		}
		for _, inst := range c.instances {
			params, _ := decode(t, inst).(map[string]any)
			goErr := nf.ValidateParams(params)
			var pass *bool
			var violation []string
			err := tx.QueryRow(ctx, `SELECT $1::jsonb @@ $2::jsonpath, notify_params_violation($3::jsonb, $1::jsonb)`,
				inst, check.Check, check.Schema).Scan(&pass, &violation)
			if err != nil {
				t.Fatalf("case %d, %s: %v\npath: %s", i, inst, err, check.Check)
			}
			ok := pass != nil && *pass
			if ok != (violation == nil) {
				t.Errorf("case %d, %s: the path says %v, the walk %v\npath: %s", i, inst, pass, violation, check.Check)
			}
			if goErr == nil && !ok {
				t.Errorf("case %d, %s: the schema accepts it, SQL refuses it (%v)\npath: %s", i, inst, violation, check.Check)
			}
			if violation == nil {
				continue
			}
			var pe *config.ParamsError
			if !errors.As(goErr, &pe) {
				t.Errorf("case %d, %s: SQL refuses it (%v), the schema accepts it", i, inst, violation)
				continue
			}
			found := false
			for _, d := range pe.Details {
				found = found || d.Pointer == violation[0]
			}
			if !found {
				t.Errorf("case %d, %s: SQL names %q (%s), the schema %v", i, inst, violation[0], violation[1], pe.Details)
			}
		}
	}
}

// The schema is compiled when the catalog is published, not per call: the
// catalog holds both forms, and notify_send refuses bad params with the
// pointer and the words of the first violation, naming the notifier, before
// anything is written.
func TestNotifySendChecksParams(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tx := pgtest.Tx(t)
	check, err := stores.CompileParamsCheck(decode(t, paramsCases[0].schema).(map[string]any))
	if err != nil {
		t.Fatal(err)
	}
	c := stores.Catalog{Fanout: stores.FanoutJob{Kind: "notify.fanout", Queue: "fanout", MaxAttempts: 25, Priority: 1},
		Notifiers: []stores.CatalogNotifier{{Name: "params.checked", MaxRecipients: 10, Params: check},
			{Name: "params.free", MaxRecipients: 10}}}
	if _, _, err := stores.PublishCatalog(ctx, tx, c, false); err != nil {
		t.Fatal(err)
	}
	read, err := stores.ReadCatalog(ctx, tx)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range read.Notifiers {
		if n.Name == "params.checked" && (n.Params.Check == "" || n.Params.Schema == "") ||
			n.Name == "params.free" && n.Params != (stores.ParamsCheck{}) {
			t.Fatalf("catalog holds %+v", n)
		}
	}
	for _, tt := range []struct {
		notifier, params, pointer, message string
	}{
		{"params.checked", `{"post_title": "Hi"}`, "/author_name", "missing required property"},
		{"params.checked", `{"author_name": 5, "post_title": "Hi"}`, "/author_name", "got number, want string"},
		{"params.checked", `{"author_name": "Ada", "post_title": "Hi", "n": 2.5}`, "/n", "got number, want integer"},
		{"params.checked", `{"author_name": "Ada", "post_title": "Hi", "n": 12}`, "/n", "maximum: got 12, want 9"},
		{"params.checked", `{"author_name": "Adalovelace", "post_title": "Hi"}`, "/author_name", "maxLength: got 11, want 5"},
		{"params.checked", `{"author_name": "Ada", "post_title": "Hi"}`, "", ""},
		{"params.free", `{"anything": ["goes"]}`, "", ""},
	} {
		_, err := tx.Exec(ctx, `SAVEPOINT p`)
		if err != nil {
			t.Fatal(err)
		}
		_, err = tx.Exec(ctx, `SELECT notify_send($1, 'k-' || md5($2), '["u1"]', $2::jsonb)`, tt.notifier, tt.params)
		in, ok := stores.InputErrorOf(err)
		if tt.pointer == "" && tt.message == "" {
			if err != nil {
				t.Errorf("%s %s: %v", tt.notifier, tt.params, err)
			}
			continue
		}
		if !ok || !in.Schema || in.Field != "params" || in.Pointer != tt.pointer || in.Message != tt.message {
			t.Errorf("%s %s: %v (%+v), want params %s: %s", tt.notifier, tt.params, err, in, tt.pointer, tt.message)
		}
		if want := tt.notifier + ": params " + tt.pointer + ": " + tt.message; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s %s: %v, want the message %q", tt.notifier, tt.params, err, want)
		}
		if _, err := tx.Exec(ctx, `ROLLBACK TO SAVEPOINT p`); err != nil {
			t.Fatal(err)
		}
	}
	var written int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM notify_notifications WHERE notifier LIKE 'params.%'`).Scan(&written); err != nil {
		t.Fatal(err)
	}
	if written != 2 {
		t.Fatalf("%d notifications written, want the 2 valid ones", written)
	}
}
