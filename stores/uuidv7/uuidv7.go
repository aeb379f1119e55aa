// Package uuidv7 generates RFC 9562 version 7 UUIDs: a 48-bit Unix millisecond
// timestamp followed by random bits, so ids sort roughly by creation time and
// index inserts stay on the right-hand edge of the B-tree.
package uuidv7

import (
	"cmp"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"sync"
	"time"
)

var (
	mu       sync.Mutex
	lastMS   int64
	sequence uint16 // 12-bit counter in rand_a, keeps ids from one process monotonic within a millisecond
)

// New returns a new UUIDv7 as 16 bytes.
func New() [16]byte {
	var u [16]byte
	_, _ = rand.Read(u[:]) // crypto/rand.Read never fails (Go 1.24+)
	ms := time.Now().UnixMilli()
	mu.Lock()
	stamp(&u, ms)
	mu.Unlock()
	return u
}

// stamp writes the timestamp and the monotonic counter into u, whose other
// bits are random, and sets the version and variant. mu must be held.
func stamp(u *[16]byte, ms int64) {
	if ms <= lastMS {
		sequence++
		if sequence > 0x0fff { // counter exhausted: borrow the next millisecond
			lastMS++
			sequence = 0
		}
		ms = lastMS
	} else {
		lastMS = ms
		sequence = uint16(binary.BigEndian.Uint16(u[6:8]) & 0x03ff) // random start, room to count up
	}
	seq := sequence
	u[0] = byte(ms >> 40)
	u[1] = byte(ms >> 32)
	u[2] = byte(ms >> 24)
	u[3] = byte(ms >> 16)
	u[4] = byte(ms >> 8)
	u[5] = byte(ms)
	u[6] = 0x70 | byte(seq>>8)&0x0f
	u[7] = byte(seq)
	u[8] = 0x80 | u[8]&0x3f // RFC 4122 variant
}

// Strings returns n new UUIDv7s in canonical form, as String would one after
// another, with one read of randomness and one allocation for all their text:
// what a fan-out chunk needs for a thousand rows.
func Strings(n int) []string {
	if n <= 0 {
		return nil
	}
	raw := make([]byte, 16*n)
	_, _ = rand.Read(raw)
	text := make([]byte, 36*n)
	ms := time.Now().UnixMilli()
	mu.Lock()
	for i := range n {
		stamp((*[16]byte)(raw[16*i:16*i+16]), ms)
	}
	mu.Unlock()
	for i := range n {
		formatTo(text[36*i:36*i+36], (*[16]byte)(raw[16*i:16*i+16]))
	}
	all := string(text)
	out := make([]string, n)
	for i := range out {
		out[i] = all[36*i : 36*i+36]
	}
	return out
}

// Batch hands out UUIDv7 strings made Size at a time (Strings). The zero
// value makes them 256 at a time. Not safe for concurrent use.
type Batch struct {
	Size int
	ids  []string
}

// Next returns the next id.
func (b *Batch) Next() string {
	if len(b.ids) == 0 {
		b.ids = Strings(cmp.Or(b.Size, 256))
	}
	id := b.ids[0]
	b.ids = b.ids[1:]
	return id
}

// String returns a new UUIDv7 in its canonical 36-character form.
func String() string { return Format(New()) }

// Format renders u as xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx.
func Format(u [16]byte) string {
	var b [36]byte
	formatTo(b[:], &u)
	return string(b[:])
}

func formatTo(b []byte, u *[16]byte) {
	hex.Encode(b[0:8], u[0:4])
	b[8] = '-'
	hex.Encode(b[9:13], u[4:6])
	b[13] = '-'
	hex.Encode(b[14:18], u[6:8])
	b[18] = '-'
	hex.Encode(b[19:23], u[8:10])
	b[23] = '-'
	hex.Encode(b[24:], u[10:])
}

// Valid reports whether s is a UUID (any version) in its canonical
// 36-character hyphenated form, upper or lower case hex.
func Valid(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
				return false
			}
		}
	}
	return true
}

// Parse returns the 16 bytes of s, a UUID in the form Valid accepts; false
// when it is not one.
func Parse(s string) ([16]byte, bool) {
	var u [16]byte
	if !Valid(s) {
		return u, false
	}
	_, err := hex.Decode(u[:], []byte(s[0:8]+s[9:13]+s[14:18]+s[19:23]+s[24:]))
	return u, err == nil
}

// Floor returns the smallest UUID whose first 48 bits are t's Unix
// milliseconds: every UUIDv7 made before t sorts below it (PostgreSQL
// compares uuid values byte by byte, as here), so "id < Floor(t)" selects rows
// by creation time through a primary-key index alone.
func Floor(t time.Time) string {
	var u [16]byte
	ms := t.UnixMilli()
	for i := range 6 {
		u[i] = byte(ms >> (40 - 8*i))
	}
	return Format(u)
}
