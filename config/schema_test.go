package config

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
)

const paramsConfig = `
notifiers:
  comment.created:
    params:
      type: object
      required: [post_title, author_name]
      additionalProperties: false
      properties:
        post_title: {type: string, minLength: 1}
        author_name: {type: string}
        count: {type: integer, minimum: 0}
        email: {type: string, format: email}
        "a/b": {type: boolean}
        tags: {type: array, items: {type: string}}
        kind: {anyOf: [{type: string}, {type: number}]}
        author:
          type: object
          required: [id]
          properties: {id: {type: string}}
  free: {}
`

func TestValidateParams(t *testing.T) {
	t.Parallel()

	c := mustParse(t, paramsConfig)
	n, _ := c.Notifier("comment.created")

	tests := []struct {
		name   string
		params map[string]any
		want   []ParamsDetail // nil: valid
	}{
		{"valid", map[string]any{"post_title": "Hello", "author_name": "Ada"}, nil},
		{"valid with every kind of value", map[string]any{
			"post_title": "Hello", "author_name": "Ada", "count": 3.0, "email": "ada@acme.test",
			"a/b": true, "tags": []any{"x"}, "kind": 2.5, "author": map[string]any{"id": "u1"},
		}, nil},
		{"Go ints and typed slices are normalised", map[string]any{
			"post_title": "Hello", "author_name": "Ada", "count": 3, "tags": []string{"x", "y"},
		}, nil},
		{"json.Number", map[string]any{"post_title": "Hello", "author_name": "Ada", "count": json.Number("7")}, nil},
		{"nil params are {}", nil, []ParamsDetail{
			{"/author_name", "missing required property"},
			{"/post_title", "missing required property"},
		}},
		{"wrong type", map[string]any{"post_title": 42.0, "author_name": "Ada"}, []ParamsDetail{
			{"/post_title", "got number, want string"},
		}},
		{"every failing leaf", map[string]any{
			"post_title": "", "count": -1.0, "email": "nope", "a/b": "yes", "tags": []any{"ok", 1.0},
			"kind": true, "author": map[string]any{}, "extra": 1.0,
		}, []ParamsDetail{
			{"/author/id", "missing required property"},
			{"/author_name", "missing required property"},
			{"/a~1b", "got string, want boolean"},
			{"/count", "minimum: got -1, want 0"},
			{"/email", "'nope' is not valid email: missing @"},
			{"/extra", "property not allowed"},
			{"/kind", "matches none of the allowed alternatives (anyOf): got boolean, want string | got boolean, want number"},
			{"/post_title", "minLength: got 0, want 1"},
			{"/tags/1", "got number, want string"},
		}},
		{"not an integer", map[string]any{"post_title": "x", "author_name": "y", "count": 1.5}, []ParamsDetail{
			{"/count", "got number, want integer"},
		}},
		{"struct values go through JSON", map[string]any{"post_title": "x", "author_name": "y", "author": struct {
			ID int `json:"id"`
		}{7}}, []ParamsDetail{
			{"/author/id", "got number, want string"},
		}},
		{"not representable as JSON", map[string]any{"post_title": "x", "author_name": "y", "f": func() {}}, []ParamsDetail{
			{"", "not representable as JSON: json: unsupported type: func()"},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := n.ValidateParams(tc.params)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("ValidateParams = %v, want nil", err)
				}
				return
			}
			var perr *ParamsError
			if !errors.As(err, &perr) {
				t.Fatalf("ValidateParams = %v (%T), want *ParamsError", err, err)
			}
			if !reflect.DeepEqual(perr.Details, tc.want) {
				t.Errorf("details:\n got %q\nwant %q", perr.Details, tc.want)
			}
		})
	}

	// Without a schema anything goes.
	free, _ := c.Notifier("free")
	for _, p := range []map[string]any{nil, {}, {"x": []any{1.0}}} {
		if err := free.ValidateParams(p); err != nil {
			t.Errorf("free.ValidateParams(%v) = %v", p, err)
		}
	}
}

func TestParamsErrorMessage(t *testing.T) {
	t.Parallel()

	err := &ParamsError{Details: []ParamsDetail{{"", "got array, want object"}, {"/a", "missing required property"}}}
	want := "invalid params: (params): got array, want object; /a: missing required property"
	if err.Error() != want {
		t.Errorf("Error() = %q, want %q", err.Error(), want)
	}
}

func TestExampleParams(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name   string
		schema string // YAML for params
		want   map[string]any
	}{
		{"types", `{type: object, properties: {s: {type: string}, n: {type: number}, i: {type: integer}, b: {type: boolean}, a: {type: array}, o: {type: object}, z: {type: "null"}}}`,
			map[string]any{"s": "example", "n": 1.0, "i": 1.0, "b": true, "a": []any{}, "o": map[string]any{}, "z": nil}},
		{"explicit values win", `{type: object, properties: {e: {type: string, examples: [first, second], default: d}, d: {type: integer, default: 5}, c: {const: fixed}, en: {enum: [b, a]}}}`,
			map[string]any{"e": "first", "d": 5.0, "c": "fixed", "en": "b"}},
		{"required but not listed", `{type: object, required: [x]}`, map[string]any{"x": "example"}},
		{"nested objects and arrays", `{properties: {o: {type: object, properties: {x: {type: string}}}, l: {type: array, items: {type: object, properties: {n: {type: integer}}}}}}`,
			map[string]any{"o": map[string]any{"x": "example"}, "l": []any{map[string]any{"n": 1.0}}}},
		{"type list", `{properties: {x: {type: ["null", integer]}}}`, map[string]any{"x": 1.0}},
		{"refs and alternatives", "{$defs: {user: {type: object, properties: {name: {type: string}}}}, properties: {u: {$ref: '#/$defs/user'}, v: {oneOf: [{type: boolean}, {type: string}]}}}",
			map[string]any{"u": map[string]any{"name": "example"}, "v": true}},
		{"recursive ref stops", "{$defs: {node: {type: object, properties: {next: {$ref: '#/$defs/node'}}}}, $ref: '#/$defs/node'}",
			map[string]any{"next": "example"}},
		{"allOf merges", `{allOf: [{properties: {a: {type: string}}}, {properties: {b: {type: boolean}}}]}`,
			map[string]any{"a": "example", "b": true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := mustParse(t, "notifiers:\n  n:\n    params: "+tc.schema+"\n")
			got := exampleParams(c.Notifiers["n"].Params)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %#v\nwant %#v", got, tc.want)
			}
		})
	}
}

func TestParamsAreJSONShaped(t *testing.T) {
	t.Parallel()

	c := mustParse(t, `
notifiers:
  n:
    params: {type: object, properties: {x: {type: integer, maximum: 10}}}
    example: {int: 3, float: 1.5, big: 12345678901234567890, list: [a, 1], on: true, none: ~, when: 2024-01-02}
`)
	n := c.Notifiers["n"]
	want := map[string]any{
		"int": 3.0, "float": 1.5, "big": json.Number("12345678901234567890"), "list": []any{"a", 1.0},
		"on": true, "none": nil, "when": "2024-01-02",
	}
	if !reflect.DeepEqual(n.Example, want) {
		t.Errorf("Example = %#v\nwant %#v", n.Example, want)
	}
	if _, err := json.Marshal(n.Params); err != nil {
		t.Errorf("Params do not marshal: %v", err)
	}
}
