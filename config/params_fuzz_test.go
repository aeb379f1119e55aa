package config_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/notifyd/notifyd/config"
)

// fuzzSchemaConfig has a params schema that uses most of what JSON Schema
// 2020-12 offers a notifier: nested objects, arrays, $defs and $ref, anyOf and
// oneOf, enums and consts, string formats and patterns, numeric bounds and
// additionalProperties: false.
const fuzzSchemaConfig = `
notifiers:
  order.shipped:
    params:
      type: object
      required: [order, items]
      additionalProperties: false
      $defs:
        money: {type: object, required: [amount, currency], properties: {amount: {type: number, minimum: 0, multipleOf: 0.01}, currency: {enum: [EUR, USD]}}}
      properties:
        order: {type: string, pattern: "^[A-Z]{2}-[0-9]{1,8}$", maxLength: 11}
        email: {type: string, format: email}
        when: {type: string, format: date-time}
        link: {type: string, format: uri}
        total: {$ref: "#/$defs/money"}
        count: {type: integer, minimum: 1, maximum: 1000, exclusiveMaximum: 1000}
        items:
          type: array
          minItems: 1
          maxItems: 5
          uniqueItems: true
          items: {type: object, required: [sku], properties: {sku: {type: string, minLength: 1}, qty: {type: integer}}}
        kind: {const: shipment}
        note: {anyOf: [{type: string, maxLength: 20}, {type: "null"}]}
        choice: {oneOf: [{type: integer}, {type: number, minimum: 10}]}
        "a/b~c": {type: boolean}
    channels:
      in_app: {title: "Order {{.order}} shipped"}
`

// FuzzValidateParams validates arbitrary JSON params against a compiled
// schema, decoded the way the API and the fan-out decode them (UseNumber) and
// the way Go callers may hand them over (float64). It must never panic, and a
// refusal is always a *config.ParamsError whose details are JSON pointers
// with a message.
func FuzzValidateParams(f *testing.F) {
	for _, seed := range []string{
		`{"order":"AB-123","items":[{"sku":"x","qty":2}],"total":{"amount":9.99,"currency":"EUR"},"count":3,"kind":"shipment"}`,
		`{"order":"AB-123","items":[{"sku":"x"},{"sku":"x"}]}`,
		`{"order":"ab","items":[],"extra":1,"a/b~c":"no"}`,
		`{"order":"AB-1","items":[{}],"email":"not an email","when":"yesterday","link":"::"}`,
		`{"order":"AB-1","items":[{"sku":"x"}],"choice":12,"note":null,"count":1e400}`,
		`{"order":"AB-1","items":[{"sku":"x"}],"count":123456789012345678901234567890,"total":{"amount":-0.001,"currency":"GBP"}}`,
		`{"order":"AB-1","items":[{"sku":"x"}],"choice":1.5,"note":{"deep":[[[[[[[[[[1]]]]]]]]]]}}`,
		`{"order":"\u0000","items":[{"sku":"\ud800"}]}`,
		`{}`, `{"":null}`,
	} {
		f.Add([]byte(seed))
	}
	cfg, err := config.Parse("fuzz.yaml", []byte(fuzzSchemaConfig))
	if err != nil {
		f.Fatal(err)
	}
	nf, _ := cfg.Notifier("order.shipped")
	if nf.Schema == nil {
		f.Fatal("schema not compiled")
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		var withNumbers map[string]any
		if dec.Decode(&withNumbers) != nil {
			return
		}
		checkParamsError(t, nf.ValidateParams(withNumbers))
		var withFloats map[string]any
		if json.Unmarshal(data, &withFloats) == nil {
			checkParamsError(t, nf.ValidateParams(withFloats))
		}
	})
}

func checkParamsError(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		return
	}
	pe, ok := err.(*config.ParamsError)
	if !ok {
		var wrapped *config.ParamsError
		t.Fatalf("ValidateParams returned %T (%v), want *config.ParamsError (errors.As: %t)", err, err, errors.As(err, &wrapped))
	}
	if len(pe.Details) == 0 {
		t.Fatalf("ParamsError without details: %v", err)
	}
	for _, d := range pe.Details {
		if d.Pointer != "" && !strings.HasPrefix(d.Pointer, "/") {
			t.Fatalf("detail pointer %q is not a JSON pointer", d.Pointer)
		}
		if d.Message == "" {
			t.Fatalf("detail at %q has no message", d.Pointer)
		}
	}
	if pe.Error() == "" {
		t.Fatal("empty error text")
	}
}

// FuzzParse feeds arbitrary files to the config loader: it never panics, and
// a refusal is an *config.Errors naming at least one problem, each with a
// message.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		fuzzSchemaConfig,
		"database: {url: ${DATABASE_URL}}\nhttp: {listen: 127.0.0.1:8080}\n",
		"retry: {sweep: \"@every 1s\", lease: 5s}\ndigest: {schedule: \"CRON_TZ=Mars/Olympus 0 8 * * *\", timezone: Local}\n",
		"notifiers:\n  x:\n    channels:\n      in_app: {title: \"{{.a.b.c}}\"}\n      email: {subject: \"{{template \\\"x\\\"}}\", html: \"<a href='{{.u}}'>\"}\n",
		"notifiers:\n  x:\n    params: {$ref: \"https://example.com/s.json\"}\n    channels: {in_app: {title: x}}\n",
		"x-anchor: &a {fanout: 1}\nqueues: *a\n",
		"a: &a [*a]\n",
		"--- \n---\n",
		"\t\x00\xff",
		"queues: {fanout: -1, send: 99999999999999999999}\nhttp: {max_body: 0}\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 64<<10 {
			return
		}
		cfg, err := config.Parse("fuzz.yaml", data)
		if err == nil {
			if cfg == nil {
				t.Fatal("nil config without an error")
			}
			return
		}
		var errs *config.Errors
		if !errors.As(err, &errs) || len(errs.Errors) == 0 {
			t.Fatalf("Parse returned %T (%v), want *config.Errors with at least one error", err, err)
		}
		for _, e := range errs.Errors {
			if e.Message == "" {
				t.Fatalf("error without a message: %#v", e)
			}
		}
	})
}
