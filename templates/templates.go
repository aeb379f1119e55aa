// Package templates parses and renders the templates notifiers, channels and
// digests are written in, with notifyd's conventions: text/template and
// html/template with missingkey=zero, a param the sender left out printing
// as nothing, and params read alike whether their numbers were decoded as
// json.Number or float64.
//
// The config loader parses every template with this package (so `notifyd
// check` sees exactly what the daemon runs); channels and jobs render with
// it. It imports nothing of notifyd but the leaf notifytype.
package templates

import (
	"fmt"
	htmltemplate "html/template"
	"io"
	"strings"
	"text/template"
	"text/template/parse"
)

// Executor is a parsed text or html template.
type Executor interface {
	Execute(w io.Writer, data any) error
}

// nilFunc is appended to every output action of a text template. With
// missingkey=zero a missing key of a map[string]any still prints "<no value>"
// (the zero of an interface is nil); passing the value through nilFunc turns
// that nil into "", which is what a reader of a notification expects to see
// for a param the sender left out. html/template already prints nil as "".
const nilFunc = "notifydValue"

func emptyValue(v any) any {
	if v == nil {
		return ""
	}
	return v
}

// RecipientFunc is the template function email and digest templates use to
// reach the recipient's profile ({{recipient.Name}}). The channel that
// renders them binds it to the real recipient at every render; the parsers
// here define it as ExampleRecipient so that `notifyd check` can parse and
// render templates that use it.
const RecipientFunc = "recipient"

// ExampleProfile has the fields of a recipient's profile as a channel's
// templates see them (channels.Recipient), for rendering at check time.
type ExampleProfile struct {
	ID, Email, Name, Locale, Timezone, WebhookURL, Phone string
	Data                                                 map[string]any
}

// ExampleRecipient is the recipient templates see at check time.
func ExampleRecipient() ExampleProfile {
	return ExampleProfile{ID: "example", Email: "example@example.test", Name: "Example Person", Locale: "en",
		Timezone: "UTC", Data: map[string]any{}}
}

// ParseText parses a text/template named name (its key path) with
// missingkey=zero, every output action passing nil on as "". An empty src
// gives a nil template and no error. Errors name the line, not the template.
func ParseText(name, src string) (*template.Template, error) {
	return parseText(name, src, false)
}

// ParseRecipientText is ParseText for a template that may call recipient
// ({{recipient.Name}}): only a channel that renders each message for one
// recipient, and binds the function to them, may parse with it. Anywhere
// else the function would render the example person for everyone, so
// ParseText does not define it and a template naming it does not parse.
func ParseRecipientText(name, src string) (*template.Template, error) {
	return parseText(name, src, true)
}

func parseText(name, src string, recipient bool) (*template.Template, error) {
	if src == "" {
		return nil, nil
	}
	funcs := template.FuncMap{nilFunc: emptyValue, TranslateFunc: translate}
	if recipient {
		funcs[RecipientFunc] = ExampleRecipient
	}
	t, err := template.New(name).Option("missingkey=zero").Funcs(funcs).Parse(src)
	if err != nil {
		if !recipient && strings.Contains(err.Error(), `function "`+RecipientFunc+`" not defined`) {
			return nil, fmt.Errorf("%s: {{%s}} is only available in email and digest templates, which are rendered for one recipient at a time; this one is not", name, RecipientFunc)
		}
		return nil, CleanError(name, err)
	}
	for _, tt := range t.Templates() {
		if tt.Tree != nil {
			passRoot(tt.Tree, tt.Tree.Root)
			emptyNils(tt.Tree, tt.Tree.Root)
		}
	}
	return t, nil
}

// emptyNils rewrites every output action {{pipeline}} under n into
// {{pipeline | notifydValue}}.
func emptyNils(tree *parse.Tree, n parse.Node) {
	switch n := n.(type) {
	case *parse.ListNode:
		if n == nil {
			return
		}
		for _, c := range n.Nodes {
			emptyNils(tree, c)
		}
	case *parse.ActionNode:
		if n.Pipe == nil || len(n.Pipe.Decl) > 0 {
			return // {{$x := ...}} prints nothing
		}
		id := parse.NewIdentifier(nilFunc).SetTree(tree).SetPos(n.Pos)
		n.Pipe.Cmds = append(n.Pipe.Cmds, &parse.CommandNode{NodeType: parse.NodeCommand, Pos: n.Pos, Args: []parse.Node{id}})
	case *parse.IfNode:
		emptyNils(tree, n.List)
		emptyNils(tree, n.ElseList)
	case *parse.RangeNode:
		emptyNils(tree, n.List)
		emptyNils(tree, n.ElseList)
	case *parse.WithNode:
		emptyNils(tree, n.List)
		emptyNils(tree, n.ElseList)
	}
}

// ParseHTML parses an html/template named name with missingkey=zero; params
// are escaped for HTML and the recipient function is defined (only email
// and digest templates are html). An empty src gives a nil template.
func ParseHTML(name, src string) (*htmltemplate.Template, error) {
	if src == "" {
		return nil, nil
	}
	t, err := htmltemplate.New(name).Option("missingkey=zero").
		Funcs(htmltemplate.FuncMap{RecipientFunc: ExampleRecipient, TranslateFunc: translate}).Parse(src)
	if err != nil {
		return nil, CleanError(name, err)
	}
	// Nothing has executed t yet, so it is not escaped: the rewrite is
	// escaped with the rest at the first Execute.
	for _, tt := range t.Templates() {
		if tt.Tree != nil {
			passRoot(tt.Tree, tt.Tree.Root)
		}
	}
	return t, nil
}

// RenderText renders t with params as its dot, the way notifier templates
// see params (see Params). A nil t renders "".
func RenderText(t *template.Template, params map[string]any) (string, error) {
	return execText(t, Params(params))
}

// RenderHTML is RenderText for html templates.
func RenderHTML(t *htmltemplate.Template, params map[string]any) (string, error) {
	return execHTML(t, Params(params))
}

// execText renders t with data; a nil t renders "".
func execText(t *template.Template, data any) (string, error) {
	if t == nil {
		return "", nil
	}
	var b strings.Builder
	if err := t.Execute(&b, data); err != nil {
		return "", fmt.Errorf("render %s: %w", t.Name(), err)
	}
	return b.String(), nil
}

// execHTML renders t with data; a nil t renders "".
func execHTML(t *htmltemplate.Template, data any) (string, error) {
	if t == nil {
		return "", nil
	}
	var b strings.Builder
	if err := t.Execute(&b, data); err != nil {
		return "", fmt.Errorf("render %s: %w", t.Name(), err)
	}
	return b.String(), nil
}

// CleanError drops the template's name (the key path, which a config error
// already carries) from a text/template or html/template error:
// `template: a.b:1:7: executing "a.b" at <.x.y>: ...` becomes
// `line 1:7: at <.x.y>: ...`.
func CleanError(name string, err error) error {
	s := err.Error()
	s = strings.ReplaceAll(s, "html/template:"+name+":", "line ")
	s = strings.ReplaceAll(s, "template: "+name+":", "line ")
	s = strings.ReplaceAll(s, fmt.Sprintf("executing %q ", name), "")
	return fmt.Errorf("%s", s)
}
