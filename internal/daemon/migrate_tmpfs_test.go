package daemon

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/vesselhost/vessel/internal/testutil"
)

// RUN/migrate gets a tmpfs of vessel's own when RUN is on a disk, reused
// by the next start, and unmounted at release; kept files are copied out
// of it.
func TestMigrationTmpfs(t *testing.T) {
	testutil.NeedRoot(t)
	// Not t.TempDir(): /tmp may be a tmpfs; the pool's dir is on a disk
	// wherever these tests run (the working directory's file system).
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	base, err := os.MkdirTemp(wd, ".migrate-tmpfs-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = unix.Unmount(filepath.Join(base, "run", "migrate"), unix.MNT_DETACH)
		os.RemoveAll(base)
	})
	var st unix.Statfs_t
	if err := unix.Statfs(base, &st); err != nil {
		t.Fatal(err)
	}
	if st.Type == unix.TMPFS_MAGIC {
		t.Skip("the working directory is on a tmpfs: nothing to mount")
	}
	c := &Config{RunDir: filepath.Join(base, "run")}
	dir := c.migrationsRoot()
	if err := os.MkdirAll(filepath.Join(dir, "old"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := c.mountMigrationTmpfs(); err != nil {
		t.Fatal(err)
	}
	if err := unix.Statfs(dir, &st); err != nil || st.Type != unix.TMPFS_MAGIC {
		t.Fatalf("RUN/migrate is not a tmpfs (type %#x, %v)", st.Type, err)
	}
	if !c.ownsMigrationTmpfs() {
		t.Fatal("the tmpfs is not recognised as vessel's")
	}
	// A second start reuses it.
	if err := c.mountMigrationTmpfs(); err != nil {
		t.Fatal(err)
	}
	// Kept files leave the tmpfs by copy (a rename gives EXDEV).
	move := filepath.Join(dir, "c1")
	if err := os.MkdirAll(filepath.Join(move, "images", "pre-0"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(move, "images", "inventory.img"), []byte("inv"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../pre-0", filepath.Join(move, "images", "parent")); err != nil {
		t.Fatal(err)
	}
	kept := filepath.Join(base, "kept")
	if err := keepMigrationFiles(move, kept); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(kept, "images", "inventory.img")); err != nil || string(b) != "inv" {
		t.Fatalf("kept image: %q, %v", b, err)
	}
	if l, err := os.Readlink(filepath.Join(kept, "images", "parent")); err != nil || l != "../pre-0" {
		t.Fatalf("kept link: %q, %v", l, err)
	}
	if err := c.unmountMigrationTmpfs(); err != nil {
		t.Fatal(err)
	}
	if c.ownsMigrationTmpfs() {
		t.Fatal("still mounted after unmount")
	}
	// The mount hid the old directory; it was emptied first.
	if _, err := os.Stat(filepath.Join(dir, "old")); !os.IsNotExist(err) {
		t.Fatalf("the old contents stayed: %v", err)
	}
}
