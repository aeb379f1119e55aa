package templates

import (
	"fmt"
	"text/template/parse"
)

// TranslateFunc is the template function that translates a catalog key
// for the recipient: {{t "comment.created.in_app.title"}} renders the
// message with the params as its arguments; {{t "key" .author}} with a map
// of its own; {{t "key" "count" .n "name" .who}} with the pairs given.
//
// A function cannot see the dot, and the locale differs per recipient while
// the parsed template is shared, so the parsers rewrite every call
// {{t "key" …}} into {{t $ "key" …}}: the function finds the Locale in the
// root dot it is handed (params under LocaleKey, or DigestData.Locale).
// Inside a {{template}} called with another dot, $ is that dot.
const TranslateFunc = "t"

// LocaleKey is the key of params under which templates (and t) find the
// recipient's *Locale: {{.Locale.Tag}}. WithLocale puts it there.
const LocaleKey = "Locale"

// WithLocale returns params with loc under LocaleKey, in a new map:
// params itself is not changed. A nil loc returns params as they are.
func WithLocale(params map[string]any, loc *Locale) map[string]any {
	if loc == nil {
		return params
	}
	out := make(map[string]any, len(params)+1)
	for k, v := range params {
		out[k] = v
	}
	out[LocaleKey] = loc
	return out
}

// LocaleOf returns the Locale a template's dot carries, nil for none.
func LocaleOf(dot any) *Locale {
	switch d := dot.(type) {
	case map[string]any:
		l, _ := d[LocaleKey].(*Locale)
		return l
	case DigestData:
		return d.Locale
	case *DigestData:
		if d != nil {
			return d.Locale
		}
	}
	return nil
}

func translate(root any, key string, args ...any) (string, error) {
	loc := LocaleOf(root)
	var m map[string]any
	switch {
	case len(args) == 0:
		switch d := root.(type) {
		case map[string]any:
			m = d
		case DigestData:
			m = map[string]any{"Count": d.Count, "More": d.More}
		}
	case len(args) == 1:
		var ok bool
		if m, ok = args[0].(map[string]any); !ok {
			return "", fmt.Errorf("t %q: want a map of arguments or name/value pairs, got %T", key, args[0])
		}
	default:
		if len(args)%2 != 0 {
			return "", fmt.Errorf("t %q: arguments come in name/value pairs", key)
		}
		m = make(map[string]any, len(args)/2)
		for i := 0; i < len(args); i += 2 {
			name, ok := args[i].(string)
			if !ok {
				return "", fmt.Errorf("t %q: argument name %v is not a string", key, args[i])
			}
			m[name] = args[i+1]
		}
	}
	return loc.Translate(key, m)
}

// passRoot rewrites every call of t under n into a call with $ first.
func passRoot(tree *parse.Tree, n parse.Node) {
	switch n := n.(type) {
	case *parse.ListNode:
		if n == nil {
			return
		}
		for _, c := range n.Nodes {
			passRoot(tree, c)
		}
	case *parse.ActionNode:
		passRoot(tree, n.Pipe)
	case *parse.PipeNode:
		if n == nil {
			return
		}
		for _, c := range n.Cmds {
			if len(c.Args) > 0 {
				if id, ok := c.Args[0].(*parse.IdentifierNode); ok && id.Ident == TranslateFunc {
					root := &parse.VariableNode{NodeType: parse.NodeVariable, Pos: c.Pos, Ident: []string{"$"}}
					c.Args = append([]parse.Node{c.Args[0], root}, c.Args[1:]...)
				}
			}
			for _, a := range c.Args {
				passRoot(tree, a)
			}
		}
	case *parse.ChainNode:
		passRoot(tree, n.Node)
	case *parse.IfNode:
		passRoot(tree, n.Pipe)
		passRoot(tree, n.List)
		passRoot(tree, n.ElseList)
	case *parse.RangeNode:
		passRoot(tree, n.Pipe)
		passRoot(tree, n.List)
		passRoot(tree, n.ElseList)
	case *parse.WithNode:
		passRoot(tree, n.Pipe)
		passRoot(tree, n.List)
		passRoot(tree, n.ElseList)
	case *parse.TemplateNode:
		passRoot(tree, n.Pipe)
	}
}

// Keys returns the catalog keys t's calls name as a literal string, for
// `notifyd check` (a key computed at render time is not listed).
func Keys(t Executor) []string {
	var out []string
	for _, tree := range trees(t) {
		var walk func(parse.Node)
		walk = func(n parse.Node) {
			switch n := n.(type) {
			case *parse.ListNode:
				if n != nil {
					for _, c := range n.Nodes {
						walk(c)
					}
				}
			case *parse.ActionNode:
				walk(n.Pipe)
			case *parse.PipeNode:
				if n == nil {
					return
				}
				for _, c := range n.Cmds {
					if len(c.Args) > 1 {
						if id, ok := c.Args[0].(*parse.IdentifierNode); ok && id.Ident == TranslateFunc {
							for _, a := range c.Args[1:] {
								if s, ok := a.(*parse.StringNode); ok {
									out = append(out, s.Text)
									break
								}
							}
						}
					}
					for _, a := range c.Args {
						walk(a)
					}
				}
			case *parse.IfNode:
				walk(n.Pipe)
				walk(n.List)
				walk(n.ElseList)
			case *parse.RangeNode:
				walk(n.Pipe)
				walk(n.List)
				walk(n.ElseList)
			case *parse.WithNode:
				walk(n.Pipe)
				walk(n.List)
				walk(n.ElseList)
			case *parse.TemplateNode:
				walk(n.Pipe)
			}
		}
		if tree != nil {
			walk(tree.Root)
		}
	}
	return out
}
