package image

import (
	"archive/tar"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vesselhost/vessel/internal/testutil"
)

// testBusybox is the static busybox the tests build images from (setup.sh
// installs busybox-static).
const testBusybox = "/bin/busybox"

// requireRoot marks tests that need root: unpacking images keeps owners
// and device nodes, and chroot needs CAP_SYS_CHROOT.
func requireRoot(t *testing.T) {
	t.Helper()
	testutil.NeedRoot(t)
}

// newTestStore returns a store in a fresh temporary directory.
func newTestStore(t *testing.T) *Store {
	t.Helper()
	s, err := NewStore(filepath.Join(t.TempDir(), "images"), 0)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// buildBusybox builds the built-in image into s.
func buildBusybox(t *testing.T, s *Store) Metadata {
	t.Helper()
	md, err := s.BuildBusybox(context.Background(), testBusybox)
	if err != nil {
		t.Fatalf("BuildBusybox: %v", err)
	}
	return md
}

// unpack extracts the image fp of s into a fresh directory and returns it.
func unpack(t *testing.T, s *Store, fp string) string {
	t.Helper()
	dst := t.TempDir()
	if err := Unpack(context.Background(), s.Path(fp), dst); err != nil {
		t.Fatalf("Unpack: %v", err)
	}
	return dst
}

// runIn runs argv chrooted into rootfs and returns its combined output.
func runIn(t *testing.T, rootfs string, argv ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "chroot", append([]string{rootfs}, argv...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("chroot %s %s: %v\n%s", rootfs, strings.Join(argv, " "), err, out)
	}
	return string(out)
}

// assertNoTempFiles fails if the store holds anything but <fp>.tar files.
func assertNoTempFiles(t *testing.T, s *Store) {
	t.Helper()
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), tmpPrefix) {
			t.Errorf("temporary entry left in store: %s", e.Name())
		}
	}
}

// tarMember is one member of an archive made by makeTar.
type tarMember struct {
	name string
	typ  byte
	link string
	data string
	mode int64
}

// makeTar builds a tar archive in memory.
func makeTar(t *testing.T, members ...tarMember) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, m := range members {
		typ := m.typ
		if typ == 0 {
			typ = tar.TypeReg
		}
		mode := m.mode
		if mode == 0 {
			mode = 0o644
			if typ == tar.TypeDir {
				mode = 0o755
			}
		}
		hdr := &tar.Header{Name: m.name, Typeflag: typ, Linkname: m.link, Mode: mode, Size: int64(len(m.data))}
		if typ != tar.TypeReg {
			hdr.Size = 0
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if hdr.Size > 0 {
			if _, err := tw.Write([]byte(m.data)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
