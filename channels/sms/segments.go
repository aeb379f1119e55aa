package sms

import "unicode/utf16"

// Encoding is how a text message's characters are sent.
type Encoding string

const (
	// GSM7 is the GSM 03.38 default alphabet, 7 bits a character: 160
	// characters fit one message, 153 each part of a longer one (the rest
	// of the part holds the header that joins them up).
	GSM7 Encoding = "GSM-7"
	// UCS2 is UTF-16, used as soon as one character is outside the GSM
	// alphabet (most emoji, accented letters beyond the alphabet, CJK): 70
	// code units fit one message, 67 each part of a longer one.
	UCS2 Encoding = "UCS-2"
)

// gsmBasic is the GSM 03.38 default alphabet (one septet each), without the
// escape character itself.
const gsmBasic = "@£$¥èéùìòÇ\nØø\rÅåΔ_ΦΓΛΩΠΨΣΘΞÆæßÉ !\"#¤%&'()*+,-./0123456789:;<=>?" +
	"¡ABCDEFGHIJKLMNOPQRSTUVWXYZÄÖÑÜ§¿abcdefghijklmnopqrstuvwxyzäöñüà"

// gsmExtended are the characters of the extension table: an escape and the
// character, two septets each.
const gsmExtended = "\f^{}\\[~]|€"

var gsmWidth = func() map[rune]int {
	m := map[rune]int{}
	for _, r := range gsmBasic {
		m[r] = 1
	}
	for _, r := range gsmExtended {
		m[r] = 2
	}
	return m
}()

// Segments returns how many messages text is sent as, and in which encoding.
// A long message is split into parts that a phone joins up again; a part
// never splits a two-septet GSM character or a UTF-16 surrogate pair, so the
// count is what the carrier bills. An empty text is one segment.
func Segments(text string) (int, Encoding) {
	widths := make([]int, 0, len(text))
	enc := GSM7
	for _, r := range text {
		w, ok := gsmWidth[r]
		if !ok {
			enc = UCS2
			break
		}
		widths = append(widths, w)
	}
	single, part := 160, 153
	if enc == UCS2 {
		widths = widths[:0]
		for _, r := range text {
			widths = append(widths, len(utf16.Encode([]rune{r})))
		}
		single, part = 70, 67
	}
	total := 0
	for _, w := range widths {
		total += w
	}
	if total <= single {
		return 1, enc
	}
	n, used := 1, 0
	for _, w := range widths {
		if used+w > part {
			n++
			used = 0
		}
		used += w
	}
	return n, enc
}
