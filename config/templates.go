package config

import (
	"encoding/json"
	"fmt"
	"github.com/notifyd/notifyd/notifytype"
	htmltemplate "html/template"
	"math/big"
	"strings"
	"text/template"
	"text/template/parse"
	"time"
)

// DigestItem is one pending notification in a digest email, as the digest
// templates see it (`{{range .Items}}{{.Title}}{{end}}`). Title, Body and URL
// are the notifier's in_app texts as rendered for the inbox; Params are the
// notification's params.
type DigestItem struct {
	Notifier, Key, Category, Reason, Title, Body, URL string
	Params                                            map[string]any
	CreatedAt                                         time.Time
}

// DigestData is the dot of the digest templates (digest.subject, digest.text,
// digest.html). Count is the number of pending rows the digest covers; Items
// holds at most digest.max_items of them, oldest first; More is
// Count-len(Items), zero when everything is listed. Recipient is whatever the
// digest job passes (its profile); `notifyd check` renders with a map there,
// so any field name renders as empty at check time.
type DigestData struct {
	Recipient any
	Items     []DigestItem
	Count     int
	More      int
}

// nilFunc is appended to every output action of a text template. With
// missingkey=zero a missing key of a map[string]any still prints "<no value>"
// (the zero of an interface is nil); passing the value through nilFunc turns
// that nil into "", which is what a reader of a notification expects to see
// for a param the sender left out. html/template already prints nil as "".
const nilFunc = "notifydValue"

var textFuncs = template.FuncMap{
	nilFunc: func(v any) any {
		if v == nil {
			return ""
		}
		return v
	},
}

// recipientTextFuncs are textFuncs with the recipient function, for the
// templates of a message rendered for one recipient at a time (email and
// digests), whose channel binds it to that recipient at every render.
var recipientTextFuncs = template.FuncMap{
	nilFunc:       textFuncs[nilFunc],
	recipientFunc: exampleRecipient,
}

// recipientFunc is the template function email templates use to reach the
// recipient's profile ({{recipient.Name}}). The email channel binds it to the
// real recipient at render time; here it returns an example so that config
// validation can parse and render templates that use it.
const recipientFunc = "recipient"

// exampleProfile has the fields of a recipient's profile as a channel's
// templates see them (channels.Recipient), for rendering at check time.
type exampleProfile struct {
	ID, Email, Name, Locale, Timezone, WebhookURL, Phone string
	Data                                                 map[string]any
}

func exampleRecipient() exampleProfile {
	return exampleProfile{ID: "example", Email: "example@example.test", Name: "Example Person", Locale: "en",
		Timezone: "UTC", Data: map[string]any{}}
}

// parseText parses a text/template named name with missingkey=zero. An empty
// source gives a nil template (see the *Tmpl fields).
func parseText(name, src string) (*template.Template, error) {
	return parseTextFuncs(name, src, textFuncs)
}

// parseRecipientText is parseText for a template that may call recipient
// ({{recipient.Name}}): only a channel that renders each message for one
// recipient, and binds the function to them, may parse with it. Anywhere
// else the function would render the example person for everyone, so it is
// not defined there and a template naming it does not parse.
func parseRecipientText(name, src string) (*template.Template, error) {
	return parseTextFuncs(name, src, recipientTextFuncs)
}

func parseTextFuncs(name, src string, funcs template.FuncMap) (*template.Template, error) {
	if src == "" {
		return nil, nil
	}
	t, err := template.New(name).Option("missingkey=zero").Funcs(funcs).Parse(src)
	if err != nil {
		if funcs[recipientFunc] == nil && strings.Contains(err.Error(), `function "`+recipientFunc+`" not defined`) {
			return nil, fmt.Errorf("%s: {{%s}} is only available in email and digest templates, which are rendered for one recipient at a time; this one is not", name, recipientFunc)
		}
		return nil, cleanTemplateErr(name, err)
	}
	for _, tt := range t.Templates() {
		if tt.Tree != nil {
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

// parseHTML parses an html/template named name with missingkey=zero; params
// are escaped for HTML. An empty source gives a nil template.
func parseHTML(name, src string) (*htmltemplate.Template, error) {
	if src == "" {
		return nil, nil
	}
	t, err := htmltemplate.New(name).Option("missingkey=zero").Funcs(htmltemplate.FuncMap{recipientFunc: exampleRecipient}).Parse(src)
	if err != nil {
		return nil, cleanTemplateErr(name, err)
	}
	return t, nil
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

// cleanTemplateErr drops the template's name (the key path, which the config
// error already carries) from a text/template error:
// `template: a.b:1:7: executing "a.b" at <.x.y>: ...` becomes
// `line 1:7: at <.x.y>: ...`.
func cleanTemplateErr(name string, err error) error {
	s := err.Error()
	s = strings.ReplaceAll(s, "html/template:"+name+":", "line ")
	s = strings.ReplaceAll(s, "template: "+name+":", "line ")
	s = strings.ReplaceAll(s, fmt.Sprintf("executing %q ", name), "")
	return fmt.Errorf("%s", s)
}

// dot returns the params as templates see them: an empty map for nil (the dot
// is always an object), and json.Number values as float64, so
// {{printf "%.2f" .amount}} and {{if gt .count 1.0}} work the same whether the
// caller decoded with UseNumber or not. An integer beyond ±2^53, which a
// float64 cannot hold exactly, stays a json.Number (it prints all its digits).
func dot(p map[string]any) map[string]any {
	if _, ok := p[notifytype.TenantKey]; !ok {
		// Every template may name .Tenant: a notification without a tenant
		// (or a caller that did not say) renders with the zero Tenant.
		p = notifytype.TemplateParams(p, nil)
	}
	if !hasNumber(p) {
		return p
	}
	return floatNumbers(p).(map[string]any)
}

func hasNumber(v any) bool {
	switch v := v.(type) {
	case json.Number:
		return true
	case map[string]any:
		for _, e := range v {
			if hasNumber(e) {
				return true
			}
		}
	case []any:
		for _, e := range v {
			if hasNumber(e) {
				return true
			}
		}
	}
	return false
}

// floatNumbers returns a copy of v with json.Number values turned into float64.
func floatNumbers(v any) any {
	switch v := v.(type) {
	case json.Number:
		if !strings.ContainsAny(string(v), ".eE") {
			if b, ok := new(big.Int).SetString(string(v), 10); ok && b.CmpAbs(big.NewInt(1<<53)) > 0 {
				return v
			}
		}
		if f, err := v.Float64(); err == nil {
			return f
		}
		return v
	case map[string]any:
		m := make(map[string]any, len(v))
		for k, e := range v {
			m[k] = floatNumbers(e)
		}
		return m
	case []any:
		s := make([]any, len(v))
		for i, e := range v {
			s[i] = floatNumbers(e)
		}
		return s
	}
	return v
}

// Render renders the digest subject, text and html for data. html is "" when
// digest.html is not configured. Items' Params are read as the notifier
// templates read params (json.Number as float64).
func (d *Digest) Render(data DigestData) (subject, text, html string, err error) {
	copied := false
	for i, it := range data.Items {
		if hasNumber(it.Params) {
			if !copied { // never write to the caller's slice
				data.Items = append([]DigestItem(nil), data.Items...)
				copied = true
			}
			data.Items[i].Params = dot(it.Params)
		}
	}
	if subject, err = execText(d.SubjectTmpl, data); err != nil {
		return "", "", "", err
	}
	if text, err = execText(d.TextTmpl, data); err != nil {
		return "", "", "", err
	}
	if html, err = execHTML(d.HTMLTmpl, data); err != nil {
		return "", "", "", err
	}
	return subject, text, html, nil
}
