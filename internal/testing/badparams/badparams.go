// Package badparams is one table of params that the HTTP API refuses for a
// notifier whose params schema uses every JSON Schema keyword notify_send
// checks, shared by the tests that send it through HTTP, SQL (notify_send)
// and each client, so that all of them refuse the same values at the same
// pointer, and accept the same good ones.
package badparams

import "strings"

// Notifier is the notifier the table is for.
const Notifier = "params.keywords"

// Config is the notifier's config, a YAML block to put under notifiers:,
// indented by two spaces.
const Config = `  params.keywords:
    params:
      type: object
      additionalProperties: false
      properties:
        code: {type: string, pattern: "^[A-Z]{2}-[0-9]{1,8}$"}
        word: {type: string, pattern: "(?i)^ab+c\\."}
        step: {type: number, multipleOf: 0.25}
        tags: {type: array, uniqueItems: true, maxItems: 3}
        both: {allOf: [{type: string}, {maxLength: 3}]}
        either: {anyOf: [{type: string}, {type: integer, minimum: 0}]}
        one: {oneOf: [{type: integer}, {type: number, minimum: 10}]}
        nope: {not: {type: string}}
        link: {type: string, format: uri}
        id: {type: string, format: uuid}
        day: {type: string, format: date}
        host: {type: string, format: hostname}
        n: {type: integer, minimum: 1, maximum: 9}
    channels:
      in_app: {title: "{{.code}}"}
`

// Case is one params object, as JSON, and the RFC 6901 pointer of the value
// every API must name when it refuses it ("" when it must accept it).
type Case struct {
	Params  string `json:"params"`
	Pointer string `json:"pointer"`
}

// Cases are the table: bad params, each with one failing value, then good
// ones.
var Cases = []Case{
	{`{"code": "ab-1"}`, "/code"},
	{`{"code": "AB-123456789"}`, "/code"},
	{`{"code": "AB-1\n"}`, "/code"},
	{`{"word": "xabc."}`, "/word"},
	{`{"word": "abcx"}`, "/word"},
	{`{"step": 0.3}`, "/step"},
	{`{"step": 1e-3}`, "/step"},
	{`{"tags": ["a", "a"]}`, "/tags"},
	{`{"tags": [1, 1.0]}`, "/tags"},
	{`{"tags": [{"a": [1]}, {"a": [1.00]}]}`, "/tags"},
	{`{"tags": [1, 2, 3, 4]}`, "/tags"},
	{`{"both": "abcd"}`, "/both"},
	{`{"both": 5}`, "/both"},
	{`{"either": true}`, "/either"},
	{`{"either": -1}`, "/either"},
	{`{"one": 12}`, "/one"},
	{`{"one": 5.5}`, "/one"},
	{`{"nope": "x"}`, "/nope"},
	{`{"link": "example.com/a"}`, "/link"},
	{`{"id": "0190c6b2-7a3c-7def-8a12-3456789abcdx"}`, "/id"},
	{`{"day": "2026-02-30"}`, "/day"},
	{`{"day": "2025-02-29"}`, "/day"},
	{`{"day": "1900-02-29"}`, "/day"},
	{`{"host": "-a.example"}`, "/host"},
	{`{"host": "a_b.example"}`, "/host"},
	{`{"host": "a..example"}`, "/host"},
	{`{"host": "example.."}`, "/host"},
	{`{"host": ""}`, "/host"},
	{`{"host": "` + label63 + `x.example"}`, "/host"},
	{`{"host": "` + long254 + `"}`, "/host"},
	{`{"n": 2.5}`, "/n"},
	{`{"n": 10}`, "/n"},
	{`{"extra": 1}`, "/extra"},

	{`{}`, ""},
	{`{"code": "AB-12345678"}`, ""},
	{`{"word": "ABBBC.x"}`, ""},
	{`{"step": 1.75}`, ""},
	{`{"step": -2}`, ""},
	{`{"tags": ["a", "b", ["a"]]}`, ""},
	{`{"tags": [1, "1", true]}`, ""},
	{`{"both": "abc"}`, ""},
	{`{"either": "x"}`, ""},
	{`{"either": 3}`, ""},
	{`{"one": 5}`, ""},
	{`{"one": 10.5}`, ""},
	{`{"nope": 1}`, ""},
	{`{"link": "https://example.com/a?b#c"}`, ""},
	{`{"id": "0190C6B2-7A3C-7DEF-8A12-3456789ABCDE"}`, ""},
	{`{"day": "2024-02-29"}`, ""},
	{`{"day": "2000-02-29"}`, ""},
	{`{"host": "app-1.Example.test."}`, ""},
	{`{"host": "` + label63 + `.example"}`, ""},
	{`{"host": "` + long254[:253] + `."}`, ""},
	{`{"n": 9}`, ""},
}

// label63 is a 63-character hostname label; long254 a 254-character
// hostname of such labels.
var (
	label63 = strings.Repeat("a", 63)
	long254 = strings.Repeat(label63+".", 3) + strings.Repeat("b", 62)
)
