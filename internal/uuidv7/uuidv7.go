// Package uuidv7 generates RFC 9562 version 7 UUIDs: a 48-bit Unix millisecond
// timestamp followed by random bits, so ids sort roughly by creation time and
// index inserts stay on the right-hand edge of the B-tree.
package uuidv7

import (
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
	mu.Unlock()
	u[0] = byte(ms >> 40)
	u[1] = byte(ms >> 32)
	u[2] = byte(ms >> 24)
	u[3] = byte(ms >> 16)
	u[4] = byte(ms >> 8)
	u[5] = byte(ms)
	u[6] = 0x70 | byte(seq>>8)&0x0f
	u[7] = byte(seq)
	u[8] = 0x80 | u[8]&0x3f // RFC 4122 variant
	return u
}

// String returns a new UUIDv7 in its canonical 36-character form.
func String() string { return Format(New()) }

// Format renders u as xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx.
func Format(u [16]byte) string {
	var b [36]byte
	hex.Encode(b[0:8], u[0:4])
	b[8] = '-'
	hex.Encode(b[9:13], u[4:6])
	b[13] = '-'
	hex.Encode(b[14:18], u[6:8])
	b[18] = '-'
	hex.Encode(b[19:23], u[8:10])
	b[23] = '-'
	hex.Encode(b[24:], u[10:])
	return string(b[:])
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
