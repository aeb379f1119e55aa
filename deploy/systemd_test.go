package deploy

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// unitBinary is where the unit (and docs/deploy.md) installs the binary.
const unitBinary = "/usr/local/bin/notifyd"

// TestSystemdUnit runs `systemd-analyze verify` on notifyd.service (with
// ExecStart pointed at an executable that exists here) and fails on any
// complaint, an unknown key included, which verify only prints. It also keeps
// the unit docs/deploy.md shows equal to the file. Without systemd-analyze
// it skips, saying so.
func TestSystemdUnit(t *testing.T) {
	t.Parallel()
	unit, err := os.ReadFile("notifyd.service")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("../docs/deploy.md")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(doc, unit) {
		t.Errorf("docs/deploy.md does not show deploy/notifyd.service as it is")
	}
	if !bytes.Contains(unit, []byte("ExecStart="+unitBinary+" ")) {
		t.Fatalf("the unit's ExecStart does not run %s", unitBinary)
	}

	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed (Debian: apt-get install systemd)")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "notifyd.service")
	if err := os.WriteFile(path, bytes.ReplaceAll(unit, []byte(unitBinary+" "), []byte(exe+" ")), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", path).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "" {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}
