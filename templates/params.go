package templates

import (
	"encoding/json"
	"math/big"
	"strings"

	"github.com/notifyd/notifyd/notifytype"
)

// Params returns params as notifier templates see them: an empty map for
// nil (the dot is always an object), the tenant as .Tenant (the zero Tenant
// when the caller named none), and json.Number values as float64, so
// {{printf "%.2f" .amount}} and {{if gt .count 1.0}} work the same whether
// the caller decoded with UseNumber or not. An integer beyond ±2^53, which a
// float64 cannot hold exactly, stays a json.Number (it prints all its
// digits). The caller's map is never written to.
func Params(p map[string]any) map[string]any {
	if _, ok := p[notifytype.TenantKey]; !ok {
		p = notifytype.TemplateParams(p, nil)
	}
	if !hasNumber(p) {
		return p
	}
	return floatNumbers(p).(map[string]any)
}

// Batch template fields: what a batched notifier's templates see besides the
// params (the params of the notification that rendered them).
const (
	BatchCount  = "Count"  // how many notifications the batch holds
	BatchActors = "Actors" // their distinct actors, in arrival order
	BatchItems  = "Items"  // each one's params, oldest first
)

// BatchParams returns params as a batch's templates see them: params (the
// notification rendering them) with the batch fields added.
func BatchParams(params map[string]any, count int, actors []string, items []any) map[string]any {
	out := make(map[string]any, len(params)+3)
	for k, v := range params {
		out[k] = v
	}
	a := make([]any, len(actors))
	for i, x := range actors {
		a[i] = x
	}
	out[BatchCount] = float64(count)
	out[BatchActors] = a
	out[BatchItems] = items
	return out
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
