package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
)

// Result is one row of the table and of results.json.
//
// A ratio target ("≥ 0.6×") compares Measured/Baseline with Target; an
// absolute target ("≤ 50 ms") compares Measured itself, and Baseline and
// Ratio are absent. Status "n/a" (a scenario whose code is not built yet) and
// "error" rows have no Pass.
type Result struct {
	Scenario     string   `json:"scenario"`
	Unit         string   `json:"unit"`
	Measured     float64  `json:"measured"`
	Baseline     *float64 `json:"baseline,omitempty"`
	BaselineName string   `json:"baseline_name,omitempty"`
	BaselineUnit string   `json:"baseline_unit,omitempty"`
	Ratio        *float64 `json:"ratio,omitempty"`
	// Target is the bar: a ratio (Op ">=") or an absolute value in Unit.
	Target     float64 `json:"target"`
	TargetOp   string  `json:"target_op"`   // ">=" or "<="
	TargetKind string  `json:"target_kind"` // "ratio" or "absolute"
	Pass       *bool   `json:"pass,omitempty"`
	Status     string  `json:"status"` // ok | n/a | error
	N          int     `json:"n"`
	Seconds    float64 `json:"seconds,omitempty"`
	Notes      string  `json:"notes,omitempty"`
	// CPU is what the measured run used: this process (the in-process
	// daemon and the bench), PostgreSQL, and other processes on the
	// machine; BaselineCPU the same for the baseline. CPU per unit of work
	// compares across runs on a busy machine better than wall time does.
	CPU         *CPUUse `json:"cpu,omitempty"`
	BaselineCPU *CPUUse `json:"baseline_cpu,omitempty"`
	// Noisy is set when other processes took more than half a core during
	// the measurement or its baseline: the wall-clock figures are suspect.
	Noisy bool `json:"noisy,omitempty"`
}

// CPUUse is CPU time spent during a timed window, in seconds.
type CPUUse struct {
	GoSeconds     float64 `json:"go_s"`
	PGSeconds     float64 `json:"pg_s"`
	OthersSeconds float64 `json:"others_s"`
}

// measurement is one timed run.
type measurement struct {
	rate    float64
	seconds float64
	cpu     cpuTimes // during the timed window
	note    string
	wal     int64 // WAL bytes the cluster wrote in the timed window (0: not measured)
}

// noisy reports whether other processes took more than half a core on
// average during the timed window.
func (m measurement) noisy() bool {
	return m.seconds > 0 && m.cpu.others().Seconds()/m.seconds > 0.5
}

// annotate records m (and its baseline, if any) on r: n, duration, CPU use,
// notes, and whether the machine was busy with other work meanwhile.
func annotate(r Result, n int, m measurement, base *measurement) Result {
	r.N, r.Seconds = n, m.seconds
	r.CPU = m.cpu.use()
	r.Notes = m.note
	r.Noisy = m.noisy()
	if base != nil {
		r.BaselineCPU = base.cpu.use()
		r.Notes += "; baseline: " + base.note
		r.Noisy = r.Noisy || base.noisy()
	}
	return r
}

// ratioResult builds a row whose target is measured/baseline op target.
func ratioResult(name, unit string, measured, baseline float64, baselineName, baselineUnit, op string, target float64) Result {
	r := Result{Scenario: name, Unit: unit, Measured: measured, Baseline: &baseline, BaselineName: baselineName,
		BaselineUnit: baselineUnit, Target: target, TargetOp: op, TargetKind: "ratio", Status: "ok"}
	if baseline > 0 {
		ratio := measured / baseline
		r.Ratio = &ratio
		pass := compare(ratio, op, target)
		r.Pass = &pass
	}
	return r
}

// absoluteResult builds a row whose target is measured op target.
func absoluteResult(name, unit string, measured float64, op string, target float64) Result {
	pass := compare(measured, op, target)
	return Result{Scenario: name, Unit: unit, Measured: measured, Target: target, TargetOp: op,
		TargetKind: "absolute", Pass: &pass, Status: "ok"}
}

// naResult is a row for a scenario that cannot run in this tree.
func naResult(name, unit, op string, target float64, kind, why string) Result {
	return Result{Scenario: name, Unit: unit, Target: target, TargetOp: op, TargetKind: kind, Status: "n/a", Notes: why}
}

// errorResult is a row for a scenario that failed.
func errorResult(name, unit, op string, target float64, kind string, err error) Result {
	return Result{Scenario: name, Unit: unit, Target: target, TargetOp: op, TargetKind: kind, Status: "error",
		Notes: err.Error()}
}

func compare(v float64, op string, target float64) bool {
	if op == "<=" {
		return v <= target
	}
	return v >= target
}

// Report is results.json.
type Report struct {
	Machine Machine  `json:"machine"`
	Flags   []string `json:"flags"`
	Results []Result `json:"results"`
	Seconds float64  `json:"seconds"`
	// QuietWaitSeconds is how long the run waited for other processes to
	// quieten before timed sections (-quiet).
	QuietWaitSeconds float64 `json:"quiet_wait_seconds"`
}

// Machine says where and on what the numbers were measured.
type Machine struct {
	Cores      int    `json:"cores"`
	GoVersion  string `json:"go_version"`
	GOOS       string `json:"goos"`
	GOARCH     string `json:"goarch"`
	CPUModel   string `json:"cpu_model,omitempty"`
	MemTotalMB int    `json:"mem_total_mb,omitempty"`
	PGSettings string `json:"pg_settings"`
	GitCommit  string `json:"git_commit,omitempty"`
	Timestamp  string `json:"timestamp"`
	// LoadStart and LoadEnd are the 1-minute load averages when the run
	// began and ended: other work on the machine makes the numbers noisy
	// (each row's notes also say how much CPU other processes took).
	LoadStart string `json:"load_start"`
	LoadEnd   string `json:"load_end"`
}

func writeJSON(path string, r *Report) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// printTable prints the one table: scenario | measured | baseline | ratio |
// target | result.
func printTable(w io.Writer, results []Result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "scenario\tmeasured\tbaseline (same run)\tratio\ttarget\tresult")
	fmt.Fprintln(tw, "--------\t--------\t-------------------\t-----\t------\t------")
	for _, r := range results {
		target := fmt.Sprintf("%s %s", opSymbol(r.TargetOp), formatNumber(r.Target))
		if r.TargetKind == "ratio" {
			target += "×"
		} else {
			target += " " + r.Unit
		}
		if r.TargetKind == "info" {
			target = "-"
		}
		switch r.Status {
		case "n/a":
			fmt.Fprintf(tw, "%s\tn/a (%s)\t\t\t%s\t-\n", r.Scenario, r.Notes, target)
			continue
		case "error":
			fmt.Fprintf(tw, "%s\terror\t\t\t%s\tMISS\n", r.Scenario, target)
			continue
		}
		measured := formatNumber(r.Measured) + " " + r.Unit
		baseline, ratio := "-", "-"
		if r.Baseline != nil {
			baseline = formatNumber(*r.Baseline) + " " + r.BaselineUnit
			if r.BaselineName != "" {
				baseline += " (" + r.BaselineName + ")"
			}
		}
		if r.Ratio != nil {
			ratio = fmt.Sprintf("%.2f×", *r.Ratio)
		}
		result := "MISS"
		if r.TargetKind == "info" {
			result = "info"
		}
		if r.Pass != nil && *r.Pass {
			result = "PASS"
		}
		if r.Noisy {
			result += " *"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Scenario, measured, baseline, ratio, target, result)
	}
	tw.Flush()
	if slices.ContainsFunc(results, func(r Result) bool { return r.Noisy }) {
		fmt.Fprintln(w, "* other processes took more than half a core during this measurement or its baseline: rerun on a quiet machine")
	}
	for _, r := range results {
		if r.Status == "error" {
			fmt.Fprintf(w, "  %s: %s\n", r.Scenario, r.Notes)
		}
	}
}

func opSymbol(op string) string {
	if op == "<=" {
		return "≤"
	}
	return "≥"
}

// formatNumber prints v with thousands separators and sensible precision.
func formatNumber(v float64) string {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return fmt.Sprint(v)
	case math.Abs(v) >= 1000:
		s := fmt.Sprintf("%.0f", v)
		neg := strings.HasPrefix(s, "-")
		s = strings.TrimPrefix(s, "-")
		var b strings.Builder
		for i, c := range s {
			if i > 0 && (len(s)-i)%3 == 0 {
				b.WriteByte(',')
			}
			b.WriteRune(c)
		}
		if neg {
			return "-" + b.String()
		}
		return b.String()
	case math.Abs(v) >= 100:
		return fmt.Sprintf("%.0f", v)
	case math.Abs(v) >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}
