package config

import (
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"reflect"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// defaulter is implemented by config types that have defaults of their own.
// The decoder calls setDefaults on a freshly allocated value before decoding
// into it, so a key written in the file always wins over the default and a key
// left out keeps it.
type defaulter interface{ setDefaults() }

// Defaulter is implemented by a channel's config types that have defaults
// (see Problems.Decode): SetDefaults is called on a freshly allocated value
// before the file's keys are decoded into it, so a key written in the file
// wins and a key left out keeps its default.
type Defaulter interface{ SetDefaults() }

// setDefaults calls the value's defaulter, if it has one.
func setDefaults(v any) {
	switch df := v.(type) {
	case defaulter:
		df.setDefaults()
	case Defaulter:
		df.SetDefaults()
	}
}

// decoder decodes a yaml.Node tree into Go values by reflection, following the
// `yaml` struct tags. It never stops at the first problem: every mistake is
// added to errs with its key path and line, and decoding goes on with the rest.
type decoder struct {
	errs *errorList
}

var unmarshalerType = reflect.TypeFor[yaml.Unmarshaler]()

// decode decodes n into v (which must be settable). A null value leaves v as it
// was: an unset ${VAR} or an empty key keeps the default.
func (d *decoder) decode(n *yaml.Node, path string, v reflect.Value) {
	n = resolveAlias(n)
	if d.decodeSection(n, path, v) {
		return
	}
	if isNull(n) {
		return
	}
	if v.Kind() == reflect.Pointer {
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
			setDefaults(v.Interface())
		}
		d.decode(n, path, v.Elem())
		return
	}
	if v.CanAddr() && v.Addr().Type().Implements(unmarshalerType) {
		if err := v.Addr().Interface().(yaml.Unmarshaler).UnmarshalYAML(n); err != nil {
			d.errs.addLine(n.Line, path, "%v", err)
		}
		return
	}
	switch v.Kind() {
	case reflect.Struct:
		d.decodeStruct(n, path, v)
	case reflect.Map:
		d.decodeMap(n, path, v)
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			d.errs.addLine(n.Line, path, "want a list, got %s", describe(n))
			return
		}
		s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, c := range n.Content {
			child := fmt.Sprintf("%s[%d]", path, i)
			d.errs.lines[child] = c.Line
			d.decode(c, child, s.Index(i))
		}
		v.Set(s)
	case reflect.Interface:
		x, ok := d.jsonValue(n, path)
		if ok && x != nil {
			v.Set(reflect.ValueOf(x))
		}
	default:
		d.decodeScalar(n, path, v)
	}
}

func (d *decoder) decodeStruct(n *yaml.Node, path string, v reflect.Value) {
	if n.Kind != yaml.MappingNode {
		d.errs.addLine(n.Line, path, "want a mapping, got %s", describe(n))
		return
	}
	fields := map[string]int{}
	var names []string
	t := v.Type()
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		if name == "" || name == "-" || !t.Field(i).IsExported() {
			continue
		}
		fields[name] = i
		names = append(names, name)
	}
	for _, p := range d.pairs(n, path) {
		key := p.key.Value
		child := join(path, key)
		i, ok := fields[key]
		if !ok && path == "" && strings.HasPrefix(key, "x-") {
			continue // extension keys hold anchors for reuse
		}
		if !ok {
			d.errs.addLine(p.key.Line, child, "unknown key (want %s)", oneOf(names))
			continue
		}
		d.errs.lines[child] = p.key.Line
		d.decode(p.val, child, v.Field(i))
	}
}

func (d *decoder) decodeMap(n *yaml.Node, path string, v reflect.Value) {
	if n.Kind != yaml.MappingNode {
		d.errs.addLine(n.Line, path, "want a mapping, got %s", describe(n))
		return
	}
	if v.Type().Key().Kind() != reflect.String {
		panic("config: map keys must be strings")
	}
	m := reflect.MakeMap(v.Type())
	for _, p := range d.pairs(n, path) {
		child := join(path, p.key.Value)
		d.errs.lines[child] = p.key.Line
		e := reflect.New(v.Type().Elem()).Elem()
		if e.Kind() == reflect.Interface {
			x, ok := d.jsonValue(p.val, child)
			if !ok {
				continue
			}
			if x != nil {
				e.Set(reflect.ValueOf(x))
			}
		} else {
			d.decode(p.val, child, e)
			if e.Kind() == reflect.Pointer && e.IsNil() {
				// `name:` with nothing under it is an entry with every default.
				e.Set(reflect.New(e.Type().Elem()))
				setDefaults(e.Interface())
			}
		}
		m.SetMapIndex(reflect.ValueOf(p.key.Value).Convert(v.Type().Key()), e)
	}
	v.Set(m)
}

func (d *decoder) decodeScalar(n *yaml.Node, path string, v reflect.Value) {
	if n.Kind != yaml.ScalarNode {
		want := "a string"
		switch v.Kind() {
		case reflect.Bool:
			want = "true or false"
		case reflect.Int, reflect.Int64, reflect.Int32:
			want = "an integer"
		case reflect.Float64:
			want = "a number"
		}
		hint := ""
		if v.Kind() == reflect.String && n.Kind == yaml.MappingNode && n.Style&yaml.FlowStyle != 0 {
			hint = " (quote a template that starts with {{)"
		}
		d.errs.addLine(n.Line, path, "want %s, got %s%s", want, describe(n), hint)
		return
	}
	tag := n.ShortTag()
	switch v.Kind() {
	case reflect.String:
		v.SetString(n.Value)
	case reflect.Bool:
		var b bool
		if tag != "!!bool" || n.Decode(&b) != nil {
			d.errs.addLine(n.Line, path, "want true or false, got %q", n.Value)
			return
		}
		v.SetBool(b)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		var i int64
		if tag != "!!int" || n.Decode(&i) != nil || v.OverflowInt(i) {
			d.errs.addLine(n.Line, path, "want an integer, got %q", n.Value)
			return
		}
		v.SetInt(i)
	case reflect.Float32, reflect.Float64:
		var f float64
		if (tag != "!!int" && tag != "!!float") || n.Decode(&f) != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			d.errs.addLine(n.Line, path, "want a number, got %q", n.Value)
			return
		}
		v.SetFloat(f)
	default:
		panic(fmt.Sprintf("config: cannot decode into %s", v.Type()))
	}
}

// jsonValue converts n to the values encoding/json produces when it decodes
// into an `any` (map[string]any, []any, string, float64, bool, nil), so params
// schemas and examples look exactly like params received over HTTP. An integer
// too large for a float64 to hold exactly becomes a json.Number.
func (d *decoder) jsonValue(n *yaml.Node, path string) (any, bool) {
	n = resolveAlias(n)
	switch n.Kind {
	case yaml.MappingNode:
		m := map[string]any{}
		ok := true
		for _, p := range d.pairs(n, path) {
			child := join(path, p.key.Value)
			d.errs.lines[child] = p.key.Line
			x, xok := d.jsonValue(p.val, child)
			ok = ok && xok
			m[p.key.Value] = x
		}
		return m, ok
	case yaml.SequenceNode:
		s := make([]any, len(n.Content))
		ok := true
		for i, c := range n.Content {
			child := fmt.Sprintf("%s[%d]", path, i)
			d.errs.lines[child] = c.Line
			x, xok := d.jsonValue(c, child)
			ok = ok && xok
			s[i] = x
		}
		return s, ok
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!null":
			return nil, true
		case "!!bool":
			var b bool
			if err := n.Decode(&b); err == nil {
				return b, true
			}
		case "!!int":
			var i int64
			if err := n.Decode(&i); err == nil {
				if i > 1<<53 || i < -(1<<53) {
					return json.Number(strconv.FormatInt(i, 10)), true
				}
				return float64(i), true
			}
			// Too large for an int64: keep every digit.
			if b, ok := new(big.Int).SetString(strings.ReplaceAll(n.Value, "_", ""), 0); ok {
				return json.Number(b.String()), true
			}
		case "!!float":
			var f float64
			if err := n.Decode(&f); err == nil && !math.IsNaN(f) && !math.IsInf(f, 0) {
				return f, true
			}
		case "!!str", "!!timestamp", "!!binary":
			return n.Value, true
		}
		d.errs.addLine(n.Line, path, "cannot use %q as a JSON value", n.Value)
		return nil, false
	}
	d.errs.addLine(n.Line, path, "cannot use %s as a JSON value", describe(n))
	return nil, false
}

type pair struct{ key, val *yaml.Node }

// pairs returns the key/value pairs of mapping n, with YAML merge keys (<<)
// applied: keys written in n win over merged ones. Duplicate keys and keys that
// are not strings are reported and skipped.
func (d *decoder) pairs(n *yaml.Node, path string) []pair {
	var out, merged []pair
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
			merged = append(merged, d.mergePairs(val, path)...)
			continue
		}
		if k.Kind != yaml.ScalarNode {
			d.errs.addLine(k.Line, path, "a key must be a string, got %s", describe(k))
			continue
		}
		if first, dup := seen[k.Value]; dup {
			d.errs.addLine(k.Line, join(path, k.Value), "duplicate key (first at line %d)", first)
			continue
		}
		seen[k.Value] = k.Line
		out = append(out, pair{k, val})
	}
	for _, p := range merged {
		if _, ok := seen[p.key.Value]; !ok {
			seen[p.key.Value] = p.key.Line
			out = append(out, p)
		}
	}
	return out
}

func (d *decoder) mergePairs(val *yaml.Node, path string) []pair {
	val = resolveAlias(val)
	switch val.Kind {
	case yaml.MappingNode:
		return d.pairs(val, path)
	case yaml.SequenceNode:
		var out []pair
		seen := map[string]bool{}
		for _, c := range val.Content {
			// Earlier maps in a merge list win over later ones.
			for _, p := range d.mergePairs(c, path) {
				if !seen[p.key.Value] {
					seen[p.key.Value] = true
					out = append(out, p)
				}
			}
		}
		return out
	}
	d.errs.addLine(val.Line, path, "a merge (<<) needs a mapping or a list of mappings, got %s", describe(val))
	return nil
}

func resolveAlias(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n == nil || n.Kind == 0 || (n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null")
}

// describe names a node's kind for error messages.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return strconv.Quote(n.Value)
	}
	return "nothing"
}

// oneOf formats choices as "a, b or c".
func oneOf(c []string) string {
	switch len(c) {
	case 0:
		return "nothing"
	case 1:
		return c[0]
	}
	return strings.Join(c[:len(c)-1], ", ") + " or " + c[len(c)-1]
}
