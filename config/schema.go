package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"

	"github.com/notifyd/notifyd/sql/sqlregex"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// ParamsError says why params do not match a notifier's JSON Schema. Details
// lists every failing value, sorted by Pointer.
type ParamsError struct {
	Details []ParamsDetail
}

// ParamsDetail is one failing value. Pointer is an RFC 6901 JSON pointer into
// the params object: "/post_title", "/items/0/name", and "" for the params
// object itself. A missing required property is reported at the pointer the
// property would have ("/author_name"), and so is a property that
// additionalProperties: false forbids.
type ParamsDetail struct {
	Pointer string `json:"pointer"`
	Message string `json:"message"`
}

// Error lists the details on one line: `invalid params: /author_name: missing
// required property; /post_title: got number, want string`.
func (e *ParamsError) Error() string {
	parts := make([]string, len(e.Details))
	for i, d := range e.Details {
		p := d.Pointer
		if p == "" {
			p = "(params)"
		}
		parts[i] = p + ": " + d.Message
	}
	return "invalid params: " + strings.Join(parts, "; ")
}

// ValidateParams checks params against the notifier's params schema. A nil
// Schema accepts anything; nil params are validated as the empty object {}.
//
// Params are expected to be what encoding/json decodes into an `any`
// (map[string]any, []any, string, float64 or json.Number, bool, nil). Go
// callers may also pass other Go values (ints, []string, structs with json
// tags, time.Time): a value that is not JSON-shaped is normalised by a JSON
// round trip first. A failing value gives a *ParamsError; params that cannot
// be encoded as JSON at all give a *ParamsError with a "" pointer.
func (n *Notifier) ValidateParams(params map[string]any) error {
	if n.Schema == nil {
		return nil
	}
	var inst any = map[string]any{}
	if params != nil {
		inst = params
		if !jsonShaped(inst) {
			v, err := roundTrip(params)
			if err != nil {
				return &ParamsError{Details: []ParamsDetail{{Pointer: "", Message: fmt.Sprintf("not representable as JSON: %v", err)}}}
			}
			inst = v
		}
	}
	err := n.Schema.Validate(inst)
	if err == nil {
		return nil
	}
	var verr *jsonschema.ValidationError
	if errors.As(err, &verr) {
		return &ParamsError{Details: leafDetails(verr)}
	}
	return &ParamsError{Details: []ParamsDetail{{Pointer: "", Message: err.Error()}}}
}

// jsonShaped reports whether v holds only the types encoding/json decodes into
// (plus Go integers, which the validator understands).
func jsonShaped(v any) bool {
	switch v := v.(type) {
	case nil, string, bool, float64, json.Number, int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64:
		return true
	case map[string]any:
		for _, e := range v {
			if !jsonShaped(e) {
				return false
			}
		}
		return true
	case []any:
		for _, e := range v {
			if !jsonShaped(e) {
				return false
			}
		}
		return true
	}
	return false
}

func roundTrip(v any) (any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var out any
	if err := dec.Decode(&out); err != nil {
		return nil, err
	}
	return out, nil
}

var printer = message.NewPrinter(language.English)

// leafDetails flattens a validation error into its failing leaves. anyOf and
// oneOf failures are reported once, at their own location: listing why every
// alternative failed would drown the useful message.
func leafDetails(verr *jsonschema.ValidationError) []ParamsDetail {
	var out []ParamsDetail
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		ptr := pointer(e.InstanceLocation)
		switch k := e.ErrorKind.(type) {
		case *kind.AnyOf:
			out = append(out, ParamsDetail{ptr, "matches none of the allowed alternatives (anyOf)" + causes(e)})
			return
		case *kind.OneOf:
			if len(k.Subschemas) == 0 {
				out = append(out, ParamsDetail{ptr, "matches none of the allowed alternatives (oneOf)" + causes(e)})
			} else {
				out = append(out, ParamsDetail{ptr, fmt.Sprintf("matches more than one alternative (oneOf: %d and %d)", k.Subschemas[0], k.Subschemas[1])})
			}
			return
		}
		if len(e.Causes) > 0 {
			for _, c := range e.Causes {
				walk(c)
			}
			return
		}
		switch k := e.ErrorKind.(type) {
		case *kind.Required:
			for _, p := range k.Missing {
				out = append(out, ParamsDetail{ptr + "/" + escapePointer(p), "missing required property"})
			}
		case *kind.AdditionalProperties:
			for _, p := range k.Properties {
				out = append(out, ParamsDetail{ptr + "/" + escapePointer(p), "property not allowed"})
			}
		default:
			out = append(out, ParamsDetail{ptr, e.ErrorKind.LocalizedString(printer)})
		}
	}
	walk(verr)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Pointer < out[j].Pointer })
	return out
}

// causes summarises why each alternative of an anyOf/oneOf failed:
// `: got boolean, want string | got boolean, want number`.
func causes(e *jsonschema.ValidationError) string {
	var msgs []string
	seen := map[string]bool{}
	for _, c := range e.Causes {
		for _, d := range leafDetails(c) {
			m := d.Message
			if d.Pointer != pointer(e.InstanceLocation) {
				m = d.Pointer + ": " + m
			}
			if !seen[m] {
				seen[m] = true
				msgs = append(msgs, m)
			}
		}
	}
	if len(msgs) == 0 {
		return ""
	}
	return ": " + strings.Join(msgs, " | ")
}

func pointer(tokens []string) string {
	var b strings.Builder
	for _, t := range tokens {
		b.WriteByte('/')
		b.WriteString(escapePointer(t))
	}
	return b.String()
}

func escapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

func unescapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~1", "/"), "~0", "~")
}

// noLoader refuses every external $ref: a params schema must be
// self-contained, so `notifyd check` and `notifyd run` can never disagree
// about what a remote document said.
type noLoader struct{}

func (noLoader) Load(u string) (any, error) {
	return nil, fmt.Errorf("external $ref %q: params schemas must be self-contained (use $defs)", u)
}

// schemaURL is the made-up location a notifier's params schema is compiled at.
func schemaURL(name string) string {
	return "notifyd:///notifiers/" + url.PathEscape(name) + "/params.json"
}

// compileSchema compiles a notifier's params (already JSON-shaped) as a JSON
// Schema, draft 2020-12 unless $schema says otherwise. format keywords are
// asserted ("format: email" rejects "x"). Problems are reported at the key
// path of the offending schema keyword.
func compileSchema(el *errorList, path, name string, doc map[string]any) *jsonschema.Schema {
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	c.UseLoader(noLoader{})
	u := schemaURL(name)
	if err := c.AddResource(u, doc); err != nil {
		el.add(path, "invalid JSON Schema: %v", err)
		return nil
	}
	sch, err := c.Compile(u)
	if err == nil {
		return sch
	}
	var serr *jsonschema.SchemaValidationError
	var verr *jsonschema.ValidationError
	if errors.As(err, &serr) && errors.As(serr.Err, &verr) {
		for _, d := range leafDetails(verr) {
			p := pointerPath(path, doc, d.Pointer)
			el.add(p, "invalid JSON Schema: %s", d.Message)
		}
		return nil
	}
	msg := strings.ReplaceAll(err.Error(), u, "params")
	el.add(path, "invalid JSON Schema: %s", msg)
	return nil
}

// pointerPath turns a JSON pointer into doc into a config key path under
// path, so a schema error is reported on the line of the offending keyword.
func pointerPath(path string, doc any, ptr string) string {
	if ptr == "" {
		return path
	}
	cur := doc
	for _, tok := range strings.Split(ptr[1:], "/") {
		tok = unescapePointer(tok)
		switch v := cur.(type) {
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(v) {
				return path
			}
			path = fmt.Sprintf("%s[%d]", path, i)
			cur = v[i]
		case map[string]any:
			path = join(path, tok)
			cur = v[tok]
		default:
			return path
		}
	}
	return path
}

// formatExamples are example strings of the formats JSON Schema asserts.
var formatExamples = map[string]string{
	"date": "2030-01-02", "date-time": "2030-01-02T15:04:05Z", "time": "15:04:05Z", "duration": "P1D",
	"email": "ada@example.test", "idn-email": "ada@example.test", "hostname": "app.example.test",
	"idn-hostname": "app.example.test", "ipv4": "192.0.2.1", "ipv6": "2001:db8::1",
	"uri": "https://app.example.test/", "uri-reference": "https://app.example.test/", "iri": "https://app.example.test/",
	"iri-reference": "https://app.example.test/", "uri-template": "https://app.example.test/{id}",
	"uuid": "0190b8a4-6d3e-7c1a-9f00-2b1c3d4e5f60", "json-pointer": "/example", "relative-json-pointer": "0",
	"regex": "^example$",
}

// exampleParams builds params from a schema for `notifyd check` to render the
// templates with: for each value its examples[0], default, const or enum[0],
// else a value of its type (string "example", or one of its format; number and integer 1, boolean
// true, object with every listed and required property, array with one item
// when items is given). Local $refs ("#/$defs/x") are followed; anyOf/oneOf
// take their first alternative; allOf merges objects.
func exampleParams(schema map[string]any) map[string]any {
	g := exampleGen{root: schema, seen: map[string]bool{}}
	if m, ok := g.value(schema, 0).(map[string]any); ok {
		return m
	}
	return map[string]any{}
}

type exampleGen struct {
	root map[string]any
	seen map[string]bool // $refs being expanded, to stop recursive schemas
}

func (g *exampleGen) value(s any, depth int) any {
	sch, ok := s.(map[string]any)
	if !ok || depth > 16 {
		return nil
	}
	if ex, ok := sch["examples"].([]any); ok && len(ex) > 0 {
		return ex[0]
	}
	for _, k := range []string{"default", "const"} {
		if v, ok := sch[k]; ok {
			return v
		}
	}
	if en, ok := sch["enum"].([]any); ok && len(en) > 0 {
		return en[0]
	}
	if ref, ok := sch["$ref"].(string); ok && strings.HasPrefix(ref, "#") && !g.seen[ref] {
		if target := resolveLocalRef(g.root, ref); target != nil {
			g.seen[ref] = true
			defer delete(g.seen, ref)
			return g.value(target, depth+1)
		}
	}
	for _, k := range []string{"anyOf", "oneOf"} {
		if alts, ok := sch[k].([]any); ok && len(alts) > 0 {
			return g.value(alts[0], depth+1)
		}
	}
	typ := ""
	switch t := sch["type"].(type) {
	case string:
		typ = t
	case []any:
		for _, e := range t {
			if s, ok := e.(string); ok && s != "null" {
				typ = s
				break
			}
		}
	}
	if typ == "" {
		_, hasProps := sch["properties"]
		_, hasReq := sch["required"]
		_, hasAll := sch["allOf"]
		if hasProps || hasReq || hasAll {
			typ = "object"
		}
	}
	switch typ {
	case "string":
		// A string of the format the schema asserts, or the example would
		// fail its own schema.
		if f, ok := formatExamples[fmt.Sprint(sch["format"])]; ok {
			return f
		}
		return "example"
	case "number", "integer":
		return float64(1)
	case "boolean":
		return true
	case "null":
		return nil
	case "array":
		if items, ok := sch["items"].(map[string]any); ok {
			return []any{g.value(items, depth+1)}
		}
		return []any{}
	case "object":
		obj := map[string]any{}
		if all, ok := sch["allOf"].([]any); ok {
			for _, a := range all {
				if m, ok := g.value(a, depth+1).(map[string]any); ok {
					for k, v := range m {
						obj[k] = v
					}
				}
			}
		}
		if props, ok := sch["properties"].(map[string]any); ok {
			for k, p := range props {
				obj[k] = g.value(p, depth+1)
			}
		}
		if req, ok := sch["required"].([]any); ok {
			for _, r := range req {
				if k, ok := r.(string); ok {
					if _, done := obj[k]; !done {
						obj[k] = "example"
					}
				}
			}
		}
		return obj
	}
	return "example"
}

// resolveLocalRef follows a "#/a/b" reference inside root.
func resolveLocalRef(root map[string]any, ref string) any {
	ptr := strings.TrimPrefix(ref, "#")
	var cur any = root
	if ptr == "" {
		return cur
	}
	if !strings.HasPrefix(ptr, "/") {
		return nil
	}
	for _, tok := range strings.Split(ptr[1:], "/") {
		tok, _ = url.PathUnescape(tok)
		tok = unescapePointer(tok)
		switch v := cur.(type) {
		case map[string]any:
			cur = v[tok]
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(v) {
				return nil
			}
			cur = v[i]
		default:
			return nil
		}
	}
	return cur
}

// checkPatterns refuses every pattern keyword in a params schema that has no
// exact PostgreSQL translation: notify_send checks params in the database
// with PostgreSQL's regular expressions, and must refuse exactly the strings
// the API refuses. The error names the pattern's key and line.
func checkPatterns(el *errorList, path string, v any) {
	switch v := v.(type) {
	case map[string]any:
		for k, sub := range v {
			switch k {
			case "enum", "const", "default", "examples":
				continue // values, not schemas
			case "pattern":
				if p, ok := sub.(string); ok {
					if _, err := sqlregex.Translate(p); err != nil {
						el.add(join(path, k), "pattern %q: %v (notify_send checks patterns in PostgreSQL; write it another way)", p, err)
					}
					continue
				}
			}
			checkPatterns(el, join(path, k), sub)
		}
	case []any:
		for i, sub := range v {
			checkPatterns(el, fmt.Sprintf("%s[%d]", path, i), sub)
		}
	}
}
