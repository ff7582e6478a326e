package image

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestBuildBusyboxIsDeterministic(t *testing.T) {
	s := newTestStore(t)
	first := buildBusybox(t, s)
	if err := s.Delete(first.Fingerprint); err != nil {
		t.Fatal(err)
	}
	second := buildBusybox(t, newTestStore(t))
	if first.Fingerprint != second.Fingerprint {
		t.Fatalf("fingerprints differ: %s then %s", first.Fingerprint, second.Fingerprint)
	}
	// Building again into a store that has the image keeps the file.
	third := buildBusybox(t, s)
	if third.Fingerprint != first.Fingerprint || !s.Has(third.Fingerprint) {
		t.Fatalf("rebuild: fingerprint %s, stored %v", third.Fingerprint, s.Has(third.Fingerprint))
	}
	assertNoTempFiles(t, s)
}

func TestBuildBusyboxMetadata(t *testing.T) {
	s := newTestStore(t)
	md := buildBusybox(t, s)
	version, err := BusyboxVersion(context.Background(), testBusybox)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(s.Path(md.Fingerprint))
	if err != nil {
		t.Fatal(err)
	}
	want := OSRelease{ID: "busybox", Name: "BusyBox", VersionID: version,
		PrettyName: "BusyBox " + version + " (vessel built-in)"}
	switch {
	case len(md.Fingerprint) != 64 || !validFingerprint(md.Fingerprint):
		t.Errorf("fingerprint %q", md.Fingerprint)
	case md.Size != fi.Size():
		t.Errorf("size %d, file has %d", md.Size, fi.Size())
	case md.Source != SourceBuiltin:
		t.Errorf("source %q", md.Source)
	case md.OS != want:
		t.Errorf("os %+v, want %+v", md.OS, want)
	case !slices.Equal(md.Init, []string{"/sbin/init"}):
		t.Errorf("init %q", md.Init)
	case !slices.Equal(md.Env, []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "TERM=xterm"}):
		t.Errorf("env %q", md.Env)
	case md.StopSignal != "SIGUSR2" || md.Cwd != "/" || md.Architecture == "" || md.Version != MetadataVersion:
		t.Errorf("metadata %+v", md)
	}
}

func TestBuildBusyboxUnpacksAndRuns(t *testing.T) {
	requireRoot(t)
	s := newTestStore(t)
	md := buildBusybox(t, s)
	rootfs := unpack(t, s, md.Fingerprint)

	rel, err := ReadOSRelease(rootfs)
	if err != nil {
		t.Fatal(err)
	}
	if rel != md.OS {
		t.Errorf("unpacked os-release %+v, metadata %+v", rel, md.OS)
	}
	if target, err := os.Readlink(filepath.Join(rootfs, "sbin/init")); err != nil || target != "/bin/busybox" {
		t.Errorf("/sbin/init -> %q, %v", target, err)
	}
	for path, want := range map[string]os.FileMode{
		"tmp":  os.ModeDir | os.ModeSticky | 0o777,
		"root": os.ModeDir | 0o700,
		".":    os.ModeDir | 0o755,
	} {
		fi, err := os.Lstat(filepath.Join(rootfs, path))
		if err != nil || fi.Mode() != want {
			t.Errorf("/%s: mode %v, %v; want %v", path, fi.Mode(), err, want)
		}
	}
	inittab, err := os.ReadFile(filepath.Join(rootfs, "etc/inittab"))
	if err != nil || strings.Contains(string(inittab), ":respawn:") || strings.Contains(string(inittab), ":askfirst:") {
		t.Errorf("inittab: %v\n%s", err, inittab)
	}
	if out := runIn(t, rootfs, "/bin/sh", "-c", "echo ok"); out != "ok\n" {
		t.Errorf("chroot sh: %q", out)
	}
	// The boot script parses in busybox's shell.
	runIn(t, rootfs, "/bin/sh", "-n", "/etc/init.d/rcS")
}

func TestBusyboxVersion(t *testing.T) {
	v, err := BusyboxVersion(context.Background(), testBusybox)
	if err != nil {
		t.Fatal(err)
	}
	if v == "" || !strings.Contains(v, ".") || v[0] < '0' || v[0] > '9' {
		t.Fatalf("version %q", v)
	}
	if _, err := BusyboxVersion(context.Background(), "/bin/true"); err == nil {
		t.Fatal("/bin/true has a busybox version")
	}
}
