package gentypes

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"strings"
	"unicode"
)

// writeRBS writes RBS (Ruby's type signatures, for Steep and other RBS
// checkers): in module Notifiers a type alias per notifier's params and
// notifier_name, the union of the names; in module Notifyd one overload of
// Notifyd.notify per notifier, so a checker refuses a notifier that is not in
// the config and params of the wrong shape for it.
//
// The output parses with RBS 2 (Ruby 3.1's), which has no optional record
// keys: an optional property is a nilable field (T?), and an object with
// properties is a record of them (additionalProperties then allows nothing
// more, as a record does).
func writeRBS(ns []namedType, opts Options) []byte {
	var b strings.Builder
	b.WriteString(header("rb", opts, "#"))
	b.WriteString(`#
# The params of every notifier of notifyd's config, as RBS type signatures.
# Put this file in your signature directory (sig/): Notifyd.notify is then
# typed by notifier, and a type checker (Steep) refuses a notifier that is not
# here and params of the wrong shape.

module Notifiers
`)
	names := namer{"notifier_name": true}
	aliases := make([]string, len(ns))
	for i, n := range ns {
		aliases[i] = names.unique(snake(n.notifier) + "_params")
		fmt.Fprintf(&b, "  # The params of notifier %s.\n", rbsComment(n.notifier))
		fmt.Fprintf(&b, "  type %s = %s\n\n", aliases[i], rbsType(n.t))
	}
	b.WriteString("  # The name of a notifier of the config.\n")
	if len(ns) == 0 {
		b.WriteString("  type notifier_name = String\n")
	} else {
		quoted := make([]string, len(ns))
		for i, n := range ns {
			quoted[i] = rbsString(n.notifier)
		}
		fmt.Fprintf(&b, "  type notifier_name = %s\n", strings.Join(quoted, " | "))
	}
	b.WriteString("end\n")
	if len(ns) == 0 {
		return []byte(b.String())
	}

	b.WriteString(`
module Notifyd
  # Notifyd.notify enqueues one notification in the transaction conn (a
  # PG::Connection or an ActiveRecord connection) is in; see the gem's README.
`)
	for i, n := range ns {
		lead := "  def self.notify: "
		if i > 0 {
			lead = "                 | "
		}
		params := "?params: ::Notifiers::" + aliases[i]
		if requiresParams(n.t) {
			params = "params: ::Notifiers::" + aliases[i]
		}
		fmt.Fprintf(&b, "%s(untyped conn, notifier: %s, key: String, %s, ?recipients: Array[String | Hash[Symbol, String]], "+
			"?topics: Array[String], ?actor: String?, ?send_at: Time?, ?tenant: String?, ?schema: String?, "+
			"?allow_autocommit: bool) -> untyped\n", lead, rbsString(n.notifier), params)
	}
	b.WriteString("end\n")
	return []byte(b.String())
}

// requiresParams is whether a send of t's notifier must carry params: its
// type is an object with a required property.
func requiresParams(t *typ) bool {
	if t.kind != kObject {
		return false
	}
	for _, p := range t.props {
		if p.required {
			return true
		}
	}
	return false
}

func rbsType(t *typ) string {
	switch t.kind {
	case kString:
		return "String"
	case kNumber:
		return "Numeric"
	case kInteger:
		return "Integer"
	case kBoolean:
		return "bool"
	case kNull:
		return "nil"
	case kLiteral:
		return rbsLiteral(t.literal)
	case kArray:
		return "Array[" + rbsType(t.elem) + "]"
	case kMap:
		return "Hash[Symbol | String, " + rbsType(t.elem) + "]"
	case kObject:
		if t.open || len(t.props) == 0 {
			return "Hash[Symbol | String, untyped]"
		}
		fields := make([]string, len(t.props))
		for i, p := range t.props {
			ft := rbsType(p.t)
			if !p.required {
				ft = rbsOptional(ft)
			}
			fields[i] = rbsKey(p.name) + ft
		}
		return "{ " + strings.Join(fields, ", ") + " }"
	case kUnion:
		parts := make([]string, len(t.alts))
		for i, a := range t.alts {
			parts[i] = rbsType(a)
		}
		return strings.Join(parts, " | ")
	}
	return "untyped"
}

// rbsOptional is t nilable. A union gets the ? on its last member, which
// means the same: A | B? is A | B | nil.
func rbsOptional(t string) string {
	if t == "nil" || t == "untyped" || strings.HasSuffix(t, "?") || strings.HasSuffix(t, " | nil") {
		return t
	}
	return t + "?"
}

var rbsSimpleKey = regexp.MustCompile(`^[a-z_][A-Za-z0-9_]*$`)

// rbsKeywords cannot be a record's bare key.
var rbsKeywords = map[string]bool{
	"alias": true, "attr_accessor": true, "attr_reader": true, "attr_writer": true, "bool": true, "bot": true,
	"class": true, "def": true, "end": true, "extend": true, "false": true, "in": true, "include": true,
	"instance": true, "interface": true, "module": true, "nil": true, "out": true, "prepend": true,
	"private": true, "public": true, "self": true, "singleton": true, "super": true, "top": true, "true": true,
	"type": true, "unchecked": true, "untyped": true, "void": true,
}

// rbsKey is a record field's key: `name: ` for a plain lower-case name, and
// the symbol-literal form `:"vat-id" => ` otherwise.
func rbsKey(name string) string {
	if rbsSimpleKey.MatchString(name) && !rbsKeywords[name] {
		return name + ": "
	}
	return ":" + rbsString(name) + " => "
}

// rbsLiteral is a JSON scalar as an RBS type: a literal for strings,
// integers, booleans and null, Float for other numbers.
func rbsLiteral(v any) string {
	switch v := v.(type) {
	case nil:
		return "nil"
	case string:
		return rbsString(v)
	case bool:
		if v {
			return "true"
		}
		return "false"
	case float64:
		if v == math.Trunc(v) && math.Abs(v) < 1<<53 {
			return fmt.Sprintf("%d", int64(v))
		}
	case json.Number:
		if _, err := v.Int64(); err == nil {
			return v.String()
		}
	}
	return "Float"
}

// rbsString is s as an RBS string literal type. RBS's double-quoted literal
// takes \" and \\; a string with other characters needing an escape is typed
// String, which still accepts it.
func rbsString(s string) string {
	for _, r := range s {
		if unicode.IsControl(r) || r == unicode.ReplacementChar || r == '#' {
			return "String"
		}
	}
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}

// rbsComment is s on one line, for a # comment.
func rbsComment(s string) string { return oneLine(s) }

// snake is s in snake_case ("comment.created" → "comment_created"), an RBS
// type alias name: ASCII, lower-case first.
func snake(s string) string {
	var parts []string
	for _, w := range words(strings.ToLower(s)) {
		var b strings.Builder
		for _, r := range w {
			if r < 128 {
				b.WriteRune(r)
			}
		}
		if b.Len() > 0 {
			parts = append(parts, b.String())
		}
	}
	out := strings.Join(parts, "_")
	if out == "" || out[0] < 'a' || out[0] > 'z' {
		out = "n_" + out
	}
	return out
}
