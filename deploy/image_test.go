// Package deploy holds what running notifyd outside Go needs: the image build
// (image.sh), the systemd unit and the Kubernetes example of docs/deploy.md,
// and the tests that build and run them.
package deploy

import (
	"archive/tar"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/notifyd/notifyd/internal/testing/pgtest"
	"github.com/notifyd/notifyd/internal/version"
	"github.com/notifyd/notifyd/server/servertest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// maxImageBytes is the ceiling docs/deploy.md promises for the image.
const maxImageBytes = 30 << 20

// TestImage builds the image as `make image` does, checks what it holds, runs
// `migrate` and then the daemon from it with podman against the test
// PostgreSQL, and waits for /readyz to name this release. It skips, saying
// what is missing, where buildah or podman is not installed or cannot run
// containers (.ci/run installs both).
func TestImage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds an image: not in -short")
	}
	for _, tool := range []string{"buildah", "podman"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed (Debian: apt-get install buildah podman)", tool)
		}
	}
	if out, err := exec.Command("podman", "info").CombinedOutput(); err != nil {
		t.Skipf("podman cannot run containers here: podman info: %v: %s", err, lastLine(out))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	dir := t.TempDir()

	bin := filepath.Join(dir, "notifyd")
	build := exec.CommandContext(ctx, "go", "build", "-trimpath",
		"-ldflags", "-s -w -X github.com/notifyd/notifyd/internal/version.Version="+version.Version,
		"-o", bin, "../cmd/notifyd")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	mustRun(t, build)

	image := fmt.Sprintf("localhost/notifyd-test:%d", os.Getpid())
	mustRun(t, exec.CommandContext(ctx, "./image.sh", bin, image, version.Version))
	t.Cleanup(func() { _ = exec.Command("podman", "rmi", "-f", image).Run() })

	var inspect []struct {
		Size   int64
		Config struct {
			User       string
			Entrypoint []string
		}
	}
	if err := json.Unmarshal(mustRun(t, exec.CommandContext(ctx, "podman", "image", "inspect", image)), &inspect); err != nil || len(inspect) != 1 {
		t.Fatalf("podman image inspect: %v", err)
	}
	img := inspect[0]
	t.Logf("image %s: %.1f MB, user %s", image, float64(img.Size)/(1<<20), img.Config.User)
	if img.Size > maxImageBytes {
		t.Errorf("image is %d bytes, over %d", img.Size, maxImageBytes)
	}
	if uid, _, _ := strings.Cut(img.Config.User, ":"); uid == "" || uid == "0" || strings.Trim(uid, "0123456789") != "" {
		t.Errorf("image user %q: want a numeric non-root user", img.Config.User)
	}
	// What the image holds, read without running it: the binary and the CA
	// bundle, nothing else (no shell).
	created := strings.TrimSpace(string(mustRun(t, exec.CommandContext(ctx, "podman", "create", image))))
	t.Cleanup(func() { _ = exec.Command("podman", "rm", "--force", created).Run() })
	export := exec.CommandContext(ctx, "podman", "export", created)
	files, err := imageFiles(export)
	if err != nil {
		t.Fatalf("podman export: %v", err)
	}
	if want := []string{"etc/ssl/certs/ca-certificates.crt", "notifyd"}; !slices.Equal(files, want) {
		t.Errorf("the image's files are %v, want %v", files, want)
	}

	// Running it needs a container runtime that works here.
	if out, err := exec.CommandContext(ctx, "podman", "run", "--rm", "--network=none", image, "version").CombinedOutput(); err != nil {
		if strings.Contains(string(out), "OCI") {
			t.Skipf("the image builds, but podman cannot run containers here: %s", lastLine(out))
		}
		t.Fatalf("notifyd version in the image: %v: %s", err, out)
	} else if !strings.HasPrefix(string(out), "notifyd "+version.Version) {
		t.Fatalf("notifyd version in the image = %q", out)
	}

	// The container reaches the test PostgreSQL over loopback TCP (the
	// throwaway cluster listens on a Unix socket only its owner may use):
	// the test relays one to the other.
	_, dbURL := pgtest.NewDBURL(t)
	containerDB := relayToLoopback(t, dbURL)
	listen := freeLoopbackAddr(t)
	cfgDir := filepath.Join(dir, "etc")
	if err := os.Mkdir(cfgDir, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf("database:\n  url: %q\nhttp:\n  listen: %s\n", containerDB, listen)
	if err := os.WriteFile(filepath.Join(cfgDir, "config.yaml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	// A scratch image has no /tmp; the bind mount's directory is made
	// readable by the image's user.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	mount := "--volume=" + cfgDir + ":/etc/notifyd:ro"

	// Migrations first, as the Kubernetes Job of docs/deploy.md runs them.
	mustRun(t, exec.CommandContext(ctx, "podman", "run", "--rm", "--network=host", mount, image,
		"migrate", "-config", "/etc/notifyd/config.yaml"))

	name := fmt.Sprintf("notifyd-test-%d", os.Getpid())
	mustRun(t, exec.CommandContext(ctx, "podman", "run", "--detach", "--name", name, "--network=host", mount, image))
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := exec.Command("podman", "logs", name).CombinedOutput()
			t.Logf("container logs:\n%s", logs)
		}
		_ = exec.Command("podman", "rm", "--force", "--time", "10", name).Run()
	})

	var last string
	if !servertest.Wait(2*time.Minute, func() bool {
		resp, err := http.Get("http://" + listen + "/readyz")
		if err != nil {
			last = err.Error()
			return false
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		last = fmt.Sprintf("%d %s", resp.StatusCode, body)
		var ready struct{ Status, Version string }
		return resp.StatusCode == 200 && json.Unmarshal(body, &ready) == nil &&
			ready.Status == "ready" && ready.Version == version.Version
	}) {
		t.Fatalf("/readyz of the container never answered ready with version %s; last: %s", version.Version, last)
	}

	// SIGTERM stops it cleanly (exit 0) within the grace period.
	mustRun(t, exec.CommandContext(ctx, "podman", "stop", "--time", "30", name))
	code := strings.TrimSpace(string(mustRun(t, exec.CommandContext(ctx, "podman", "inspect", "--format", "{{.State.ExitCode}}", name))))
	if code != "0" {
		t.Errorf("the container exited %s after SIGTERM, want 0", code)
	}
}

// relayToLoopback listens on 127.0.0.1 and relays each connection to the
// Unix socket dbURL names, returning dbURL pointed at the relay.
func relayToLoopback(t *testing.T, dbURL string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	port := q.Get("port")
	if port == "" {
		port = "5432"
	}
	socket := filepath.Join(q.Get("host"), ".s.PGSQL."+port)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				s, err := net.Dial("unix", socket)
				if err != nil {
					return
				}
				defer s.Close()
				go func() { _, _ = io.Copy(s, c); s.Close() }()
				_, _ = io.Copy(c, s)
			}()
		}
	}()
	addr := ln.Addr().(*net.TCPAddr)
	q.Set("host", "127.0.0.1")
	q.Set("port", strconv.Itoa(addr.Port))
	u.RawQuery = q.Encode()
	return u.String()
}

// imageFiles runs cmd (podman export) and returns the regular files of the
// tar it writes, sorted; podman adds the empty mount points of a container
// (dev, proc, sys, etc/hosts, …) to an export, and those are left out.
func imageFiles(cmd *exec.Cmd) ([]string, error) {
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	var files []string
	tr := tar.NewReader(out)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			_ = cmd.Wait()
			return nil, err
		}
		if h.Typeflag != tar.TypeDir && h.Size > 0 || h.Typeflag == tar.TypeSymlink {
			files = append(files, strings.TrimPrefix(h.Name, "./"))
		}
	}
	if err := cmd.Wait(); err != nil {
		return nil, err
	}
	slices.Sort(files)
	return files, nil
}

// freeLoopbackAddr returns a 127.0.0.1 address with a port free a moment ago.
func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func mustRun(t *testing.T, cmd *exec.Cmd) []byte {
	t.Helper()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v\n%s%s", strings.Join(cmd.Args, " "), err, out, stderr.String())
	}
	return out
}

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}
