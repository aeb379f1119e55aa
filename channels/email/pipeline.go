package email

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"syscall"

	"github.com/wneessen/go-mail/smtp"
)

// txMode is how a connection runs a mail transaction, chosen from the
// server's EHLO reply when the connection is opened (after STARTTLS, whose
// EHLO is the one that counts).
type txMode int

const (
	// modeSequential: MAIL, each RCPT, DATA, then the data, waiting for the
	// reply to each: four round trips for one recipient.
	modeSequential txMode = iota
	// modePipelining (PIPELINING, RFC 2920): MAIL, every RCPT and DATA in one
	// write, their replies read in order, then the dot-stuffed data and its
	// reply: two round trips.
	modePipelining
	// modeChunking (PIPELINING and CHUNKING, RFC 3030): MAIL, every RCPT and
	// "BDAT <size> LAST" followed by the message itself in one write, then
	// the replies: one round trip. Used for messages with one recipient only
	// (see conn.pipelined).
	modeChunking
)

func (m txMode) String() string {
	switch m {
	case modePipelining:
		return "pipelining"
	case modeChunking:
		return "chunking"
	}
	return "sequential"
}

// sessionMode returns the transaction mode for sc and the parameters MAIL
// carries: the same ones smtp.Client.Mail adds from the EHLO reply,
// BODY=8BITMIME when the server offers 8BITMIME and SMTPUTF8 when it offers
// SMTPUTF8 (the dialer never sets go-mail's WithoutSMTPUTF8 nor DSN). BDAT
// keeps BODY=8BITMIME: the messages are text, and RFC 3030 allows BDAT with
// an 8BITMIME body (BINARYMIME is only needed for binary content).
func sessionMode(sc *smtp.Client) (txMode, string) {
	var params string
	if ok, _ := sc.Extension("8BITMIME"); ok {
		params += " BODY=8BITMIME"
	}
	if ok, _ := sc.Extension("SMTPUTF8"); ok {
		params += " SMTPUTF8"
	}
	pipelining, _ := sc.Extension("PIPELINING")
	chunking, _ := sc.Extension("CHUNKING")
	switch {
	case pipelining && chunking:
		return modeChunking, params
	case pipelining:
		return modePipelining, params
	}
	return modeSequential, params
}

// transact runs one mail transaction on c in its mode. Its errors are
// *txError, with the same steps, codes and recipients whatever the mode.
func (c *conn) transact(from string, rcpts []string, m io.WriterTo) error {
	switch {
	case c.mode == modeSequential:
		return transact(c.sc, from, rcpts, m)
	case c.mode == modeChunking && len(rcpts) == 1:
		return c.pipelined(from, rcpts, m, true)
	default:
		return c.pipelined(from, rcpts, m, false)
	}
}

// pipelined runs a transaction with its commands pipelined, on the
// connection's textproto.Conn (the one smtp.Client reads and writes, so after
// STARTTLS it is the TLS connection; after EHLO, AUTH or a previous
// transaction nothing is left unread on it).
//
// With bdat, MAIL, RCPT and "BDAT <size> LAST" with the message go out in one
// write; else MAIL, the RCPTs and DATA, and after a 354 the dot-stuffed data.
// The replies are read in order, all of them before anything is decided. The
// error is the first refusal, MAIL's else the first refused RCPT's, as with
// the sequential transaction (which stops there), so classify, suppression
// and failover see the same thing in every mode. The server answers the DATA
// or BDAT of a transaction whose MAIL or every RCPT it refused with 503 or
// 554 and discards BDAT's bytes; the connection is then clean after RSET.
//
// A sequential transaction stops at the first refused RCPT and sends nothing;
// pipelined, the server may still accept DATA or BDAT for the recipients it
// did accept. After a 354 the only ways out are sending the message or
// closing the connection: the connection is dropped (txError.drop) and the
// RCPT's error returned, so nothing is sent, as before. BDAT's bytes are
// already on their way with the command, and a BDAT LAST the server accepts
// is a delivery to the accepted recipients: that is why a message with more
// than one recipient never uses BDAT (conn.transact) and takes the DATA path.
// (notifyd sends one recipient per message, so BDAT is the path taken.)
func (c *conn) pipelined(from string, rcpts []string, m io.WriterTo, bdat bool) error {
	if err := validateLine(from); err != nil {
		return newTxError(stepMail, err)
	}
	for _, to := range rcpts {
		if err := validateLine(to); err != nil {
			e := newTxError(stepRcpt, err)
			e.rcpt = to
			return e
		}
	}
	b, scratch := getBuffer(), getBuffer()
	defer putBuffer(b)
	defer putBuffer(scratch)
	b.WriteString("MAIL FROM:" + from + c.mailParams + "\r\n")
	for _, to := range rcpts {
		b.WriteString("RCPT TO:" + to + "\r\n")
	}
	if bdat {
		msg, err := wireMessage(m, scratch)
		if err != nil {
			return newTxError(stepMessage, err)
		}
		if c.reused && c.closedByServer() {
			// The server closed the connection while it sat in the pool (a
			// restart, an idle timeout): nothing was sent, so the message
			// can go out on a new connection (beforeData).
			return newTxError(stepMail, errors.New("the server closed the idle connection"))
		}
		fmt.Fprintf(b, "BDAT %d LAST\r\n", len(msg))
		b.Write(msg)
	} else {
		b.WriteString("DATA\r\n")
	}
	text := c.sc.Text
	// One write: the buffered writer is empty between transactions, so it
	// either copies b and flushes it, or writes b straight through.
	_, err := text.W.Write(b.Bytes())
	if err == nil {
		err = text.W.Flush()
	}
	if err != nil {
		// A failed write never delivers: the server did not get a whole
		// BDAT chunk (or no data at all).
		return newTxError(stepMail, err)
	}

	var first *txError // the error reported: the first refusal or failure
	broken := false    // the connection cannot be read any further
	// read reads the next reply and reports whether it has code expect.
	read := func(step txStep, expect int, rcpt string) bool {
		if broken {
			return false
		}
		_, _, err := text.ReadResponse(expect)
		if err == nil {
			return true
		}
		e := newTxError(step, err)
		e.rcpt = rcpt
		if e.code == 0 || e.code == 421 {
			// A connection failure, a garbled reply or the server closing:
			// the remaining replies will not come.
			broken = true
			// With BDAT the server may have the message by now, unless it
			// reset the connection: then it never read the whole chunk.
			e.sent = bdat && e.code == 0 && !peerDiscarded(err)
		}
		if first == nil {
			first = e
		} else if broken {
			first.drop = true
		}
		return false
	}
	read(stepMail, 250, "")
	for _, to := range rcpts {
		read(stepRcpt, 25, to)
	}
	var last bool // the server accepted DATA or BDAT
	if bdat {
		last = read(stepMessage, 250, rcpts[0])
	} else {
		last = read(stepData, 354, "")
	}
	if first != nil {
		if last {
			// A refusal, yet the server is in the data (354) or took the
			// message for the recipients it accepted (BDAT, which a single
			// recipient makes inconsistent): see above.
			first.drop = true
		}
		return first
	}
	if bdat {
		return nil
	}
	w := text.DotWriter()
	if _, err := m.WriteTo(w); err != nil {
		return newTxError(stepMessage, err)
	}
	if err := w.Close(); err != nil {
		return newTxError(stepMessage, err)
	}
	if _, _, err := text.ReadResponse(250); err != nil {
		e := newTxError(stepMessage, err)
		if len(rcpts) == 1 {
			e.rcpt = rcpts[0] // a refusal of the data is about the one mailbox
		}
		return e
	}
	return nil
}

// validateLine refuses a MAIL or RCPT argument that would end the command
// line early, as smtp.Client does.
func validateLine(line string) error {
	if strings.ContainsAny(line, "\r\n") {
		return errors.New("smtp: A line must not contain CR or LF")
	}
	return nil
}

// bufferPool holds the buffers a pipelined transaction is assembled in.
var bufferPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

func getBuffer() *bytes.Buffer {
	b := bufferPool.Get().(*bytes.Buffer)
	b.Reset()
	return b
}

// putBuffer returns b to the pool unless it grew for an unusually large
// message, which is left to the garbage collector.
func putBuffer(b *bytes.Buffer) {
	if b.Cap() <= 256<<10 {
		bufferPool.Put(b)
	}
}

// wireMessage renders m (into scratch when it is not rendered yet) as the
// server receives it through DATA, which BDAT
// sends as it is: textproto's dot writer, which smtp.Client's DATA uses,
// turns every LF not preceded by CR into CRLF and ends the data with a line
// break. The same normalisation here makes the stored message byte-identical
// in every mode (and leaves a DKIM signature, computed on the canonical form,
// valid in all).
func wireMessage(m io.WriterTo, scratch *bytes.Buffer) ([]byte, error) {
	var raw []byte
	if b, ok := m.(bytesMessage); ok {
		raw = b
	} else {
		if _, err := m.WriteTo(scratch); err != nil {
			return nil, err
		}
		raw = scratch.Bytes()
	}
	lone := 0
	for i, ch := range raw {
		if ch == '\n' && (i == 0 || raw[i-1] != '\r') {
			lone++
		}
	}
	var tail string
	switch {
	case len(raw) == 0:
		tail = "\r\n"
	case raw[len(raw)-1] == '\n':
	case raw[len(raw)-1] == '\r':
		tail = "\n"
	default:
		tail = "\r\n"
	}
	if lone == 0 && tail == "" {
		return raw, nil
	}
	out := make([]byte, 0, len(raw)+lone+len(tail))
	for i, ch := range raw {
		if ch == '\n' && (i == 0 || raw[i-1] != '\r') {
			out = append(out, '\r')
		}
		out = append(out, ch)
	}
	return append(out, tail...), nil
}

// closedByServer reports whether the server has closed c or sent something
// unasked (a 421 before closing) since the last transaction, without
// waiting: a pooled connection is otherwise silent. It peeks at the socket,
// where it can (see peekPending).
func (c *conn) closedByServer() bool {
	if c.sc.Text.R.Buffered() > 0 {
		return true
	}
	nc := c.raw
	if t, ok := nc.(*tls.Conn); ok {
		nc = t.NetConn()
	}
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	return peekPending(rc)
}

// peerDiscarded reports whether a read failed because the server reset the
// connection: its end was closed with data of ours unread (or before it
// arrived), so it never read a whole BDAT chunk.
func peerDiscarded(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}
