package security

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/testhost"
)

// Attacks on the host through a container's filesystem: symlinks a
// container's root (or an image) plants so that vesseld writes or reads
// host files, and setuid files it leaves for host users.

// canaryDir makes a host directory holding one file, "secret", with a
// content no container has; checkCanary fails the test if anything in it
// changed or was added.
func canaryDir(t *testing.T) (dir, secret string) {
	t.Helper()
	dir = t.TempDir()
	secret = "host-canary-" + filepath.Base(dir)
	if err := os.WriteFile(filepath.Join(dir, "secret"), []byte(secret), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir, secret
}

func checkCanary(t *testing.T, dir, secret string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if len(names) != 1 || names[0] != "secret" {
		t.Errorf("host directory %s now holds %v: vesseld wrote into it", dir, names)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "secret")); err != nil || string(b) != secret {
		t.Errorf("host file changed: %q, %v", b, err)
	}
}

// TestCopyThroughSymlinkedEtc: container root replaces /etc with a
// symlink to a host directory; `vessel copy` gives the copy its identity
// (/etc/hostname, /etc/hosts) without writing into the host directory.
func TestCopyThroughSymlinkedEtc(t *testing.T) {
	h := newHost(t)
	hostDir, secret := canaryDir(t)
	h.OK("launch", "busybox", "evil")
	h.OK("exec", "evil", "--", "sh", "-c", "rm -rf /etc && ln -s "+hostDir+" /etc")
	h.OK("stop", "evil", "--force")

	r := h.Vessel("copy", "evil", "evilcopy")
	checkCanary(t, hostDir, secret)
	if r.Code == 0 {
		// Written inside the copy only (an os.Root refuses the absolute
		// link, so this would be a regression in the other direction).
		t.Fatalf("copy through a symlinked /etc succeeded:\n%s", r)
	}
	if !strings.Contains(r.Stderr, "/etc") || !strings.Contains(r.Stderr, "escapes") {
		t.Errorf("copy failed without saying why:\n%s", r.Stderr)
	}
	if strings.Contains(h.OK("list", "--format", "csv"), "evilcopy") {
		t.Error("the failed copy left an instance")
	}
	if _, err := os.Lstat(h.ContainerPath("evilcopy")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the failed copy left its volume: %v", err)
	}
}

// TestCreateFromImageWithSymlinkedEtc: an image whose /etc is an absolute
// symlink to a host directory cannot make a create write there.
func TestCreateFromImageWithSymlinkedEtc(t *testing.T) {
	h := newHost(t)
	hostDir, secret := canaryDir(t)
	var img api.Image
	if err := json.Unmarshal([]byte(h.OK("image", "info", "busybox", "--format", "json")), &img); err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(filepath.Join(h.Root(), "images", img.Fingerprint+".tar"))
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tr := tar.NewReader(bytes.NewReader(src))
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.TrimPrefix(hdr.Name, "./"); n == "etc" || n == "etc/" || strings.HasPrefix(n, "etc/") {
			continue
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(tw, tr); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.WriteHeader(&tar.Header{Name: "etc", Typeflag: tar.TypeSymlink, Linkname: hostDir, Mode: 0o777}); err != nil {
		t.Fatal(err)
	}
	tw.Close()
	file := filepath.Join(t.TempDir(), "evil.tar")
	if err := os.WriteFile(file, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	h.OK("image", "import", file, "--alias", "evil-etc")

	r := h.Vessel("create", "evil-etc", "c1")
	checkCanary(t, hostDir, secret)
	if r.Code == 0 {
		t.Fatalf("create from an image with /etc -> %s succeeded:\n%s", hostDir, r)
	}
	if !strings.Contains(r.Stderr, "/etc") || !strings.Contains(r.Stderr, "escapes") {
		t.Errorf("create failed without saying why:\n%s", r.Stderr)
	}
	if strings.Contains(h.OK("list", "--format", "csv"), "c1") {
		t.Error("the failed create left an instance")
	}
}

// asNobody returns a command running name as the host user nobody, with
// extra open as its fd 3 if not nil.
func asNobody(extra *os.File, name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}}
	if extra != nil {
		cmd.ExtraFiles = []*os.File{extra}
	}
	cmd.Dir = "/"
	return cmd
}

// TestSetuidInRootfs: container root leaves a setuid-root program in its
// rootfs. A host user cannot reach it (the state tree is root's alone),
// and even handed a descriptor of the rootfs (as if the tree leaked), the
// program runs with the user's own identity: the pool is nosuid.
func TestSetuidInRootfs(t *testing.T) {
	h := newHost(t)
	idBin, err := exec.LookPath("id")
	if err != nil {
		t.Fatal(err)
	}
	idBytes, err := os.ReadFile(idBin)
	if err != nil {
		t.Fatal(err)
	}
	h.OK("launch", "busybox", "suid")
	// Made by container root, inside the container.
	if r := h.VesselIn(string(idBytes), "exec", "suid", "--", "sh", "-c", "cat > /rootid && chmod 4755 /rootid && ls -ln /rootid"); r.Code != 0 || !strings.Contains(r.Stdout, "-rwsr-xr-x") {
		t.Fatalf("plant the setuid file: %s", r)
	}
	planted := filepath.Join(h.ContainerPath("suid"), "rootid")

	// Through the path: refused on the way.
	out, err := asNobody(nil, planted, "-u").CombinedOutput()
	if err == nil || !strings.Contains(strings.ToLower(string(out)+err.Error()), "permission denied") {
		t.Errorf("nobody ran %s: %v\n%s", planted, err, out)
	}
	for _, dir := range []string{h.Root(), h.PoolPath(), filepath.Dir(h.ContainerPath("suid"))} {
		fi, err := os.Stat(dir)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o700 {
			t.Errorf("%s has mode %o, want 0700", dir, fi.Mode().Perm())
		}
	}
	out, err = asNobody(nil, "ls", h.PoolPath()).CombinedOutput()
	if err == nil {
		t.Errorf("nobody lists the pool:\n%s", out)
	}

	// Reached anyway (a descriptor of the rootfs): no setuid.
	rootfs, err := os.Open(h.ContainerPath("suid"))
	if err != nil {
		t.Fatal(err)
	}
	defer rootfs.Close()
	out, err = asNobody(rootfs, "/proc/self/fd/3/rootid", "-u").CombinedOutput()
	if err != nil {
		t.Fatalf("run the planted file through a descriptor: %v\n%s", err, out)
	}
	if got := strings.TrimSpace(string(out)); got != "65534" {
		t.Errorf("the setuid file ran as uid %s for nobody: the pool honours setuid", got)
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(mounts), "\n") {
		f := strings.Fields(line)
		if len(f) > 5 && f[4] == h.PoolPath() && (!strings.Contains(f[5], "nosuid") || !strings.Contains(f[5], "nodev")) {
			t.Errorf("pool mounted %s: want nosuid,nodev", f[5])
		}
	}
}

// TestDirPrecopySwappedSymlink: on the dir driver a live move reads a
// running container's tree while the container changes it. The container
// keeps swapping a directory for a symlink to a host directory holding a
// file of the same name; the target never receives the host file.
func TestDirPrecopySwappedSymlink(t *testing.T) {
	c := testhost.NewCluster(t, binDir, testhost.ClusterOptions{HostArgs: []string{"--storage-driver", "dir"}})
	hostDir, secret := canaryDir(t)
	c.OK("launch", "busybox", "alpha:swapper")
	c.OK("exec", "alpha:swapper", "--", "sh", "-c", "mkdir /d && echo container > /d/secret")
	// The loop runs detached in the container, through every move.
	c.OK("exec", "alpha:swapper", "--", "sh", "-c",
		"setsid sh -c 'while :; do mv /d /d.real; ln -s "+hostDir+" /d; rm /d; mv /d.real /d; done' </dev/null >/dev/null 2>&1 &")
	for i, hop := range [][2]string{{"alpha", "beta"}, {"beta", "alpha"}, {"alpha", "beta"}} {
		c.OK("move", hop[0]+":swapper", hop[1]+":", "--live")
		dst := c.Host(hop[1]).ContainerPath("swapper")
		if found := grepTree(t, dst, secret); found != "" {
			t.Fatalf("move %d: the target's copy holds the host file's content at %s", i, found)
		}
	}
	checkCanary(t, hostDir, secret)
}

// grepTree returns the path of a regular file under root holding s, if
// any. Files are read through an os.Root: the container keeps swapping a
// directory for a symlink to the host's canary on the target too, and a
// plain read of root/d/secret would follow it there itself.
func grepTree(t *testing.T, root, s string) string {
	t.Helper()
	r, err := os.OpenRoot(root)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var found string
	err = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || found != "" || !d.Type().IsRegular() {
			return nil //nolint:nilerr // a file the running container removed
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		if b, err := r.ReadFile(rel); err == nil && bytes.Contains(b, []byte(s)) {
			found = p
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

// TestReconcileOrphans: with the daemon down (killed: a clean stop
// unmounts the pool), one instance's volume is deleted and a volume no
// record explains is made; at start both are reported (vessel info) and
// cleaned.
func TestReconcileOrphans(t *testing.T) {
	h := newHost(t)
	h.OK("create", "busybox", "lost")
	h.OK("create", "busybox", "kept")
	h.KillDaemon()
	for _, args := range [][]string{
		{"btrfs", "subvolume", "delete", h.ContainerPath("lost")},
		{"btrfs", "subvolume", "create", h.ContainerPath("ghost")},
	} {
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
	h.Start()

	info := h.OK("info")
	for _, want := range []string{"lost", "container/ghost"} {
		if !strings.Contains(info, want) {
			t.Errorf("vessel info does not report %q:\n%s", want, info)
		}
	}
	if list := h.OK("list", "--format", "csv"); strings.Contains(list, "lost") || !strings.Contains(list, "kept") {
		t.Errorf("after reconcile:\n%s", list)
	}
	if _, err := os.Lstat(h.ContainerPath("ghost")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the unrecorded volume is still there: %v", err)
	}
	h.OK("start", "kept")
	// The name is free again.
	h.OK("create", "busybox", "lost")
}

// TestFilePushThroughPlantedLinks: a container plants links to a host
// directory (absolute, and relative climbing out with ".."), running and
// stopped; pushes through them land inside the container's own root, and
// the host directory is untouched.
func TestFilePushThroughPlantedLinks(t *testing.T) {
	h := newHost(t)
	hostDir, secret := canaryDir(t)
	h.OK("launch", "busybox", "evil")
	h.OK("exec", "evil", "--", "sh", "-c", "mkdir -p "+hostDir+" && ln -s "+hostDir+" /abs && ln -s ../../../../../../.."+hostDir+" /tmp/rel")
	src := filepath.Join(t.TempDir(), "payload")
	if err := os.WriteFile(src, []byte("payload"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{"evil/abs/pushed-abs", "evil/tmp/rel/pushed-rel", "evil/abs/secret"} {
		h.Vessel("file", "push", src, target)
		checkCanary(t, hostDir, secret)
	}
	// Each landed in the container's copy of the directory.
	out := h.OK("exec", "evil", "--", "sh", "-c", "cat "+hostDir+"/pushed-abs "+hostDir+"/pushed-rel "+hostDir+"/secret")
	if out != "payloadpayloadpayload" {
		t.Errorf("the pushes did not land inside the container: %q", out)
	}
	h.OK("stop", "evil", "--force")
	h.Vessel("file", "push", src, "evil/abs/pushed-stopped")
	checkCanary(t, hostDir, secret)
	h.OK("delete", "evil", "--force")
}
