package storage

import (
	"maps"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/vesselhost/vessel/internal/testutil"
)

// newDirPool returns a dir driver for a fresh pool in a temporary directory.
func newDirPool(t *testing.T) Driver {
	t.Helper()
	d, err := New(Config{Driver: "dir", Root: filepath.Join(t.TempDir(), "pool")})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestDirConformance(t *testing.T) {
	testutil.NeedRoot(t)
	runConformance(t, newDirPool)
}

// TestDirOnBtrfsConformance runs the dir driver on btrfs, where volumes may
// hold nested subvolumes and clones share extents (reflinks).
func TestDirOnBtrfsConformance(t *testing.T) {
	testutil.NeedRoot(t)
	runConformance(t, func(t *testing.T) Driver {
		d, err := New(Config{Driver: "dir", Root: filepath.Join(scratchBtrfs(t), "pool")})
		if err != nil {
			t.Fatal(err)
		}
		return d
	})
}

func TestDirInfo(t *testing.T) {
	if got := newDirPool(t).Info(); got != (Info{Name: "dir", TransferFormat: "tar-sync/1"}) {
		t.Errorf("Info = %+v", got)
	}
}

// TestDirClonePreservesMetadata: a dir clone keeps ownership, xattrs,
// device nodes, fifos, hard links and timestamps.
func TestDirClonePreservesMetadata(t *testing.T) {
	testutil.NeedRoot(t)
	d := newDirPool(t)
	if err := d.Mount(t.Context()); err != nil {
		t.Fatal(err)
	}
	p := fillImage(t, d, img1)
	file := filepath.Join(p, "etc/hostname")
	if err := os.Lchown(file, 100000, 100007); err != nil {
		t.Fatal(err)
	}
	if err := unix.Lsetxattr(file, "user.vessel", []byte("kept"), 0); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mknod(filepath.Join(p, "null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(p, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := unix.Lutimes(file, []unix.Timeval{{Sec: 1e9}, {Sec: 1e9}}); err != nil {
		t.Fatal(err)
	}

	if err := d.CloneVolume(t.Context(), ct1, img1, false); err != nil {
		t.Fatal(err)
	}
	q := d.Path(ct1)
	if want, got := treeListing(t, p), treeListing(t, q); !maps.Equal(want, got) {
		t.Errorf("clone differs:\nsource %v\nclone  %v", want, got)
	}
	buf := make([]byte, 16)
	if n, err := unix.Lgetxattr(filepath.Join(q, "etc/hostname"), "user.vessel", buf); err != nil || string(buf[:n]) != "kept" {
		t.Errorf("xattr in clone: %q, %v", buf[:n], err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(q, "etc/hostname"), &st); err != nil || st.Mtim.Sec != 1e9 {
		t.Errorf("mtime in clone: %d, %v", st.Mtim.Sec, err)
	}
	if entries, _ := os.ReadDir(filepath.Join(d.(*dirDriver).root, stagingDir)); len(entries) != 0 {
		t.Errorf("staging directory not empty after clone: %v", entries)
	}
}
