package runtime

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vesselhost/vessel/internal/testutil"
)

// shimBinary is built once by TestMain.
var shimBinary string

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	flag.Parse()
	if testing.Short() {
		return m.Run() // the unit tests need no shim; the others skip (requireRoot)
	}
	dir, err := os.MkdirTemp("", "vessel-shim-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	shimBinary = filepath.Join(dir, "vessel-shim")
	if pre := os.Getenv("VESSEL_TEST_BIN"); pre != "" { // prebuilt (make test-v2)
		shimBinary = filepath.Join(pre, "vessel-shim")
		return m.Run()
	}
	build := exec.Command("go", "build", "-o", shimBinary, "github.com/vesselhost/vessel/cmd/vessel-shim")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build vessel-shim: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

// requireRoot marks the tests that run runc and CRIU as root: skipped
// under -short, failed (not skipped) without root otherwise.
func requireRoot(t *testing.T) {
	t.Helper()
	testutil.NeedRoot(t)
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// busyboxApplets get a symlink in /bin of the test rootfs.
var busyboxApplets = []string{
	"sh", "sleep", "cat", "echo", "init", "tty", "stty", "hostname", "grep",
	"ls", "ps", "mount", "true", "false", "id", "sed", "head", "printf", "test",
	"poweroff", "halt", "reboot", "kill",
}

// buildRootfs creates a tiny busybox root filesystem.
func buildRootfs(t *testing.T, dir string) string {
	t.Helper()
	root := filepath.Join(dir, "rootfs")
	for _, d := range []string{"bin", "sbin", "etc", "proc", "sys", "dev", "tmp", "run", "root"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(root, "tmp"), 0o1777); err != nil {
		t.Fatal(err)
	}
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "bin/busybox"), bb, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, a := range busyboxApplets {
		if err := os.Symlink("busybox", filepath.Join(root, "bin", a)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("../bin/busybox", filepath.Join(root, "sbin/init")); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"etc/inittab": "::sysinit:/bin/echo booted\n::shutdown:/bin/echo bye\n",
		"etc/passwd":  "root:x:0:0:root:/root:/bin/sh\n",
		"etc/group":   "root:x:0:\ntty:x:5:\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(root, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// testEnv is one test's runtime with its own runc root, state directory and
// cgroup parent, all removed at cleanup.
type testEnv struct {
	t       *testing.T
	dir     string
	rootfs  string
	rt      *Runtime
	cfg     Config
	cgroups string // parent cgroup, e.g. /vessel-test-1234
}

func newTestEnv(t *testing.T) *testEnv {
	t.Helper()
	requireRoot(t)
	dir := t.TempDir()
	e := &testEnv{
		t:       t,
		dir:     dir,
		rootfs:  buildRootfs(t, dir),
		cgroups: "/vessel-test-" + randHex(4),
	}
	e.cfg = Config{
		Shim:     shimBinary,
		Criu:     os.Getenv("VESSEL_CRIU"), // empty: the default
		Root:     filepath.Join(dir, "runc"),
		StateDir: filepath.Join(dir, "state"),
	}
	rt, err := New(e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.rt = rt
	t.Cleanup(e.cleanup)
	return e
}

// cleanup deletes every container of the test's runc root and the cgroup
// parent in every v1 hierarchy.
func (e *testEnv) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if list, err := e.rt.runc.List(ctx); err == nil {
		for _, c := range list {
			if err := e.rt.Delete(ctx, c.ID); err != nil {
				e.t.Errorf("cleanup: %v", err)
			}
		}
	}
	for _, d := range cgroupDirs(e.cgroups) {
		// Children first: runc removes the container's own cgroup.
		entries, _ := os.ReadDir(d)
		for _, ent := range entries {
			if ent.IsDir() {
				os.Remove(filepath.Join(d, ent.Name()))
			}
		}
		if err := os.Remove(d); err != nil && !os.IsNotExist(err) {
			e.t.Errorf("cleanup: remove cgroup %s: %v", d, err)
		}
	}
}

// cgroupDirs lists path in every mounted cgroup hierarchy.
func cgroupDirs(path string) []string {
	entries, _ := os.ReadDir("/sys/fs/cgroup")
	var out []string
	for _, ent := range entries {
		if ent.IsDir() {
			out = append(out, filepath.Join("/sys/fs/cgroup", ent.Name(), path))
		}
	}
	return out
}

// create writes a bundle for a container running args and returns its path.
func (e *testEnv) bundle(id string, args ...string) string {
	e.t.Helper()
	spec, err := GenerateSpec(SpecOptions{
		ID:          id,
		Hostname:    "host-" + id,
		Rootfs:      e.rootfs,
		Args:        args,
		CgroupsPath: e.cgroups + "/" + id,
	})
	if err != nil {
		e.t.Fatal(err)
	}
	b := filepath.Join(e.dir, "bundles", id)
	if err := WriteBundle(b, spec); err != nil {
		e.t.Fatal(err)
	}
	return b
}

func (e *testEnv) start(id string, args ...string) Process {
	e.t.Helper()
	p, err := e.rt.Start(context.Background(), id, e.bundle(id, args...), StartOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return p
}

// startCounter starts container id running counterScript, waits for its
// counter to reach n and returns its bundle and exits (its Watch): what a
// checkpoint test dumps.
func (e *testEnv) startCounter(id string, n int) (string, <-chan Exit) {
	e.t.Helper()
	bundle := e.bundle(id, "/bin/sh", "-c", counterScript)
	if _, err := e.rt.Start(context.Background(), id, bundle, StartOptions{}); err != nil {
		e.t.Fatal(err)
	}
	waitFor(e.t, fmt.Sprintf("the counter to reach %d", n), func() bool { return e.fileCount() >= n })
	exits, err := e.rt.Watch(id)
	if err != nil {
		e.t.Fatal(err)
	}
	return bundle, exits
}

// killDelete kills container id, waits for its exit on exits (its Watch)
// and deletes it: what a test does to a dumped container before restoring
// its images.
func (e *testEnv) killDelete(id string, exits <-chan Exit) {
	e.t.Helper()
	ctx := context.Background()
	if err := e.rt.Kill(ctx, id); err != nil {
		e.t.Fatal(err)
	}
	receive(e.t, exits)
	if err := e.rt.Delete(ctx, id); err != nil {
		e.t.Fatal(err)
	}
}

// execOut runs args in container id and returns its exit code and stdout.
func (e *testEnv) execOut(id string, args ...string) (int, string) {
	e.t.Helper()
	var out, errb strings.Builder
	code, err := e.rt.Exec(context.Background(), id, ExecOptions{Args: args, Stdout: &out, Stderr: &errb})
	if err != nil {
		e.t.Fatalf("exec %q: %v (stderr %q)", args, err, errb.String())
	}
	return code, out.String()
}
