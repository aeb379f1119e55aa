package stores

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/notifyd/notifyd/sql/sqlregex"
)

// ParamsCheck is the part of a notifier's params JSON Schema that notify_send
// checks inside the application's transaction, in the two forms the catalog
// stores (notify_notifiers.params_schema and params_check).
//
// Schema is that part as a JSON Schema: the keywords type, enum, const,
// minLength, maxLength, minimum, maximum, exclusiveMinimum and
// exclusiveMaximum (numbers; not draft-04's booleans), minItems, maxItems,
// required, properties, additionalProperties (false) and items, and format
// (with formatPattern, see formatPatterns), pruned of everything else. Check is
// the same checks as an SQL/JSON path predicate over the params object, true
// when they pass: notify_send evaluates it (one expression, in C), and only
// when it fails walks Schema (notify_params_violation) to name the first
// failing value. Both are empty when nothing is checkable.
//
// Only checks the full schema implies are kept, so params the full schema
// accepts always pass: a subschema beside a $ref, $dynamicRef or
// $recursiveRef is skipped whole (before draft 2019-09 a $ref hides its
// siblings), items next to prefixItems or in its array form is skipped, an
// enum or const with an object or array value is skipped (SQL/JSON path
// compares scalars only), additionalProperties is kept only when false and
// without patternProperties, and const is skipped under draft-04 (which has
// no const). What is left out is still checked at fan-out, where a failing
// notification becomes rejected.
type ParamsCheck struct {
	Schema string // JSON
	Check  string
}

// CompileParamsCheck compiles schema (a notifier's params JSON Schema, as
// config holds it: JSON-shaped values) into what notify_send checks. A nil
// schema, or one without a checkable keyword, gives the zero ParamsCheck.
func CompileParamsCheck(schema map[string]any) (ParamsCheck, error) {
	if schema == nil {
		return ParamsCheck{}, nil
	}
	c := paramsCompiler{draft4: isDraft4(schema)}
	node := c.node(schema)
	if node == nil {
		return ParamsCheck{}, nil
	}
	raw, err := json.Marshal(node)
	if err != nil {
		return ParamsCheck{}, fmt.Errorf("compile params check: %w", err)
	}
	// Lax mode, cheaper, where nothing can unwrap: with no items checked,
	// every member access and comparison is guarded (see predicate).
	mode := "lax"
	if node.hasItems() {
		mode = "strict"
	}
	pred := node.predicate("$", mode)
	if pred == "" {
		return ParamsCheck{}, nil
	}
	return ParamsCheck{Schema: string(raw), Check: mode + " " + pred}, nil
}

func isDraft4(schema map[string]any) bool {
	s, _ := schema["$schema"].(string)
	return strings.Contains(s, "draft-04") || strings.Contains(s, "draft-03")
}

type paramsCompiler struct {
	draft4 bool
}

// checkNode is one pruned subschema. Its JSON form is the JSON Schema subset
// notify_params_violation walks.
type checkNode struct {
	Type                 []string              `json:"type,omitempty"`
	Enum                 []any                 `json:"enum,omitempty"`
	Const                *constValue           `json:"const,omitempty"`
	MinLength            *int64                `json:"minLength,omitempty"`
	MaxLength            *int64                `json:"maxLength,omitempty"`
	Minimum              *json.Number          `json:"minimum,omitempty"`
	Maximum              *json.Number          `json:"maximum,omitempty"`
	ExclusiveMinimum     *json.Number          `json:"exclusiveMinimum,omitempty"`
	ExclusiveMaximum     *json.Number          `json:"exclusiveMaximum,omitempty"`
	MinItems             *int64                `json:"minItems,omitempty"`
	MaxItems             *int64                `json:"maxItems,omitempty"`
	Required             []string              `json:"required,omitempty"`
	Properties           map[string]*checkNode `json:"properties,omitempty"`
	AdditionalProperties *bool                 `json:"additionalProperties,omitempty"`
	Items                *checkNode            `json:"items,omitempty"`
	// Format is a format the daemon asserts and FormatPattern a regular
	// expression every string of that format matches (formatPatterns).
	Format        string `json:"format,omitempty"`
	FormatPattern string `json:"formatPattern,omitempty"`
	// Pattern is the schema's pattern as a PostgreSQL regular expression
	// (sqlregex.Translate) and PatternSource the pattern as written, for
	// the message.
	Pattern       string       `json:"pattern,omitempty"`
	PatternSource string       `json:"patternSource,omitempty"`
	MultipleOf    *json.Number `json:"multipleOf,omitempty"`
	UniqueItems   bool         `json:"uniqueItems,omitempty"`
	AllOf         []*checkNode `json:"allOf,omitempty"`
	AnyOf         []*checkNode `json:"anyOf,omitempty"`
	// OneOf and Not are kept only when every subschema below them is
	// checked whole (complete); a oneOf that is not is kept as an anyOf.
	OneOf []*checkNode `json:"oneOf,omitempty"`
	Not   *checkNode   `json:"not,omitempty"`
}

// formatPatterns are, for the formats the params validator asserts, a
// regular expression that every string the validator accepts matches, in the
// dialect both SQL/JSON path's like_regex and PostgreSQL's ~ read: a
// necessary condition, so SQL refuses only what the fan-out would refuse
// (uuid's is the whole rule; uri's is a scheme, as an absolute URI has;
// date's and date-time's the digits and their ranges; email's an @ with a
// domain after it). The rest of each format is checked at fan-out.
var formatPatterns = map[string]string{
	"uri":       `^[A-Za-z][A-Za-z0-9+.-]*:`,
	"uuid":      `^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}$`,
	"date":      datePattern,
	"date-time": `^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])[Tt]..:..:...`,
	"email":     `^.*@.+$`,
	"hostname":  hostnamePattern,
}

// hostnamePattern is exactly the validator's hostnames: dot-separated labels
// of 1 to 63 ASCII letters, digits and hyphens, neither starting nor ending
// with a hyphen, at most 253 characters before an optional final dot.
const hostnamePattern = `^(?=.{1,253}\.?$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?` +
	`(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?$`

// datePattern is exactly the dates Go's time.Parse reads as 2006-01-02: four
// digit years, and days that exist in their month (February 29 in leap years
// only).
const datePattern = `^(?:[0-9]{4}-(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|[0-9]{4}-(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)` +
	`|[0-9]{4}-02-(?:0[1-9]|1[0-9]|2[0-8])` +
	`|(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:0[48]|[2468][048]|[13579][26])00)-02-29)$`

// exactFormats are the formats whose formatPattern is the whole rule.
var exactFormats = map[string]bool{"uuid": true, "date": true, "hostname": true}

// constValue holds a const, which may be JSON null.
type constValue struct{ v any }

func (c *constValue) MarshalJSON() ([]byte, error) { return json.Marshal(c.v) }

func (n *checkNode) empty() bool {
	return len(n.Type) == 0 && n.Enum == nil && n.Const == nil && n.MinLength == nil && n.MaxLength == nil &&
		n.Minimum == nil && n.Maximum == nil && n.ExclusiveMinimum == nil && n.ExclusiveMaximum == nil &&
		n.MinItems == nil && n.MaxItems == nil && len(n.Required) == 0 && len(n.Properties) == 0 &&
		n.AdditionalProperties == nil && n.Items == nil && n.Format == "" && n.Pattern == "" && n.MultipleOf == nil &&
		!n.UniqueItems && n.AllOf == nil && n.AnyOf == nil && n.OneOf == nil && n.Not == nil
}

var jsonTypes = []string{"array", "boolean", "integer", "null", "number", "object", "string"}

// node prunes one subschema; nil when nothing in it is checkable.
func (c paramsCompiler) node(v any) *checkNode {
	s, ok := v.(map[string]any)
	if !ok {
		return nil // true, false: boolean schemas are left to the fan-out
	}
	for _, ref := range []string{"$ref", "$dynamicRef", "$recursiveRef"} {
		if _, ok := s[ref]; ok {
			return nil
		}
	}
	n := &checkNode{}
	switch t := s["type"].(type) {
	case string:
		if slices.Contains(jsonTypes, t) {
			n.Type = []string{t}
		}
	case []any:
		for _, e := range t {
			if name, ok := e.(string); ok && slices.Contains(jsonTypes, name) {
				n.Type = append(n.Type, name)
			} else {
				n.Type = nil // not a list of type names: leave it to the fan-out
				break
			}
		}
	}
	if e, ok := s["enum"].([]any); ok && len(e) > 0 && allScalars(e) {
		n.Enum = e
	}
	if cv, ok := s["const"]; ok && !c.draft4 && allScalars([]any{cv}) {
		n.Const = &constValue{cv}
	}
	if f, ok := s["format"].(string); ok && formatPatterns[f] != "" {
		n.Format, n.FormatPattern = f, formatPatterns[f]
	}
	n.MinLength = count(s["minLength"])
	n.MaxLength = count(s["maxLength"])
	n.Minimum = number(s["minimum"])
	n.Maximum = number(s["maximum"])
	if !c.draft4 { // draft-04's are booleans that change minimum and maximum
		n.ExclusiveMinimum = number(s["exclusiveMinimum"])
		n.ExclusiveMaximum = number(s["exclusiveMaximum"])
	}
	n.MinItems = count(s["minItems"])
	n.MaxItems = count(s["maxItems"])
	if p, ok := s["pattern"].(string); ok {
		// config refuses a pattern without an exact translation.
		if re, err := sqlregex.Translate(p); err == nil {
			n.Pattern, n.PatternSource = re, p
		}
	}
	if m := number(s["multipleOf"]); m != nil {
		if f, err := m.Float64(); err == nil && f > 0 {
			n.MultipleOf = m
		}
	}
	n.UniqueItems, _ = s["uniqueItems"].(bool)
	if subs, ok := s["allOf"].([]any); ok {
		for _, sub := range subs {
			if child := c.node(sub); child != nil {
				n.AllOf = append(n.AllOf, child)
			}
		}
	}
	oneOfWhole := false
	if subs, ok := s["oneOf"].([]any); ok && len(subs) > 0 {
		if all := c.nodes(subs, true); all != nil {
			n.OneOf, oneOfWhole = all, true
		}
	}
	for _, k := range []string{"anyOf", "oneOf"} {
		if k == "oneOf" && oneOfWhole {
			continue
		}
		// An alternative that checks nothing accepts everything, and so
		// does the anyOf.
		if subs, ok := s[k].([]any); ok && len(subs) > 0 && n.AnyOf == nil {
			n.AnyOf = c.nodes(subs, false)
		}
	}
	if sub, ok := s["not"]; ok && c.complete(sub) {
		n.Not = c.node(sub)
		if n.Not == nil {
			n.Not = &checkNode{} // not {}: nothing passes
		}
	}
	if req, ok := s["required"].([]any); ok {
		for _, r := range req {
			if name, ok := r.(string); ok && !slices.Contains(n.Required, name) {
				n.Required = append(n.Required, name)
			}
		}
		slices.Sort(n.Required)
	}
	if props, ok := s["properties"].(map[string]any); ok {
		n.Properties = map[string]*checkNode{}
		for name, sub := range props {
			child := c.node(sub)
			if child == nil {
				child = &checkNode{} // still a declared property, for additionalProperties
			}
			n.Properties[name] = child
		}
	}
	_, patterns := s["patternProperties"]
	if ap, ok := s["additionalProperties"].(bool); ok && !ap && !patterns {
		n.AdditionalProperties = &ap
	}
	if items, ok := s["items"].(map[string]any); ok {
		if _, tuple := s["prefixItems"]; !tuple {
			n.Items = c.node(items)
		}
	}
	if len(n.Properties) > 0 && !slices.ContainsFunc(mapValues(n.Properties), func(p *checkNode) bool { return !p.empty() }) &&
		n.AdditionalProperties == nil {
		n.Properties = nil // only unchecked properties, and nothing needs their names
	}
	if n.empty() {
		return nil
	}
	return n
}

// nodes prunes each of subs; nil when one of them checks nothing or, with
// whole, is not complete.
func (c paramsCompiler) nodes(subs []any, whole bool) []*checkNode {
	out := make([]*checkNode, 0, len(subs))
	for _, sub := range subs {
		if whole && !c.complete(sub) {
			return nil
		}
		child := c.node(sub)
		if child == nil {
			if whole {
				child = &checkNode{}
			} else {
				return nil
			}
		}
		out = append(out, child)
	}
	return out
}

// annotations are keywords that never make a value fail.
var annotations = []string{"title", "description", "default", "examples", "$comment", "deprecated", "readOnly", "writeOnly"}

// complete reports whether node(v) keeps every check of the subschema v:
// each keyword in it is one SQL checks exactly, with a value SQL keeps.
func (c paramsCompiler) complete(v any) bool {
	s, ok := v.(map[string]any)
	if !ok || c.draft4 {
		return false
	}
	for k, val := range s {
		switch k {
		case "type":
			switch t := val.(type) {
			case string:
				if !slices.Contains(jsonTypes, t) {
					return false
				}
			case []any:
				for _, e := range t {
					if name, ok := e.(string); !ok || !slices.Contains(jsonTypes, name) {
						return false
					}
				}
			default:
				return false
			}
		case "enum":
			if e, ok := val.([]any); !ok || len(e) == 0 || !allScalars(e) {
				return false
			}
		case "const":
			if !allScalars([]any{val}) {
				return false
			}
		case "minLength", "maxLength", "minItems", "maxItems":
			if count(val) == nil {
				return false
			}
		case "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum":
			if number(val) == nil {
				return false
			}
		case "multipleOf":
			if m := number(val); m == nil {
				return false
			}
		case "uniqueItems":
			if _, ok := val.(bool); !ok {
				return false
			}
		case "pattern":
			p, ok := val.(string)
			if !ok {
				return false
			}
			if _, err := sqlregex.Translate(p); err != nil {
				return false
			}
		case "format":
			if f, ok := val.(string); !ok || !exactFormats[f] {
				return false
			}
		case "required":
			if _, ok := val.([]any); !ok {
				return false
			}
		case "properties":
			props, ok := val.(map[string]any)
			if !ok {
				return false
			}
			for _, p := range props {
				if !c.complete(p) {
					return false
				}
			}
		case "additionalProperties":
			if b, ok := val.(bool); !ok || b {
				return false
			}
		case "items", "not":
			if !c.complete(val) {
				return false
			}
		case "allOf", "anyOf", "oneOf":
			subs, ok := val.([]any)
			if !ok || len(subs) == 0 {
				return false
			}
			for _, sub := range subs {
				if !c.complete(sub) {
					return false
				}
			}
		default:
			if !slices.Contains(annotations, k) {
				return false
			}
		}
	}
	return true
}

func mapValues(m map[string]*checkNode) []*checkNode {
	out := make([]*checkNode, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// allScalars reports whether every value is a string, number, boolean or
// null: what SQL/JSON path compares with ==.
func allScalars(vs []any) bool {
	for _, v := range vs {
		switch v.(type) {
		case nil, string, bool, float64, json.Number:
		default:
			return false
		}
	}
	return true
}

func count(v any) *int64 {
	f, ok := toFloat(v)
	if !ok || f < 0 || f != math.Trunc(f) || f > 1<<40 {
		return nil
	}
	n := int64(f)
	return &n
}

func number(v any) *json.Number {
	var n json.Number
	switch v := v.(type) {
	case float64:
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return nil
		}
		n = json.Number(strconv.FormatFloat(v, 'f', -1, 64))
	case json.Number:
		n = v
	default:
		return nil
	}
	return &n
}

func toFloat(v any) (float64, bool) {
	switch v := v.(type) {
	case float64:
		return v, true
	case json.Number:
		f, err := v.Float64()
		return f, err == nil
	}
	return 0, false
}

// predicate returns the node's checks as an SQL/JSON path predicate on the
// value at path base ("$", `$."a"`, "@"), true when they pass; "" when the
// node checks nothing. In lax mode (the default) a member access or a
// comparison unwraps an array, so each comes after a type() test of its
// operand, which does not, as the left operand of && or || (which
// PostgreSQL evaluates first, and alone when it decides the result). A
// filter unwraps an array inside an array too, and that no test can guard:
// [[1, 3]] would pass items: {items: {enum: [1, 2]}}. So a check with items
// runs in strict mode, where nothing unwraps, and where a missing member or
// a comparison of mismatched types is an error, making the predicate
// unknown: there a member access also comes after a test that the member
// exists (has).
func (n *checkNode) predicate(base, mode string) string {
	var and []string
	only := func(t string) bool { return len(n.Type) == 1 && n.Type[0] == t }
	// guard returns the predicate that holds for values that are not of
	// type t (keywords for type t do not apply to them), or "" when the
	// node's type already requires t.
	guard := func(t string) string {
		if only(t) || (t == "number" && only("integer")) {
			return ""
		}
		return base + `.type() != "` + t + `"`
	}
	guarded := func(t string, conds []string) {
		if len(conds) == 0 {
			return
		}
		body := strings.Join(conds, " && ")
		if g := guard(t); g != "" {
			body = "(" + g + " || " + paren(body, len(conds)) + ")"
		}
		and = append(and, body)
	}
	if len(n.Type) > 0 {
		var or []string
		for _, t := range n.Type {
			switch t {
			case "integer":
				if !slices.Contains(n.Type, "number") {
					or = append(or, "("+base+`.type() == "number" && `+base+".floor() == "+base+")")
				}
			default:
				or = append(or, base+`.type() == "`+t+`"`)
			}
		}
		and = append(and, paren(strings.Join(or, " || "), len(or)))
	}
	if n.Const != nil {
		and = append(and, scalarEquals(base, n.Const.v))
	}
	if n.Enum != nil {
		var or []string
		for _, v := range n.Enum {
			or = append(or, scalarEquals(base, v))
		}
		and = append(and, paren(strings.Join(or, " || "), len(or)))
	}
	var str []string
	if n.MinLength != nil && *n.MinLength > 0 {
		str = append(str, base+" like_regex "+pathString(atLeast(*n.MinLength))+` flag "s"`)
	}
	if n.MaxLength != nil {
		str = append(str, "!("+base+" like_regex "+pathString(atLeast(*n.MaxLength+1))+` flag "s")`)
	}
	if n.FormatPattern != "" {
		str = append(str, base+" like_regex "+pathString(n.FormatPattern)+` flag "s"`)
	}
	if n.Pattern != "" {
		str = append(str, base+" like_regex "+pathString(n.Pattern)+` flag "s"`)
	}
	guarded("string", str)
	var num []string
	if n.Minimum != nil {
		num = append(num, base+" >= "+string(*n.Minimum))
	}
	if n.Maximum != nil {
		num = append(num, base+" <= "+string(*n.Maximum))
	}
	if n.ExclusiveMinimum != nil {
		num = append(num, base+" > "+string(*n.ExclusiveMinimum))
	}
	if n.ExclusiveMaximum != nil {
		num = append(num, base+" < "+string(*n.ExclusiveMaximum))
	}
	if n.MultipleOf != nil {
		num = append(num, base+" % "+string(*n.MultipleOf)+" == 0")
	}
	guarded("number", num)
	var obj []string
	for _, name := range n.Required {
		obj = append(obj, has(base, name, mode))
	}
	names := make([]string, 0, len(n.Properties))
	for name := range n.Properties {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		p := n.Properties[name].predicate(member(base, name), mode)
		if p == "" {
			continue
		}
		if !slices.Contains(n.Required, name) {
			p = "(!" + has(base, name, mode) + " || (" + p + "))"
		}
		obj = append(obj, p)
	}
	if n.AdditionalProperties != nil {
		var known []string
		for _, name := range names {
			known = append(known, "@.key == "+pathString(name))
		}
		if len(known) > 0 {
			obj = append(obj, "!(exists("+base+".keyvalue() ? (!("+strings.Join(known, " || ")+"))))")
		} else {
			obj = append(obj, "!(exists("+base+".keyvalue()))")
		}
	}
	guarded("object", obj)
	var arr []string
	if n.MinItems != nil && *n.MinItems > 0 {
		arr = append(arr, base+".size() >= "+strconv.FormatInt(*n.MinItems, 10))
	}
	if n.MaxItems != nil {
		arr = append(arr, base+".size() <= "+strconv.FormatInt(*n.MaxItems, 10))
	}
	if n.Items != nil {
		if p := n.Items.predicate("@", mode); p != "" {
			arr = append(arr, "!(exists("+base+"[*] ? (!("+p+"))))")
		}
	}
	if n.UniqueItems {
		// Whether two items are equal is left to the walk, which runs
		// when this fails.
		arr = append(arr, base+".size() <= 1")
	}
	guarded("array", arr)
	for _, sub := range n.AllOf {
		if p := sub.predicate(base, mode); p != "" {
			and = append(and, "("+p+")")
		}
	}
	if n.AnyOf != nil {
		var or []string
		for _, sub := range n.AnyOf {
			p := sub.predicate(base, mode)
			if p == "" {
				or = nil // this alternative accepts everything
				break
			}
			or = append(or, "("+p+")")
		}
		if len(or) > 0 {
			and = append(and, paren(strings.Join(or, " || "), len(or)))
		}
	}
	if n.OneOf != nil || n.Not != nil {
		// Decided by the walk: a predicate that fails makes it run.
		and = append(and, base+`.type() == "walk"`)
	}
	return strings.Join(and, " && ")
}

// paren wraps an expression of several terms in parentheses.
func paren(s string, terms int) string {
	if terms > 1 {
		return "(" + s + ")"
	}
	return s
}

// scalarEquals is the predicate "the value at base equals v" for a JSON
// scalar v, guarded by v's type so that lax mode cannot unwrap an array.
func scalarEquals(base string, v any) string {
	switch v := v.(type) {
	case nil:
		return base + `.type() == "null"`
	case bool:
		return "(" + base + `.type() == "boolean" && ` + base + " == " + strconv.FormatBool(v) + ")"
	case string:
		return "(" + base + `.type() == "string" && ` + base + " == " + pathString(v) + ")"
	case float64:
		return "(" + base + `.type() == "number" && ` + base + " == " + strconv.FormatFloat(v, 'f', -1, 64) + ")"
	case json.Number:
		return "(" + base + `.type() == "number" && ` + base + " == " + string(v) + ")"
	}
	panic(fmt.Sprintf("stores: scalarEquals of %T", v))
}

// member is the path of property name of the value at base.
func member(base, name string) string { return base + "." + pathString(name) }

// has is the predicate "the object at base has property name". In strict
// mode exists(member) is an error, not false, when it has not; its keys are
// looked at instead.
func has(base, name, mode string) string {
	if mode == "strict" {
		return "exists(" + base + ".keyvalue() ? (@.key == " + pathString(name) + "))"
	}
	return "exists(" + member(base, name) + ")"
}

// hasItems reports whether n or a node below it checks an array's items.
func (n *checkNode) hasItems() bool {
	if n.Items != nil {
		return true
	}
	for _, p := range n.Properties {
		if p.hasItems() {
			return true
		}
	}
	for _, subs := range [][]*checkNode{n.AllOf, n.AnyOf, n.OneOf, {n.Not}} {
		for _, p := range subs {
			if p != nil && p.hasItems() {
				return true
			}
		}
	}
	return false
}

// pathString quotes s as an SQL/JSON path string literal.
func pathString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// atLeast is a regular expression matching a string of at least n
// characters (code points, as JSON Schema counts them). PostgreSQL bounds a
// repetition count at 255, so longer runs are repeated groups.
func atLeast(n int64) string {
	var b strings.Builder
	b.WriteString("^")
	if q := n / 255; q > 0 {
		b.WriteString("(?:.{255})")
		for q > 0 {
			c := min(q, 255)
			fmt.Fprintf(&b, "{%d}", c)
			q -= c
			if q > 0 {
				b.WriteString("(?:.{255})")
			}
		}
	}
	if r := n % 255; r > 0 {
		fmt.Fprintf(&b, ".{%d}", r)
	}
	return b.String()
}
