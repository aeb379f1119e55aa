package config

import (
	"reflect"

	"go.yaml.in/yaml/v3"

	"github.com/notifyd/notifyd/templates"
)

// Unless conditions a notifier channel may name (NotifierChannel.Unless).
const (
	UnlessRead = "read"
	UnlessSeen = "seen"
)

// decodeWorkflowKey decodes the workflow keys of a notifier's channel
// section (delay, unless, throttle, if) into nc, checking their values, and
// reports whether p was one of them. Whether the channel may use them is
// the registry's to say: it knows which channel is the inbox.
func (d *decoder) decodeWorkflowKey(nc *NotifierChannel, p pair, path string) bool {
	switch p.key.Value {
	case "delay":
		d.decode(p.val, path, reflect.ValueOf(&nc.Delay).Elem())
		if !isNull(p.val) && nc.Delay <= 0 {
			d.errs.addLine(p.key.Line, path, "must be a positive duration, got %s", nc.Delay)
		}
	case "unless":
		d.decode(p.val, path, reflect.ValueOf(&nc.Unless).Elem())
		if nc.Unless != "" && nc.Unless != UnlessRead && nc.Unless != UnlessSeen {
			d.errs.addLine(p.key.Line, path, "unknown condition %q (want %s or %s)", nc.Unless, UnlessRead, UnlessSeen)
		}
	case "throttle":
		if p.val.Kind != yaml.MappingNode {
			d.errs.addLine(p.key.Line, path, "want a mapping {limit: <n>, per: <duration>}, got %s", describe(p.val))
			return true
		}
		t := &Throttle{}
		d.decode(p.val, path, reflect.ValueOf(t).Elem())
		if t.Limit <= 0 {
			d.errs.add(join(path, "limit"), "must be a positive integer, got %d", t.Limit)
		}
		if t.Per <= 0 {
			d.errs.add(join(path, "per"), "must be a positive duration, got %s", t.Per)
		}
		nc.Throttle = t
	case "if":
		d.decode(p.val, path, reflect.ValueOf(&nc.If).Elem())
	default:
		return false
	}
	return true
}

// validateBatch checks n.Batch and parses its key template, rendering it
// with the example params; a batched notifier's example params gain the
// batch fields (a batch of two), so that `notifyd check` renders every
// channel template as a batch's message would.
func (n *Notifier) validateBatch(el *errorList, path string) {
	b := n.Batch
	if b == nil {
		return
	}
	path = join(path, "batch")
	if b.Key == "" {
		el.add(join(path, "key"), "is required: a template over the params naming what batches together, such as \"{{.post_id}}\"")
	} else if b.KeyTmpl = textTmpl(el, join(path, "key"), b.Key); b.KeyTmpl != nil {
		renderCheck(el, join(path, "key"), b.KeyTmpl, templates.Params(n.example))
		checkFields(el, join(path, "key"), b.KeyTmpl, &Notifier{Params: n.Params})
	}
	if b.Window <= 0 {
		el.add(join(path, "window"), "must be a positive duration, got %s", b.Window)
	}
	if b.Max < 0 {
		el.add(join(path, "max"), "must be positive (or left out: only the window closes a batch), got %d", b.Max)
	}
	ex := make(map[string]any, len(n.example)+3)
	for k, v := range n.example {
		ex[k] = v
	}
	ex[templates.BatchCount] = float64(2)
	ex[templates.BatchActors] = []any{"example-actor"}
	ex[templates.BatchItems] = []any{n.example, n.example}
	n.example = ex
}
