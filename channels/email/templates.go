package email

import (
	"fmt"
	htmltemplate "html/template"
	"strings"
	"sync"
	"text/template"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/templates"
)

// RecipientFunc is the name of the template function that returns the
// recipient of the email being rendered (a channels.Recipient), so a template
// can greet them: {{recipient.Name}}. It is a function and not a field of the dot
// because the dot is the notification's params ({{.post_title}}), which belong
// to the application and may use any key.
//
// Templates are parsed by the config loader before New sees them, so the
// loader must declare a function of this name for a config to use it; New
// binds the real one for every render. Templates New parses itself (a config
// built in code) always have it.
const RecipientFunc = "recipient"

// templateFuncs are the functions the email templates are parsed with. The
// recipient function returned here is a placeholder for parsing: every render
// binds its own (see tmplSet).
func templateFuncs() map[string]any {
	return map[string]any{RecipientFunc: func() channels.Recipient { return channels.Recipient{} }}
}

// tmplSet is one compiled set of subject, text and html templates: a notifier's
// default email templates, one locale variant, or the digest templates.
//
// The templates are shared by every send, but the recipient function must
// return this send's recipient. Templates cannot take per-execution functions,
// so each concurrent render borrows its own clone from pool, whose recipient
// function reads the clone's own slot. Clones are made on demand and reused, so
// a render costs no clone in the steady state.
type tmplSet struct {
	name          string
	subject, text *template.Template
	// html is parsed by New and never executed: html/template refuses to clone
	// a template that has run, and the config loader test-renders its copy.
	html *htmltemplate.Template
	pool sync.Pool // of *boundSet
}

// boundSet is a clone of a tmplSet whose recipient function returns r.
type boundSet struct {
	r             channels.Recipient
	subject, text *template.Template
	html          *htmltemplate.Template
}

// newTmplSet compiles one template set. Compiled templates from the config
// loader are used when present (they carry its parse options and functions);
// otherwise, and always for html, the source is parsed here with
// missingkey=zero, as the loader does.
func newTmplSet(name string, subject, text, html string,
	subjectT, textT *template.Template, htmlT *htmltemplate.Template,
) (*tmplSet, error) {
	s := &tmplSet{name: name}
	var err error
	if s.subject, err = textTemplate(name+".subject", subject, subjectT); err != nil {
		return nil, err
	}
	if s.text, err = textTemplate(name+".text", text, textT); err != nil {
		return nil, err
	}
	switch {
	case html != "":
		// Parsed as the loader parses (t reaches the recipient's locale),
		// with the recipient function bound per render.
		s.html, err = templates.ParseHTML(name+".html", html)
		if err != nil {
			return nil, fmt.Errorf("parse %s.html: %w", name, err)
		}
		s.html.Funcs(templateFuncs())
	case htmlT != nil:
		// No source to re-parse: take a clone now, before anything executes it.
		if s.html, err = htmlT.Clone(); err != nil {
			return nil, fmt.Errorf("%s.html: %w (set the html source so it can be parsed again)", name, err)
		}
		s.html.Funcs(templateFuncs())
	}
	if s.subject == nil {
		return nil, fmt.Errorf("%s.subject: must be set", name)
	}
	if s.text == nil && s.html == nil {
		return nil, fmt.Errorf("%s: text or html must be set", name)
	}
	return s, nil
}

func textTemplate(name, src string, compiled *template.Template) (*template.Template, error) {
	if compiled != nil {
		return compiled, nil
	}
	if src == "" {
		return nil, nil
	}
	t, err := templates.ParseRecipientText(name, src)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", name, err)
	}
	return t.Funcs(templateFuncs()), nil
}

// get borrows a clone bound to r; give it back with put.
func (s *tmplSet) get(r channels.Recipient) (*boundSet, error) {
	b, _ := s.pool.Get().(*boundSet)
	if b == nil {
		b = &boundSet{}
		funcs := map[string]any{RecipientFunc: func() channels.Recipient { return b.r }}
		if s.subject != nil {
			b.subject = template.Must(s.subject.Clone()).Funcs(funcs)
		}
		if s.text != nil {
			b.text = template.Must(s.text.Clone()).Funcs(funcs)
		}
		if s.html != nil {
			h, err := s.html.Clone()
			if err != nil {
				return nil, fmt.Errorf("clone %s.html: %w", s.name, err)
			}
			b.html = h.Funcs(funcs)
		}
	}
	b.r = r
	return b, nil
}

func (s *tmplSet) put(b *boundSet) {
	b.r = channels.Recipient{} // do not keep a profile alive in the pool
	s.pool.Put(b)
}

// renderEmail renders the set with params as the dot (through the templates
// package, so params read exactly as `notifyd check` and the inbox read them).
func (s *tmplSet) renderEmail(r channels.Recipient, params map[string]any) (subject, text, html string, err error) {
	b, err := s.get(r)
	if err != nil {
		return "", "", "", err
	}
	defer s.put(b)
	if subject, err = templates.RenderText(b.subject, params); err != nil {
		return "", "", "", err
	}
	if text, err = templates.RenderText(b.text, params); err != nil {
		return "", "", "", err
	}
	if html, err = templates.RenderHTML(b.html, params); err != nil {
		return "", "", "", err
	}
	return cleanSubject(subject), text, html, nil
}

// renderDigest renders the set with data as the dot.
func (s *tmplSet) renderDigest(r channels.Recipient, data templates.DigestData) (subject, text, html string, err error) {
	b, err := s.get(r)
	if err != nil {
		return "", "", "", err
	}
	defer s.put(b)
	subject, text, html, err = templates.RenderDigest(b.subject, b.text, b.html, data)
	return cleanSubject(subject), text, html, err
}

// cleanSubject folds a rendered subject onto one line: a template written as a
// YAML block ends with a newline, and a header cannot carry one.
func cleanSubject(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
