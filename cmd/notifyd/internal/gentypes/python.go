package gentypes

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
)

// writePython writes a TypedDict per notifier (and per nested object), the
// Literal of notifier names, a Notifiers TypedDict mapping each name to its
// params type, and params(), whose overloads let a type checker check a
// send's params against its notifier.
func writePython(ns []namedType, opts Options) []byte {
	var b strings.Builder
	b.WriteString(header("python", opts, "#"))
	b.WriteString(`"""The params of every notifier of notifyd's config, for a type checker (mypy).

Wrap a send's params in params() to have them checked against the notifier:

    notifyd.send(conn, notifyd.Notification(notifier="comment.created", key=key,
                 recipients=["u2"], params=params("comment.created", {...})))
"""

import sys
from typing import Any, Dict, List, Literal, Union, overload

if sys.version_info >= (3, 11):
    from typing import NotRequired, TypedDict
else:
    from typing_extensions import NotRequired, TypedDict
`)
	w := pyWriter{b: &b, names: namer{"Notifiers": true, "NotifierName": true}}
	typeNames := make([]string, len(ns))
	for i, n := range ns {
		base := pascal(n.notifier, false) + "Params"
		if n.t.kind == kObject && !n.t.open {
			typeNames[i] = w.object(n.t, base, "The params of notifier "+n.notifier+".")
		} else {
			typeNames[i] = w.names.unique(base)
			expr := w.typ(n.t, base)
			fmt.Fprintf(&b, "\n%s = %s\n\"\"\"The params of notifier %s.\"\"\"\n", typeNames[i], expr, n.notifier)
		}
	}

	quoted := make([]string, len(ns))
	fields := make([]string, len(ns))
	for i, n := range ns {
		quoted[i] = pyString(n.notifier)
		fields[i] = pyString(n.notifier) + ": " + typeNames[i]
	}
	if len(ns) == 0 {
		b.WriteString("\nNotifierName = str\n")
	} else {
		fmt.Fprintf(&b, "\nNotifierName = Literal[%s]\n", strings.Join(quoted, ", "))
	}
	b.WriteString("\"\"\"The name of a notifier of the config.\"\"\"\n")
	fmt.Fprintf(&b, "\nNotifiers = TypedDict(\"Notifiers\", {%s})\n", strings.Join(fields, ", "))
	b.WriteString("\"\"\"Every notifier's params type, by notifier name.\"\"\"\n")

	switch len(ns) {
	case 0:
	case 1:
		fmt.Fprintf(&b, "\n\ndef params(notifier: Literal[%s], params: %s) -> %s:\n", quoted[0], typeNames[0], typeNames[0])
		b.WriteString("    \"\"\"Returns params unchanged; a type checker checks them against notifier's type.\"\"\"\n")
		b.WriteString("    return params\n")
	default:
		for i := range ns {
			fmt.Fprintf(&b, "\n\n@overload\ndef params(notifier: Literal[%s], params: %s) -> %s: ...\n", quoted[i], typeNames[i], typeNames[i])
		}
		b.WriteString("\n\ndef params(notifier: NotifierName, params: Any) -> Any:\n")
		b.WriteString("    \"\"\"Returns params unchanged; a type checker checks them against notifier's type.\"\"\"\n")
		b.WriteString("    return params\n")
	}
	return []byte(b.String())
}

type pyWriter struct {
	b     *strings.Builder
	names namer
}

// object writes the TypedDicts of t's nested objects, then t's, and
// returns t's name.
func (w pyWriter) object(t *typ, base, doc string) string {
	fields := make([]string, len(t.props))
	for i, p := range t.props {
		ft := w.typ(p.t, base+pascal(p.name, false))
		if !p.required {
			ft = "NotRequired[" + ft + "]"
		}
		fields[i] = pyString(p.name) + ": " + ft
	}
	name := w.names.unique(base)
	if doc == "" {
		doc = t.doc
	}
	if len(fields) == 0 {
		fmt.Fprintf(w.b, "\n%s = TypedDict(%s, {})\n", name, pyString(name))
	} else {
		fmt.Fprintf(w.b, "\n%s = TypedDict(%s, {\n    %s,\n})\n", name, pyString(name), strings.Join(fields, ",\n    "))
	}
	if doc != "" {
		fmt.Fprintf(w.b, "\"\"\"%s\"\"\"\n", strings.ReplaceAll(oneLine(doc), `"""`, `'''`))
	}
	return name
}

func (w pyWriter) typ(t *typ, base string) string {
	switch t.kind {
	case kString:
		return "str"
	case kNumber:
		return "float"
	case kInteger:
		return "int"
	case kBoolean:
		return "bool"
	case kNull:
		return "None"
	case kLiteral:
		return pyLiteral(t.literal)
	case kArray:
		return "List[" + w.typ(t.elem, base+"Item") + "]"
	case kMap:
		return "Dict[str, " + w.typ(t.elem, base+"Value") + "]"
	case kObject:
		if t.open {
			return "Dict[str, Any]"
		}
		return w.object(t, base, "")
	case kUnion:
		// Literals of what Literal takes are one Literal[...].
		var lits, parts []string
		for _, a := range t.alts {
			s := w.typ(a, base)
			if inner, ok := strings.CutPrefix(s, "Literal["); ok {
				lits = append(lits, strings.TrimSuffix(inner, "]"))
			} else {
				parts = append(parts, s)
			}
		}
		if len(lits) > 0 {
			parts = append([]string{"Literal[" + strings.Join(lits, ", ") + "]"}, parts...)
		}
		if len(parts) == 1 {
			return parts[0]
		}
		return "Union[" + strings.Join(parts, ", ") + "]"
	}
	return "Any"
}

// pyLiteral is a JSON scalar as a Python type: Literal for what Literal
// takes (strings, integers, booleans), None, and float for other numbers.
func pyLiteral(v any) string {
	switch v := v.(type) {
	case nil:
		return "None"
	case string:
		return "Literal[" + pyString(v) + "]"
	case bool:
		if v {
			return "Literal[True]"
		}
		return "Literal[False]"
	case float64:
		if v == math.Trunc(v) && math.Abs(v) < 1<<53 {
			return fmt.Sprintf("Literal[%d]", int64(v))
		}
	case json.Number:
		if _, err := v.Int64(); err == nil {
			return "Literal[" + v.String() + "]"
		}
	}
	return "float"
}

// pyString is s as a Python string literal (a JSON string is one, but for
// the escapes of characters outside the BMP, which Go writes as UTF-8).
func pyString(s string) string { return quoteJSON(s) }
