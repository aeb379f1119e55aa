package gentypes

import (
	"fmt"
	"go/format"
	"go/token"
	"strings"
)

// writeGo writes a struct per notifier (and per nested object), a constant
// per notifier name, and a Params method turning a struct into
// notifyd.Notification's Params. An optional field is a pointer (a slice or
// map: nil) left out of the JSON when nil; a nullable one is a pointer too.
func writeGo(ns []namedType, opts Options) ([]byte, error) {
	pkg := opts.GoPackage
	if pkg == "" {
		pkg = "notifiers"
	}
	if !token.IsIdentifier(pkg) {
		return nil, fmt.Errorf("gentypes: Go package name %q is not an identifier", pkg)
	}
	var b strings.Builder
	b.WriteString(header("go", opts, "//"))
	fmt.Fprintf(&b, "\n// Package %s holds the params types of the notifiers of notifyd's config.\npackage %s\n\n", pkg, pkg)
	b.WriteString("import (\n\t\"bytes\"\n\t\"encoding/json\"\n)\n\n")

	w := goWriter{b: &b, names: namer{"toParams": true}}
	consts := namer{}
	b.WriteString("// The notifiers' names.\nconst (\n")
	for _, n := range ns {
		fmt.Fprintf(&b, "\t%s = %s\n", consts.unique(pascal(n.notifier, true)), quoteJSON(n.notifier))
	}
	b.WriteString(")\n")
	for _, n := range ns {
		base := pascal(n.notifier, true) + "Params"
		doc := fmt.Sprintf("are the params of notifier %s.", n.notifier)
		if n.t.kind == kObject {
			name := w.object(n.t, base, doc)
			fmt.Fprintf(&b, "\n// Params returns p as notifyd.Notification's Params.\n"+
				"func (p %s) Params() (map[string]any, error) { return toParams(p) }\n", name)
		} else {
			name := w.names.unique(base)
			fmt.Fprintf(&b, "\n// %s %s\ntype %s = %s\n", name, doc, name, w.typ(n.t, base))
		}
	}
	b.WriteString(`
// toParams encodes v as JSON and decodes it as notifyd reads params.
func toParams(v any) (map[string]any, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, err
	}
	return m, nil
}
`)
	out, err := format.Source([]byte(b.String()))
	if err != nil {
		return nil, fmt.Errorf("gentypes: the Go output does not parse: %w", err)
	}
	return out, nil
}

type goWriter struct {
	b     *strings.Builder
	names namer
}

// object writes t's struct, after those of its nested objects, and returns
// its name.
func (w goWriter) object(t *typ, base, doc string) string {
	type field struct{ name, typ, tag, doc string }
	var fields []field
	fieldNames := namer{}
	for _, p := range t.props {
		ft := w.typ(p.t, base+pascal(p.name, true))
		nullable := p.t.kind == kUnion && len(p.t.alts) == 2 && (p.t.alts[0].kind == kNull || p.t.alts[1].kind == kNull)
		tag := p.name
		if !p.required {
			tag += ",omitempty"
		}
		if (!p.required || nullable) && !strings.HasPrefix(ft, "[]") && !strings.HasPrefix(ft, "map[") &&
			!strings.HasPrefix(ft, "*") && ft != "any" {
			ft = "*" + ft
		}
		fields = append(fields, field{name: fieldNames.unique(pascal(p.name, true)), typ: ft,
			tag: "`json:" + quoteJSON(tag) + "`", doc: oneLine(p.t.doc)})
	}
	name := w.names.unique(base)
	if doc == "" {
		doc = "is an object inside the params."
		if t.doc != "" {
			doc = "is " + oneLine(t.doc)
		}
	}
	fmt.Fprintf(w.b, "\n// %s %s\ntype %s struct {\n", name, doc, name)
	for _, f := range fields {
		if f.doc != "" {
			fmt.Fprintf(w.b, "\t// %s\n", f.doc)
		}
		fmt.Fprintf(w.b, "\t%s %s %s\n", f.name, f.typ, f.tag)
	}
	w.b.WriteString("}\n")
	return name
}

func (w goWriter) typ(t *typ, base string) string {
	switch t.kind {
	case kString:
		return "string"
	case kNumber:
		return "float64"
	case kInteger:
		return "int64"
	case kBoolean:
		return "bool"
	case kLiteral:
		switch t.literal.(type) {
		case string:
			return "string"
		case bool:
			return "bool"
		case nil:
			return "any"
		}
		return "float64"
	case kArray:
		return "[]" + w.typ(t.elem, base+"Item")
	case kMap:
		return "map[string]" + w.typ(t.elem, base+"Value")
	case kObject:
		return w.object(t, base, "")
	case kUnion:
		// T or null: a pointer to T; literals of one kind: that kind.
		var others []*typ
		for _, a := range t.alts {
			if a.kind != kNull && !(a.kind == kLiteral && a.literal == nil) {
				others = append(others, a)
			}
		}
		if len(others) == 1 {
			inner := w.typ(others[0], base)
			if strings.HasPrefix(inner, "[]") || strings.HasPrefix(inner, "map[") || inner == "any" {
				return inner
			}
			return "*" + inner
		}
		kinds := map[string]bool{}
		for _, a := range others {
			switch a.kind {
			case kString, kNumber, kInteger, kBoolean, kLiteral:
				kinds[w.typ(a, base)] = true
			default:
				return "any" // objects, arrays: nothing in Go holds either
			}
		}
		if len(kinds) == 1 {
			for k := range kinds {
				if len(others) < len(t.alts) {
					return "*" + k
				}
				return k
			}
		}
	}
	return "any"
}
