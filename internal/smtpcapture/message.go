package smtpcapture

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"mime/quotedprintable"
	"net/mail"
	"strings"
	"sync"
	"time"
)

// Message is one accepted message. The parsed fields are filled from Data when
// the message is read through Messages or WaitFor.
type Message struct {
	// From is the envelope sender (MAIL FROM) and To the envelope recipients
	// (RCPT TO), as the client sent them.
	From string
	To   []string
	// Data is the message as received, dot-unstuffed, with CRLF line endings.
	Data []byte

	// Header is the parsed top-level header.
	Header mail.Header
	// MessageID is the Message-ID header as sent, with its angle brackets.
	MessageID string
	// Subject is the Subject header with RFC 2047 encoded words decoded.
	Subject string
	// ContentType is the top-level media type ("multipart/alternative",
	// "text/plain").
	ContentType string
	// Text and HTML are the decoded text/plain and text/html parts ("" when
	// absent), with "\n" line breaks. Nested multiparts (mixed → alternative)
	// are searched; the first part of each type wins. The line break that ends
	// a single-part message is not part of its Text or HTML.
	Text string
	HTML string
	// ParseErr says why the message could not be parsed; the fields above may
	// then be partly empty.
	ParseErr error
	// Accepted is when the server accepted the message (answered 250 to
	// the end of its DATA).
	Accepted time.Time
}

// received is a recorded message, parsed on first read.
type received struct {
	once sync.Once
	msg  Message
}

func (r *received) parsed() Message {
	r.once.Do(r.msg.parse)
	return r.msg
}

// HeaderValue returns the first value of the named header with RFC 2047 encoded
// words decoded ("" when absent).
func (m *Message) HeaderValue(name string) string {
	v := m.Header.Get(name)
	if dec, err := new(mime.WordDecoder).DecodeHeader(v); err == nil {
		return dec
	}
	return v
}

func (m *Message) parse() {
	msg, err := mail.ReadMessage(bytes.NewReader(m.Data))
	if err != nil {
		m.ParseErr = fmt.Errorf("read message: %w", err)
		return
	}
	m.Header = msg.Header
	m.MessageID = strings.TrimSpace(msg.Header.Get("Message-ID"))
	m.Subject = m.HeaderValue("Subject")
	m.ParseErr = m.walk(msg.Header, msg.Body, 0)
	if m.ContentType == "" {
		m.ContentType = "text/plain"
	}
}

// headerGetter is what the top-level header and a MIME part's header share.
type headerGetter interface{ Get(string) string }

// walk decodes one entity (the message or a part) and fills Text/HTML.
func (m *Message) walk(h headerGetter, body io.Reader, depth int) error {
	if depth > 10 {
		return fmt.Errorf("MIME nesting too deep")
	}
	ct := h.Get("Content-Type")
	mediaType, params := "text/plain", map[string]string{}
	if ct != "" {
		var err error
		if mediaType, params, err = mime.ParseMediaType(ct); err != nil {
			return fmt.Errorf("parse content-type %q: %w", ct, err)
		}
	}
	if depth == 0 {
		m.ContentType = mediaType
	}
	if strings.HasPrefix(mediaType, "multipart/") {
		mr := multipart.NewReader(body, params["boundary"])
		for {
			// NextRawPart: decode the transfer encoding ourselves, for base64 too.
			p, err := mr.NextRawPart()
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return fmt.Errorf("read %s part: %w", mediaType, err)
			}
			if err := m.walk(p.Header, p, depth+1); err != nil {
				return err
			}
		}
	}
	if mediaType != "text/plain" && mediaType != "text/html" {
		return nil
	}
	var r io.Reader = body
	switch strings.ToLower(strings.TrimSpace(h.Get("Content-Transfer-Encoding"))) {
	case "quoted-printable":
		r = quotedprintable.NewReader(body)
	case "base64":
		r = base64.NewDecoder(base64.StdEncoding, &newlineStripper{r: body})
	}
	b, err := io.ReadAll(r)
	if err != nil {
		return fmt.Errorf("decode %s part: %w", mediaType, err)
	}
	// Bodies travel with CRLF line endings; tests compare with "\n".
	s := strings.ReplaceAll(string(b), "\r\n", "\n")
	if depth == 0 {
		// A single-part message ends with the line break that DATA's final
		// "." needs; in a multipart one that break belongs to the boundary.
		// Drop it so Text and HTML read the same either way.
		s = strings.TrimSuffix(s, "\n")
	}
	switch {
	case mediaType == "text/plain" && m.Text == "":
		m.Text = s
	case mediaType == "text/html" && m.HTML == "":
		m.HTML = s
	}
	return nil
}

// newlineStripper drops CR and LF so base64 line breaks do not upset the decoder.
type newlineStripper struct{ r io.Reader }

func (n *newlineStripper) Read(p []byte) (int, error) {
	for {
		k, err := n.r.Read(p)
		j := 0
		for _, c := range p[:k] {
			if c != '\r' && c != '\n' {
				p[j] = c
				j++
			}
		}
		if j > 0 || err != nil {
			return j, err
		}
	}
}
