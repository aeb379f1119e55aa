package templates

import (
	htmltemplate "html/template"
	"text/template"
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
	// Locale is the recipient's locale and zone, for t ({{t "digest.subject"}}
	// has .Count and .More as its arguments); nil without locales.
	Locale *Locale
}

// RenderDigest renders the digest subject, text and html templates with
// data as their dot; a nil template renders "" (html is nil when digest.html
// is not configured). Items' Params are read as the notifier templates read
// params (json.Number as float64); the caller's items are not changed.
func RenderDigest(subjectT, textT *template.Template, htmlT *htmltemplate.Template, data DigestData) (subject, text, html string, err error) {
	copied := false
	for i, it := range data.Items {
		if hasNumber(it.Params) {
			if !copied { // never write to the caller's slice
				data.Items = append([]DigestItem(nil), data.Items...)
				copied = true
			}
			data.Items[i].Params = Params(it.Params)
		}
	}
	if subject, err = execText(subjectT, data); err != nil {
		return "", "", "", err
	}
	if text, err = execText(textT, data); err != nil {
		return "", "", "", err
	}
	if html, err = execHTML(htmlT, data); err != nil {
		return "", "", "", err
	}
	return subject, text, html, nil
}
