// Package gentypes writes the params type of every notifier of a config in
// TypeScript, Python, Go and RBS (Ruby), from the notifiers' JSON Schemas,
// so that an application's type checker or compiler refuses a misspelt
// notifier name or a param of the wrong type (`notifyd gen types`).
//
// The types follow the schema where a type system can: required properties
// are required and the others optional; enum and const are literal types;
// type lists, anyOf and oneOf are unions; allOf of objects is one object;
// local $refs are followed; integer and number are numbers (int64 and
// float64 in Go). An object with properties is closed unless
// additionalProperties says otherwise, so a misspelt param is an error, as it
// usually is in application code; an object without properties is a map.
// What a type system cannot say (minLength, pattern, format, if/then) is left
// to notify_send and the fan-out, which check the schema itself.
package gentypes

import (
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode"
)

// Notifier is one notifier: its name and its params JSON Schema (nil accepts
// any object), JSON-shaped as config holds it.
type Notifier struct {
	Name   string
	Schema map[string]any
}

// Languages are the values Generate's lang takes.
var Languages = []string{"ts", "python", "go", "rb"}

// Options tune the output.
type Options struct {
	// Source names the config in the generated file's header ("" leaves it out).
	Source string
	// GoPackage is the Go output's package name; "" is "notifiers".
	GoPackage string
}

// Generate writes the params types of notifiers in lang ("ts", "python",
// "go", or "rb" for RBS, Ruby's type signatures), notifiers in the order
// given.
func Generate(lang string, notifiers []Notifier, opts Options) ([]byte, error) {
	names := map[string]bool{}
	var ns []namedType
	for _, n := range notifiers {
		if names[n.Name] {
			return nil, fmt.Errorf("gentypes: notifier %q listed twice", n.Name)
		}
		names[n.Name] = true
		r := resolver{root: n.Schema, seen: map[string]bool{}}
		var t *typ
		if n.Schema == nil {
			t = &typ{kind: kMap, elem: &typ{kind: kUnknown}}
		} else {
			t = r.convert(n.Schema, 0)
		}
		ns = append(ns, namedType{notifier: n.Name, t: t})
	}
	switch lang {
	case "ts":
		return writeTS(ns, opts), nil
	case "python":
		return writePython(ns, opts), nil
	case "go":
		return writeGo(ns, opts)
	case "rb":
		return writeRBS(ns, opts), nil
	}
	return nil, fmt.Errorf("gentypes: unknown language %q (want one of %s)", lang, strings.Join(Languages, ", "))
}

// namedType is a notifier and its params type.
type namedType struct {
	notifier string
	t        *typ
}

type kind int

const (
	kUnknown kind = iota
	kString
	kNumber
	kInteger
	kBoolean
	kNull
	kLiteral // a JSON scalar: literal holds it
	kArray   // elem
	kMap     // string keys, elem values
	kObject  // props; open: other keys allowed
	kUnion   // alts
)

// typ is a params type, the part of a JSON Schema a type system can hold.
type typ struct {
	kind    kind
	literal any // string, float64, json.Number, bool or nil
	elem    *typ
	props   []prop
	open    bool
	alts    []*typ
	doc     string
}

type prop struct {
	name     string
	t        *typ
	required bool
}

// resolver converts one notifier's schema, following local $refs.
type resolver struct {
	root map[string]any
	seen map[string]bool // $refs being expanded, to stop recursion
}

const maxDepth = 32

func (r *resolver) convert(v any, depth int) *typ {
	s, ok := v.(map[string]any)
	if !ok || depth > maxDepth {
		return &typ{kind: kUnknown}
	}
	doc, _ := s["description"].(string)
	if doc == "" {
		doc, _ = s["title"].(string)
	}
	t := r.convertBare(s, depth)
	if t.doc == "" {
		t.doc = doc
	}
	return t
}

func (r *resolver) convertBare(s map[string]any, depth int) *typ {
	if ref, ok := s["$ref"].(string); ok {
		if !strings.HasPrefix(ref, "#") || r.seen[ref] {
			return &typ{kind: kUnknown}
		}
		target := resolveRef(r.root, ref)
		if target == nil {
			return &typ{kind: kUnknown}
		}
		r.seen[ref] = true
		defer delete(r.seen, ref)
		return r.convert(target, depth+1)
	}
	if c, ok := s["const"]; ok {
		if isScalar(c) {
			return &typ{kind: kLiteral, literal: c}
		}
		return &typ{kind: kUnknown}
	}
	if e, ok := s["enum"].([]any); ok && len(e) > 0 {
		var alts []*typ
		for _, v := range e {
			if !isScalar(v) {
				return &typ{kind: kUnknown}
			}
			alts = append(alts, &typ{kind: kLiteral, literal: v})
		}
		return union(alts)
	}
	for _, k := range []string{"anyOf", "oneOf"} {
		if alts, ok := s[k].([]any); ok && len(alts) > 0 {
			var ts []*typ
			for _, a := range alts {
				ts = append(ts, r.convert(a, depth+1))
			}
			return union(ts)
		}
	}
	if all, ok := s["allOf"].([]any); ok && len(all) > 0 {
		merged := &typ{kind: kObject}
		for _, a := range all {
			part := r.convert(a, depth+1)
			if part.kind != kObject {
				return &typ{kind: kUnknown}
			}
			merged = mergeObjects(merged, part)
		}
		own := r.object(s, depth)
		if len(own.props) > 0 {
			merged = mergeObjects(merged, own)
		}
		return merged
	}
	switch ty := s["type"].(type) {
	case string:
		return r.ofType(ty, s, depth)
	case []any:
		var ts []*typ
		for _, e := range ty {
			if name, ok := e.(string); ok {
				ts = append(ts, r.ofType(name, s, depth))
			}
		}
		return union(ts)
	}
	if _, ok := s["properties"]; ok {
		return r.object(s, depth)
	}
	if _, ok := s["required"]; ok {
		return r.object(s, depth)
	}
	if _, ok := s["items"]; ok {
		return r.ofType("array", s, depth)
	}
	return &typ{kind: kUnknown}
}

func (r *resolver) ofType(name string, s map[string]any, depth int) *typ {
	switch name {
	case "string":
		return &typ{kind: kString}
	case "number":
		return &typ{kind: kNumber}
	case "integer":
		return &typ{kind: kInteger}
	case "boolean":
		return &typ{kind: kBoolean}
	case "null":
		return &typ{kind: kNull}
	case "array":
		elem := &typ{kind: kUnknown}
		if items, ok := s["items"].(map[string]any); ok {
			if _, tuple := s["prefixItems"]; !tuple {
				elem = r.convert(items, depth+1)
			}
		}
		return &typ{kind: kArray, elem: elem}
	case "object":
		return r.object(s, depth)
	}
	return &typ{kind: kUnknown}
}

// object converts an object schema: a closed object of its properties, or
// a map when it has none.
func (r *resolver) object(s map[string]any, depth int) *typ {
	props, _ := s["properties"].(map[string]any)
	var required []string
	if req, ok := s["required"].([]any); ok {
		for _, x := range req {
			if name, ok := x.(string); ok {
				required = append(required, name)
			}
		}
	}
	names := make([]string, 0, len(props))
	for name := range props {
		names = append(names, name)
	}
	for _, name := range required {
		if _, ok := props[name]; !ok && !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	if len(names) == 0 {
		elem := &typ{kind: kUnknown}
		if ap, ok := s["additionalProperties"].(map[string]any); ok {
			elem = r.convert(ap, depth+1)
		}
		return &typ{kind: kMap, elem: elem}
	}
	t := &typ{kind: kObject}
	for _, name := range names {
		pt := &typ{kind: kUnknown}
		if ps, ok := props[name]; ok {
			pt = r.convert(ps, depth+1)
		}
		t.props = append(t.props, prop{name: name, t: pt, required: slices.Contains(required, name)})
	}
	switch ap := s["additionalProperties"].(type) {
	case bool:
		t.open = ap
	case map[string]any:
		t.open = true
	}
	if _, ok := s["patternProperties"]; ok {
		t.open = true
	}
	return t
}

func mergeObjects(a, b *typ) *typ {
	out := &typ{kind: kObject, open: a.open || b.open}
	byName := map[string]prop{}
	for _, p := range append(slices.Clone(a.props), b.props...) {
		if q, ok := byName[p.name]; ok {
			p.required = p.required || q.required
			if p.t.kind == kUnknown {
				p.t = q.t
			}
		}
		byName[p.name] = p
	}
	for _, name := range slices.Sorted(mapKeys(byName)) {
		out.props = append(out.props, byName[name])
	}
	return out
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// union flattens and de-duplicates alternatives; one is itself.
func union(ts []*typ) *typ {
	var alts []*typ
	for _, t := range ts {
		if t.kind == kUnion {
			alts = append(alts, t.alts...)
		} else {
			alts = append(alts, t)
		}
	}
	for _, t := range alts {
		if t.kind == kUnknown {
			return &typ{kind: kUnknown}
		}
	}
	if len(alts) == 1 {
		return alts[0]
	}
	if len(alts) == 0 {
		return &typ{kind: kUnknown}
	}
	return &typ{kind: kUnion, alts: alts}
}

func isScalar(v any) bool {
	switch v.(type) {
	case nil, string, bool, float64, json.Number:
		return true
	}
	return false
}

// resolveRef follows "#/a/b" inside root.
func resolveRef(root map[string]any, ref string) any {
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
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
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

// words splits s into its runs of letters and digits.
func words(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
}

// pascal is s in PascalCase ("comment.created" → "CommentCreated"), with
// Go's initialisms upper-cased when goStyle ("url" → "URL").
func pascal(s string, goStyle bool) string {
	var b strings.Builder
	for _, w := range words(s) {
		if goStyle && initialisms[strings.ToUpper(w)] {
			b.WriteString(strings.ToUpper(w))
			continue
		}
		r := []rune(w)
		r[0] = unicode.ToUpper(r[0])
		b.WriteString(string(r))
	}
	out := b.String()
	if out == "" || unicode.IsDigit([]rune(out)[0]) {
		out = "N" + out
	}
	return out
}

var initialisms = map[string]bool{"API": true, "HTML": true, "HTTP": true, "HTTPS": true, "ID": true, "IP": true,
	"JSON": true, "SMS": true, "SQL": true, "TTL": true, "UI": true, "URI": true, "URL": true, "UUID": true}

// namer hands out unique type names.
type namer map[string]bool

func (n namer) unique(base string) string {
	name := base
	for i := 2; n[name]; i++ {
		name = base + strconv.Itoa(i)
	}
	n[name] = true
	return name
}

// quoteJSON is v as a JSON literal.
func quoteJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
