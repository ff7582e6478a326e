package storage

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/vesselhost/vessel/internal/testutil"
)

// newLoopPool returns a driver for a fresh loop-backed btrfs pool (not yet
// mounted) in a temporary directory. When the test ends the pool is
// unmounted and no loop device may be left bound to its image.
func newLoopPool(t *testing.T) Driver {
	t.Helper()
	dir := t.TempDir()
	cfg := Config{
		Driver:   "btrfs",
		Root:     filepath.Join(dir, "pool"),
		LoopFile: filepath.Join(dir, "pool.img"),
		Size:     testPoolSize,
	}
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Unmount(context.Background()); err != nil {
			t.Errorf("cleanup: Unmount: %v", err)
		}
		checkReleased(t, cfg.LoopFile, cfg.Root)
	})
	return d
}

// newSourcePool returns a driver for a btrfs pool in a directory of a btrfs
// filesystem the test mounted itself.
func newSourcePool(t *testing.T) Driver {
	t.Helper()
	src := filepath.Join(scratchBtrfs(t), "vessel", "pool")
	if err := os.MkdirAll(src, 0o711); err != nil {
		t.Fatal(err)
	}
	d, err := New(Config{Driver: "btrfs", Source: src})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestBtrfsConformance(t *testing.T) {
	testutil.NeedRoot(t)
	runConformance(t, newLoopPool)
}

func TestBtrfsSourceConformance(t *testing.T) {
	testutil.NeedRoot(t)
	runConformance(t, newSourcePool)
}

func mountedLoopPool(t *testing.T) (Driver, *btrfsDriver) {
	t.Helper()
	d := newLoopPool(t)
	if err := d.Mount(t.Context()); err != nil {
		t.Fatal(err)
	}
	return d, d.(*btrfsDriver)
}

func TestBtrfsMountLifecycle(t *testing.T) {
	testutil.NeedRoot(t)
	_, b := mountedLoopPool(t)
	devs, err := findLoops(b.loopFile)
	if err != nil || len(devs) != 1 {
		t.Fatalf("loop devices bound to the image: %v, %v; want one", devs, err)
	}
	name := filepath.Base(devs[0])
	if auto, _ := os.ReadFile(filepath.Join(sysBlock, name, "loop", "autoclear")); strings.TrimSpace(string(auto)) != "1" {
		t.Errorf("%s autoclear = %q, want 1", devs[0], auto)
	}
	// The temp directory is on a filesystem with direct I/O (ext4, xfs,
	// btrfs), so the device bypasses the image file's page cache.
	if dio, _ := os.ReadFile(filepath.Join(sysBlock, name, "loop", "dio")); strings.TrimSpace(string(dio)) != "1" {
		t.Errorf("%s dio = %q, want 1", devs[0], dio)
	}
	if bs, _ := os.ReadFile(filepath.Join(sysBlock, name, "queue", "logical_block_size")); strings.TrimSpace(string(bs)) != "4096" {
		t.Errorf("%s logical block size = %q, want 4096", devs[0], bs)
	}
	m, ours, err := b.rootMount()
	if err != nil || !ours {
		t.Fatalf("root mount %+v ours=%v err=%v", m, ours, err)
	}
	checkPoolFlags(t, b)
	if !strings.Contains(m.VFSOptions, "user_subvol_rm_allowed") || strings.Contains(m.VFSOptions, "compress") {
		t.Errorf("btrfs options %q: want user_subvol_rm_allowed, no compression", m.VFSOptions)
	}

	if err := b.Unmount(t.Context()); err != nil {
		t.Fatal(err)
	}
	if devs, _ := findLoops(b.loopFile); len(devs) != 0 {
		t.Errorf("loop devices still bound after Unmount: %v", devs)
	}
	if m, _ := mountedAt(b.root); m {
		t.Error("root still mounted after Unmount")
	}
	if err := b.checkMounted(); !errors.Is(err, ErrNotMounted) {
		t.Errorf("checkMounted after Unmount: %v, want ErrNotMounted", err)
	}
	if err := b.CreateVolume(t.Context(), ct1); !errors.Is(err, ErrNotMounted) {
		t.Errorf("CreateVolume on unmounted pool: %v, want ErrNotMounted", err)
	}
}

// checkPoolFlags fails the test unless the pool is mounted noatime,
// nosuid, nodev.
func checkPoolFlags(t *testing.T, b *btrfsDriver) {
	t.Helper()
	m, ours, err := b.rootMount()
	if err != nil || !ours {
		t.Fatalf("root mount %+v ours=%v err=%v", m, ours, err)
	}
	for _, opt := range []string{"noatime", "nosuid", "nodev"} {
		if !strings.Contains(","+m.Options+",", ","+opt+",") {
			t.Errorf("mount options %q lack %s", m.Options, opt)
		}
	}
}

// TestBtrfsMountAddsNosuid: a pool an older version mounted without
// nosuid,nodev gets them at the next Mount.
func TestBtrfsMountAddsNosuid(t *testing.T) {
	testutil.NeedRoot(t)
	_, b := mountedLoopPool(t)
	must(t, unix.Mount("", b.root, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_NOATIME, ""))
	if m, _, _ := b.rootMount(); strings.Contains(m.Options, "nosuid") {
		t.Fatalf("remount kept nosuid: %q", m.Options)
	}
	must(t, b.Mount(t.Context()))
	checkPoolFlags(t, b)
}

// TestBtrfsMountReusesBoundLoop: a loop device already bound to the image
// (here without autoclear, as losetup would leave it) is mounted rather than
// a second one attached, and Unmount detaches it.
func TestBtrfsMountReusesBoundLoop(t *testing.T) {
	testutil.NeedRoot(t)
	_, b := mountedLoopPool(t)
	if err := b.Unmount(t.Context()); err != nil {
		t.Fatal(err)
	}
	dev, err := attachLoop(b.loopFile, loopAttachOpts{})
	if err != nil {
		t.Fatal(err)
	}
	dev.Close()
	t.Cleanup(func() { _ = detachLoop(dev.Path) })

	if err := b.Mount(t.Context()); err != nil {
		t.Fatal(err)
	}
	if devs, _ := findLoops(b.loopFile); len(devs) != 1 || devs[0] != dev.Path {
		t.Errorf("loop devices after Mount: %v, want only %s", devs, dev.Path)
	}
	if err := b.Unmount(t.Context()); err != nil {
		t.Fatal(err)
	}
	if devs, _ := findLoops(b.loopFile); len(devs) != 0 {
		t.Errorf("loop devices after Unmount: %v", devs)
	}
}

func TestBtrfsReadOnly(t *testing.T) {
	testutil.NeedRoot(t)
	d, _ := mountedLoopPool(t)
	ctx := t.Context()
	fillImage(t, d, img1)
	if err := d.CloneVolume(ctx, ct1, img1, true); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d.Path(ct1), "new"), nil, 0o644); !errors.Is(err, unix.EROFS) {
		t.Errorf("writing into a read-only clone: got %v, want EROFS", err)
	}
	if err := os.WriteFile(filepath.Join(d.Path(ct1), "etc/hostname"), nil, 0o644); !errors.Is(err, unix.EROFS) {
		t.Errorf("overwriting a file of a read-only clone: got %v, want EROFS", err)
	}
	if err := d.SetReadOnly(ctx, img1, true); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(d.Path(img1), "etc/hostname")); !errors.Is(err, unix.EROFS) {
		t.Errorf("removing from a read-only volume: got %v, want EROFS", err)
	}
	if err := d.SetReadOnly(ctx, ct1, false); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(d.Path(ct1), "new"), []byte("rw again"))
}

// TestBtrfsDeleteNestedReadOnly deletes a read-only container holding
// read-only nested subvolumes, two deep.
func TestBtrfsDeleteNestedReadOnly(t *testing.T) {
	testutil.NeedRoot(t)
	d, b := mountedLoopPool(t)
	ctx := t.Context()
	p := mustCreate(t, d, ct1)
	outer, inner := filepath.Join(p, "outer"), filepath.Join(p, "outer", "dir", "inner")
	for _, s := range []string{outer, inner} {
		if err := os.MkdirAll(filepath.Dir(s), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := b.tool.subvolumeCreate(ctx, s); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(s, "file"), []byte(s))
	}
	for _, s := range []string{inner, outer, p} { // inside out, or setting ro fails
		if err := b.tool.setReadOnly(ctx, s, true, propertySetOpts{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.DeleteVolume(ctx, ct1); err != nil {
		t.Fatalf("DeleteVolume: %v", err)
	}
	if d.VolumeExists(ct1) {
		t.Error("volume exists after DeleteVolume")
	}
}

// TestBtrfsCloneIsSubvolume checks that clones are btrfs snapshots, not
// copies: the clone is a subvolume (no timing: the machine is noisy).
func TestBtrfsCloneIsSubvolume(t *testing.T) {
	testutil.NeedRoot(t)
	d, b := mountedLoopPool(t)
	ctx := t.Context()
	p := mustCreate(t, d, img1)
	for i := range 2000 {
		writeFile(t, filepath.Join(p, fmt.Sprintf("d%02d/f%04d", i%20, i)), []byte(fmt.Sprint(i)))
	}
	ro := Volume{Type: VolumeSnapshot, Name: "c1/base"}
	if err := d.CloneVolume(ctx, ct1, img1, false); err != nil {
		t.Fatal(err)
	}
	if err := d.CloneVolume(ctx, ro, img1, true); err != nil {
		t.Fatal(err)
	}
	for _, vol := range []Volume{ct1, ro} {
		out, err := runTool(ctx, b.tool.btrfsBin, "subvolume", "show", d.Path(vol))
		if err != nil {
			t.Errorf("%v is not a subvolume: %v", vol, err)
			continue
		}
		if wantRO := vol == ro; strings.Contains(string(out), "readonly") != wantRO {
			t.Errorf("%v: subvolume show flags: want readonly=%v in\n%s", vol, wantRO, out)
		}
	}
	if n := len(treeListing(t, d.Path(ct1))); n != 2000+20+1 {
		t.Errorf("clone has %d entries, want 2021", n)
	}
}

// TestBtrfsBlockDevicesOrder: the loop device comes first, then the whole
// disk(s) holding its image.
func TestBtrfsBlockDevicesOrder(t *testing.T) {
	testutil.NeedRoot(t)
	d, b := mountedLoopPool(t)
	devs, err := d.BlockDevices(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	loops, _ := findLoops(b.loopFile)
	if len(loops) != 1 {
		t.Fatalf("loop devices: %v", loops)
	}
	loopDev, err := readDevFile(filepath.Join(sysBlock, filepath.Base(loops[0]), "dev"))
	if err != nil {
		t.Fatal(err)
	}
	under, err := blockDevicesOf(filepath.Dir(b.loopFile))
	if err != nil {
		t.Fatal(err)
	}
	want := append([]string{loopDev}, under...)
	if fmt.Sprint(devs) != fmt.Sprint(want) {
		t.Errorf("BlockDevices = %v, want %v (loop, then the disks of the image's filesystem)", devs, want)
	}
	for _, dev := range under {
		if _, err := os.Stat(filepath.Join(sysDevBlock, dev, "partition")); err == nil {
			t.Errorf("%s is a partition, want whole disks", dev)
		}
	}
}

func TestBtrfsDefaultSizeSparse(t *testing.T) {
	testutil.NeedRoot(t)
	dir := t.TempDir()
	b, err := newBtrfs(Config{Driver: "btrfs", Root: filepath.Join(dir, "pool"), LoopFile: filepath.Join(dir, "img", "pool.img")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Unmount(context.Background()); err != nil {
			t.Error(err)
		}
		checkReleased(t, filepath.Join(dir, "img", "pool.img"), filepath.Join(dir, "pool"))
	})
	if err := b.Mount(t.Context()); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(dir, "img", "pool.img"), &st); err != nil {
		t.Fatal(err)
	}
	if st.Size != defaultPoolSize || st.Blocks*512 > 1<<30 {
		t.Errorf("image size %d allocated %d: want %d, sparse", st.Size, st.Blocks*512, defaultPoolSize)
	}
	if _, err := os.Stat(filepath.Join(dir, "img", "pool.img.new")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("temporary image left behind: %v", err)
	}
}

func TestBtrfsSourceNotOnBtrfs(t *testing.T) {
	d, err := New(Config{Driver: "btrfs", Source: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if onBtrfs(t, os.TempDir()) {
		t.Fatal("the temporary directory is on btrfs: this test needs another filesystem")
	}
	if err := d.Mount(t.Context()); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("Mount with a Source not on btrfs: got %v, want ErrInvalidConfig", err)
	}
}

// TestBtrfsToolsMissing: without btrfs-progs, Mount says the driver is not
// supported, and leaves no image behind.
func TestBtrfsToolsMissing(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{Driver: "btrfs", Root: filepath.Join(dir, "pool"), LoopFile: filepath.Join(dir, "pool.img"), Size: testPoolSize}
	for _, tool := range []btrfsTool{
		{btrfsBin: "/nonexistent/btrfs", mkfsBin: "mkfs.btrfs"},
		{btrfsBin: "btrfs", mkfsBin: "/nonexistent/mkfs.btrfs"},
	} {
		d, err := newBtrfs(cfg)
		if err != nil {
			t.Fatal(err)
		}
		d.(*btrfsDriver).tool = tool
		if err := d.Mount(t.Context()); !errors.Is(err, ErrNotSupported) {
			t.Errorf("Mount with %+v: got %v, want ErrNotSupported", tool, err)
		}
		if _, err := os.Stat(cfg.LoopFile); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("image created although Mount failed: %v", err)
		}
	}
}

func TestBtrfsCommandErrorsCarryStderr(t *testing.T) {
	testutil.NeedRoot(t)
	d, _ := mountedLoopPool(t)
	// A plain directory is not a subvolume: snapshotting it must fail with
	// the tool's own explanation in the error.
	if err := os.Mkdir(filepath.Join(filepath.Dir(d.Path(img1)), "plain"), 0o755); err != nil {
		t.Fatal(err)
	}
	plain := Volume{Type: VolumeImage, Name: "plain"}
	err := d.SetReadOnly(t.Context(), plain, true)
	if err == nil || !strings.Contains(err.Error(), "btrfs property set") || !strings.Contains(err.Error(), "ERROR") {
		t.Errorf("read-only of a plain directory: got %v, want the command and its stderr", err)
	}
	// Clones use the ioctl: the error names it and says why.
	err = d.CloneVolume(t.Context(), ct1, plain, false)
	if err == nil || !strings.Contains(err.Error(), "BTRFS_IOC_SNAP_CREATE_V2") || !strings.Contains(err.Error(), "not a btrfs subvolume") {
		t.Errorf("clone of a plain directory: got %v, want the ioctl and the reason", err)
	}
	if d.VolumeExists(ct1) {
		t.Error("failed clone left its volume")
	}
}
