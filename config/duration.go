package config

import (
	"fmt"
	"time"

	"go.yaml.in/yaml/v3"
)

// UnmarshalYAML reads a Go duration string ("30s", "5m", "72h", "1h30m").
// A bare number is refused: "10" could mean seconds or nanoseconds.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("want a duration such as 30s, 5m or 72h, got %s", describe(n))
	}
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("invalid duration %q (want a Go duration such as 30s, 5m or 72h)", n.Value)
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML writes d as a Go duration string.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// String formats d as a Go duration string ("72h0m0s").
func (d Duration) String() string { return time.Duration(d).String() }
