// Package version is notifyd's release version, the one `notifyd version`
// prints and /readyz reports.
package version

import (
	"runtime/debug"
)

// Version is this release's version (Semantic Versioning, without a leading
// v). A release build may set it with
//
//	-ldflags "-X github.com/notifyd/notifyd/internal/version.Version=0.4.1"
//
// and `make build` and `make image` do so from the VERSION file at the top of
// the repository; a plain `go build` keeps this value, which the release
// process keeps equal to that file (TestVersionFile checks it).
var Version = "0.4.0"

// Info is what a binary knows of how it was built.
type Info struct {
	// Version is Version above.
	Version string
	// Revision is the VCS commit the binary was built from, with "-dirty"
	// when the work tree had changes; empty when the build recorded none
	// (go run, or a build outside a git checkout, or with -buildvcs=false).
	Revision string
	// GoVersion is the Go toolchain that built the binary.
	GoVersion string
}

// Read returns the version and what runtime/debug.ReadBuildInfo recorded.
func Read() Info {
	info := Info{Version: Version}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return info
	}
	info.GoVersion = bi.GoVersion
	var dirty bool
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			info.Revision = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if info.Revision != "" && dirty {
		info.Revision += "-dirty"
	}
	return info
}

// String is the one line `notifyd version` prints:
// "notifyd 0.4.0 (commit 4a05341c…, go1.26.8)".
func (i Info) String() string {
	s := "notifyd " + i.Version
	var extra []string
	if i.Revision != "" {
		extra = append(extra, "commit "+i.Revision)
	}
	if i.GoVersion != "" {
		extra = append(extra, i.GoVersion)
	}
	for n, e := range extra {
		if n == 0 {
			s += " ("
		} else {
			s += ", "
		}
		s += e
	}
	if len(extra) > 0 {
		s += ")"
	}
	return s
}
