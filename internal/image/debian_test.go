package image

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// TestBuildDebian runs debootstrap against deb.debian.org: minutes of work
// and network access, so only when VESSEL_TEST_DEBIAN=1.
func TestBuildDebian(t *testing.T) {
	if os.Getenv("VESSEL_TEST_DEBIAN") != "1" {
		t.Skip("set VESSEL_TEST_DEBIAN=1 to build a Debian image with debootstrap (root, deb.debian.org, minutes)")
	}
	requireRoot(t)
	s := newTestStore(t)
	var lines atomic.Int64
	md, err := s.BuildDebian(context.Background(), DebianOptions{
		Progress: func(string) { lines.Add(1) },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("debian image %.12s: %d MB", md.Fingerprint, md.Size>>20)
	if lines.Load() == 0 {
		t.Error("no progress reported")
	}
	if md.Source != SourceDebootstrap || md.OS.ID != "debian" || md.OS.VersionID != "12" ||
		md.StopSignal != "SIGPWR" || !slices.Equal(md.Init, []string{"/sbin/init"}) {
		t.Errorf("metadata %+v", md)
	}
	assertNoTempFiles(t, s)
	if mounts, err := mountinfo.GetMounts(mountinfo.PrefixFilter(s.dir)); err != nil || len(mounts) > 0 {
		t.Errorf("mounts left under the store: %v %v", mounts, err)
	}

	rootfs := unpack(t, s, md.Fingerprint)
	out := runIn(t, rootfs, "/bin/sh", "-c", "cat /etc/debian_version && command -v ip ping ps")
	if !strings.HasPrefix(out, "12.") {
		t.Errorf("in the image: %q", out)
	}
	shadow, err := os.ReadFile(filepath.Join(rootfs, "etc/shadow"))
	if err != nil || !strings.HasPrefix(string(shadow), "root:*:") {
		t.Errorf("root password not locked: %v", err)
	}
	inittab, err := os.ReadFile(filepath.Join(rootfs, "etc/inittab"))
	if err != nil || strings.Contains(string(inittab), ":respawn:") {
		t.Errorf("inittab: %v\n%s", err, inittab)
	}
	// ping's file capability lives in an extended attribute.
	if _, err := unix.Lgetxattr(filepath.Join(rootfs, "usr/bin/ping"), "security.capability", nil); err != nil {
		t.Errorf("ping lost its security.capability: %v", err)
	}

	// sysvinit boots, reaches runlevel 2 (rc.local runs) and halts on the
	// stop signal. The deadline only guards against a hang.
	rcLocal := "#!/bin/sh\necho up > /run/vessel-test-up\nexit 0\n"
	if err := os.WriteFile(filepath.Join(rootfs, "etc/rc.local"), []byte(rcLocal), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	pid1 := bootInit(ctx, t, rootfs)
	waitUntil(ctx, t, "runlevel 2", func() bool {
		_, err := os.Stat(filepath.Join("/proc", strconv.Itoa(pid1.pid), "root/run/vessel-test-up"))
		return err == nil
	})
	pid1.stop(t, md.StopSignal)
}
