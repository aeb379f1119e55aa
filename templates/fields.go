package templates

import (
	"github.com/notifyd/notifyd/notifytype"

	htmltemplate "html/template"
	"slices"
	"sort"
	"strings"
	"text/template"
	"text/template/parse"
)

// A notifier's templates name params as fields ({{.post_title}}); a field
// the params schema does not declare renders as nothing, so a typo
// ({{.post_titel}}) would send blank text for ever. CheckFields walks each
// template's parse tree against the schema and reports every such field with
// the template's line: what `notifyd check` (and the daemon) refuse.
//
// The walk follows the dot: inside {{range .items}} the dot is an item
// (the array's items schema), inside {{with .author}} it is that object, and
// $ is always the params. A batched notifier's templates also see .Count,
// .Actors and .Items (each item a notification's params). Where the schema
// cannot say (no properties declared, additionalProperties allowed or given
// as a schema of its own, allOf/anyOf/oneOf/$ref, a value computed by a
// function or a variable), any field is accepted: only a field the schema
// rules out is an error.

// trees returns the parse trees of a text or html template.
func trees(t Executor) []*parse.Tree {
	var out []*parse.Tree
	switch t := t.(type) {
	case *template.Template:
		for _, tt := range t.Templates() {
			out = append(out, tt.Tree)
		}
	case *htmltemplate.Template:
		for _, tt := range t.Templates() {
			out = append(out, tt.Tree)
		}
	}
	return out
}

// fieldScope is what the dot is at one point of a template: a schema
// (nil: unknown, anything goes), and for the params object the batch fields.
type fieldScope struct {
	schema map[string]any
	batch  bool // the batch fields (Count, Actors, Items) are there too
	params bool // the params object: the tenant (.Tenant) is there too
}

// CheckFields returns, one entry per problem with the template's line, the
// fields t names that the params schema rules out. batch says the templates
// belong to a batched notifier (they see the batch fields too). A nil schema
// rules nothing out.
func CheckFields(t Executor, schema map[string]any, batch bool) []string {
	if schema == nil {
		return nil
	}
	trees := trees(t)
	root := fieldScope{schema: schema, batch: batch, params: true}
	var bad []string
	for _, tree := range trees {
		if tree == nil || tree.Root == nil {
			continue
		}
		w := &fieldWalker{tree: tree, root: root}
		w.list(tree.Root, root)
		bad = append(bad, w.bad...)
	}
	return bad
}

type fieldWalker struct {
	tree *parse.Tree
	root fieldScope
	bad  []string
}

func (w *fieldWalker) list(l *parse.ListNode, dot fieldScope) {
	if l == nil {
		return
	}
	for _, n := range l.Nodes {
		w.node(n, dot)
	}
}

func (w *fieldWalker) node(n parse.Node, dot fieldScope) {
	switch n := n.(type) {
	case *parse.ActionNode:
		w.pipe(n.Pipe, dot)
	case *parse.IfNode:
		w.pipe(n.Pipe, dot)
		w.list(n.List, dot)
		w.list(n.ElseList, dot)
	case *parse.RangeNode:
		w.pipe(n.Pipe, dot)
		w.list(n.List, w.elem(w.pipeScope(n.Pipe, dot)))
		w.list(n.ElseList, dot)
	case *parse.WithNode:
		w.pipe(n.Pipe, dot)
		w.list(n.List, w.pipeScope(n.Pipe, dot))
		w.list(n.ElseList, dot)
	case *parse.TemplateNode:
		w.pipe(n.Pipe, dot)
	}
}

func (w *fieldWalker) pipe(p *parse.PipeNode, dot fieldScope) {
	if p == nil {
		return
	}
	for _, c := range p.Cmds {
		for _, a := range c.Args {
			w.arg(a, dot)
		}
	}
}

func (w *fieldWalker) arg(a parse.Node, dot fieldScope) {
	switch a := a.(type) {
	case *parse.FieldNode:
		w.resolve(a, dot, a.Ident)
	case *parse.VariableNode:
		if len(a.Ident) > 1 && a.Ident[0] == "$" {
			w.resolve(a, w.root, a.Ident[1:])
		}
	case *parse.PipeNode:
		w.pipe(a, dot)
	case *parse.ChainNode:
		w.arg(a.Node, dot)
	}
}

// pipeScope is what a pipeline's value is, when it is one field or $.
func (w *fieldWalker) pipeScope(p *parse.PipeNode, dot fieldScope) fieldScope {
	if p == nil || len(p.Cmds) != 1 || len(p.Cmds[0].Args) != 1 {
		return fieldScope{}
	}
	switch a := p.Cmds[0].Args[0].(type) {
	case *parse.FieldNode:
		return w.lookup(dot, a.Ident)
	case *parse.VariableNode:
		if a.Ident[0] == "$" {
			return w.lookup(w.root, a.Ident[1:])
		}
	case *parse.DotNode:
		return dot
	}
	return fieldScope{}
}

// elem is the scope of one element of what s is: an array's items, a map's
// values.
func (w *fieldWalker) elem(s fieldScope) fieldScope {
	if s.schema == nil {
		return fieldScope{}
	}
	if items, ok := s.schema["items"].(map[string]any); ok {
		return fieldScope{schema: items}
	}
	if ap, ok := s.schema["additionalProperties"].(map[string]any); ok {
		return fieldScope{schema: ap}
	}
	return fieldScope{}
}

// lookup follows names from s without reporting: unknown when the schema
// does not say.
func (w *fieldWalker) lookup(s fieldScope, names []string) fieldScope {
	for _, name := range names {
		next, ok := child(s, name)
		if !ok {
			return fieldScope{}
		}
		s = next
	}
	return s
}

// resolve reports the first of names the schema rules out.
func (w *fieldWalker) resolve(n parse.Node, s fieldScope, names []string) {
	for _, name := range names {
		next, ok := child(s, name)
		if !ok {
			loc, _ := w.tree.ErrorContext(n)
			line := loc
			if i := strings.LastIndexByte(loc, ':'); i >= 0 {
				if j := strings.LastIndexByte(loc[:i], ':'); j >= 0 {
					line = "line " + loc[j+1:i]
				}
			}
			w.bad = append(w.bad, line+": {{"+n.String()+"}}: the params schema declares no field "+name+suggest(name, declared(s)))
			return
		}
		s = next
	}
}

// child is the scope of field name of s; false when the schema rules the
// field out. An unknown scope accepts any field.
func child(s fieldScope, name string) (fieldScope, bool) {
	if s.params && name == notifytype.TenantKey {
		return fieldScope{schema: tenantSchema}, true
	}
	if s.params && name == LocaleKey {
		return fieldScope{}, true
	}
	if s.batch {
		switch name {
		case BatchCount:
			return fieldScope{schema: map[string]any{"type": "number"}}, true
		case BatchActors:
			return fieldScope{schema: map[string]any{"type": "array", "items": map[string]any{"type": "string"}}}, true
		case BatchItems:
			return fieldScope{schema: map[string]any{"type": "array", "items": s.schema}}, true
		}
	}
	sch := s.schema
	if sch == nil || open(sch) {
		return fieldScope{}, true
	}
	props, _ := sch["properties"].(map[string]any)
	if p, ok := props[name]; ok {
		ps, _ := p.(map[string]any)
		return fieldScope{schema: ps}, true
	}
	if ap, ok := sch["additionalProperties"].(map[string]any); ok {
		return fieldScope{schema: ap}, true
	}
	return fieldScope{}, false
}

// tenantSchema is what templates see as .Tenant (notifytype.Tenant).
var tenantSchema = map[string]any{"type": "object", "additionalProperties": false, "properties": map[string]any{
	"ID": map[string]any{"type": "string"}, "Name": map[string]any{"type": "string"},
	"Branding": map[string]any{"type": "object", "additionalProperties": false, "properties": map[string]any{
		"LogoURL": map[string]any{"type": "string"}, "PrimaryColor": map[string]any{"type": "string"},
		"EmailFrom": map[string]any{"type": "string"}}}}}

// open reports whether a schema lets an object have fields it does not
// list: it lists none (and is not closed), allows others explicitly, or says
// it in a way this check does not follow.
func open(sch map[string]any) bool {
	for _, k := range []string{"allOf", "anyOf", "oneOf", "$ref", "$dynamicRef", "if", "patternProperties", "unevaluatedProperties", "dependentSchemas"} {
		if _, ok := sch[k]; ok {
			return true
		}
	}
	if ap, ok := sch["additionalProperties"]; ok {
		if b, isBool := ap.(bool); isBool {
			return b
		}
		return false // a schema: child descends into it
	}
	props, _ := sch["properties"].(map[string]any)
	if len(props) == 0 {
		// Nothing declared, nothing forbidden: any field is fine. A
		// non-object schema (a string, an array) has no fields either way;
		// executing the template reports that.
		return true
	}
	return false
}

func declared(s fieldScope) []string {
	props, _ := s.schema["properties"].(map[string]any)
	names := make([]string, 0, len(props)+3)
	for k := range props {
		names = append(names, k)
	}
	if s.batch {
		names = append(names, BatchCount, BatchActors, BatchItems)
	}
	sort.Strings(names)
	return names
}

// suggest names the declared field closest to name, when one is close.
func suggest(name string, names []string) string {
	best, dist := "", 3
	for _, n := range names {
		if d := editDistance(strings.ToLower(name), strings.ToLower(n)); d < dist {
			best, dist = n, d
		}
	}
	list := strings.Join(names, ", ")
	if best != "" {
		return " (did you mean " + best + "? declared: " + list + ")"
	}
	return " (declared: " + list + ")"
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = slices.Min([]int{prev[j] + 1, cur[j-1] + 1, prev[j-1] + cost})
		}
		prev, cur = cur, prev
	}
	return prev[len(rb)]
}
