package config

import (
	"reflect"

	"go.yaml.in/yaml/v3"
)

// Unless conditions a notifier channel may name (NotifierChannel.Unless).
const (
	UnlessRead = "read"
	UnlessSeen = "seen"
)

// decodeWorkflowKey decodes the workflow keys of a notifier's channel
// section (delay, unless, throttle) into nc, checking their values, and
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
	default:
		return false
	}
	return true
}
