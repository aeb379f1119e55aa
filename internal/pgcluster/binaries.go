package pgcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// ErrNotInstalled is returned (wrapped) by FindBinaries when no PostgreSQL
// server binaries can be found. EnsureInstalled installs them when it can.
var ErrNotInstalled = errors.New("PostgreSQL server binaries not found")

// debianBinGlob is where Debian and Ubuntu put each installed major version.
const debianBinGlob = "/usr/lib/postgresql/*/bin"

// requiredBinaries are the programs Start runs; a directory lacking one of
// them is not a usable server installation (pg_config and psql alone come
// with the client package).
var requiredBinaries = []string{"initdb", "postgres", "pg_ctl"}

// FindBinaries returns the directory holding the PostgreSQL server programs
// (initdb, postgres, pg_ctl). It looks, in order, at the PG_BIN environment
// variable, the newest /usr/lib/postgresql/<version>/bin, the output of
// `pg_config --bindir`, and the directory of an initdb on PATH. A PG_BIN that
// does not hold the programs is an error, not a reason to look elsewhere.
// When nothing is found the error wraps ErrNotInstalled.
func FindBinaries() (dir string, err error) {
	if dir := os.Getenv("PG_BIN"); dir != "" {
		if err := checkBinDir(dir); err != nil {
			return "", fmt.Errorf("PG_BIN=%s: %w", dir, err)
		}
		return dir, nil
	}

	versions, _ := filepath.Glob(debianBinGlob)
	// Newest major version first: 15 before 9.6, which a string sort gets wrong.
	slices.SortFunc(versions, func(a, b string) int {
		return compareVersions(filepath.Base(filepath.Dir(b)), filepath.Base(filepath.Dir(a)))
	})
	for _, dir := range versions {
		if checkBinDir(dir) == nil {
			return dir, nil
		}
	}

	if pgConfig, err := exec.LookPath("pg_config"); err == nil {
		if out, err := exec.Command(pgConfig, "--bindir").Output(); err == nil {
			dir := strings.TrimSpace(string(out))
			if checkBinDir(dir) == nil {
				return dir, nil
			}
		}
	}
	if initdb, err := exec.LookPath("initdb"); err == nil {
		dir := filepath.Dir(initdb)
		if checkBinDir(dir) == nil {
			return dir, nil
		}
	}
	return "", fmt.Errorf("%w (looked at PG_BIN, %s, pg_config --bindir and PATH)", ErrNotInstalled, debianBinGlob)
}

func checkBinDir(dir string) error {
	for _, name := range requiredBinaries {
		info, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			return fmt.Errorf("%w: %s missing from %s", ErrNotInstalled, name, dir)
		}
		if info.IsDir() || info.Mode()&0o111 == 0 {
			return fmt.Errorf("%s/%s is not executable", dir, name)
		}
	}
	return nil
}

// compareVersions orders dotted numeric versions ("9.6" < "15"); a part that is
// not a number sorts before any number.
func compareVersions(a, b string) int {
	pa, pb := strings.Split(a, "."), strings.Split(b, ".")
	for i := range max(len(pa), len(pb)) {
		var na, nb int = -1, -1
		if i < len(pa) {
			if n, err := strconv.Atoi(pa[i]); err == nil {
				na = n
			}
		}
		if i < len(pb) {
			if n, err := strconv.Atoi(pb[i]); err == nil {
				nb = n
			}
		}
		if na != nb {
			return na - nb
		}
	}
	return 0
}

// EnsureInstalled makes sure FindBinaries succeeds. When the binaries are
// missing and the process runs as root on a system with apt-get, it installs
// the distribution's postgresql package (a minute or so); otherwise it returns
// an error wrapping ErrNotInstalled that says what to install. A nil logger
// discards progress messages.
func EnsureInstalled(ctx context.Context, logger *slog.Logger) error {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	_, err := FindBinaries()
	if err == nil || !errors.Is(err, ErrNotInstalled) || os.Getenv("PG_BIN") != "" {
		return err
	}
	aptGet, lookErr := exec.LookPath("apt-get")
	if os.Geteuid() != 0 || lookErr != nil {
		return fmt.Errorf("%w: install the PostgreSQL server (on Debian or Ubuntu: sudo apt-get install postgresql) or set PG_BIN to the directory holding initdb and postgres", err)
	}

	logger.InfoContext(ctx, "PostgreSQL server not found; installing the postgresql package with apt-get")
	for _, args := range [][]string{{"update"}, {"install", "-y", "postgresql"}} {
		cmd := exec.CommandContext(ctx, aptGet, args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("apt-get %s: %w\n%s", strings.Join(args, " "), err, tail(out.Bytes(), 30))
		}
	}
	if _, err := FindBinaries(); err != nil {
		return fmt.Errorf("after installing postgresql: %w", err)
	}
	logger.InfoContext(ctx, "installed PostgreSQL")
	return nil
}

var versionRE = regexp.MustCompile(`\(PostgreSQL\) (\d+)(?:\.(\d+))?`)

// serverMajorVersion runs `postgres --version` and returns the major version
// as PG_VERSION spells it ("15", or "9.6" for old releases).
func serverMajorVersion(binDir string) (string, error) {
	// --version is answered before the server's refusal to run as root.
	out, err := exec.Command(filepath.Join(binDir, "postgres"), "--version").Output()
	if err != nil {
		return "", fmt.Errorf("%s/postgres --version: %w", binDir, err)
	}
	m := versionRE.FindStringSubmatch(string(out))
	if m == nil {
		return "", fmt.Errorf("%s/postgres --version: unexpected output %q", binDir, out)
	}
	if major, _ := strconv.Atoi(m[1]); major < 10 && m[2] != "" {
		return m[1] + "." + m[2], nil
	}
	return m[1], nil
}

// tail returns at most the last n lines of b.
func tail(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
