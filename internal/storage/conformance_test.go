package storage

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

// runConformance checks the behaviour every Driver must have. newDriver
// returns a driver for a fresh, unmounted pool and registers its cleanup
// (unmount, loop devices) with t. Each subtest gets its own pool; the
// transfer subtests (conformance_transfer_test.go) two, source and target.
//
// Read-only enforcement is not checked here: the dir driver does not
// enforce it (see the btrfs tests).
func runConformance(t *testing.T, newDriver func(t *testing.T) Driver) {
	mounted := func(t *testing.T) Driver {
		t.Helper()
		d := newDriver(t)
		if err := d.Mount(t.Context()); err != nil {
			t.Fatalf("Mount: %v", err)
		}
		return d
	}
	tests := []struct {
		name string
		run  func(t *testing.T, d Driver)
	}{
		{"MountIdempotent", testMountIdempotent},
		{"CreateVolume", testCreateVolume},
		{"CloneVolume", testCloneVolume},
		{"CloneErrors", testCloneErrors},
		{"Snapshots", testSnapshots},
		{"CopySnapshots", testCopySnapshots},
		{"CheckpointVolumes", testCheckpointVolumes},
		{"SetReadOnly", testSetReadOnly},
		{"DeleteVolume", testDeleteVolume},
		{"DeleteNested", testDeleteNested},
		{"BadNames", testBadNames},
		{"Usage", testUsage},
		{"RemountKeepsVolumes", testRemountKeepsVolumes},
		{"BlockDevices", testBlockDevices},
		{"ListVolumes", testListVolumes},
		{"PoolPrivate", testPoolPrivate},
		{"VMDiskClone", testVMDiskClone},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.run(t, mounted(t)) })
	}
	for _, tt := range transferTests {
		t.Run(tt.name, func(t *testing.T) { tt.run(t, mounted(t), mounted(t)) })
	}
}

var (
	img1 = Volume{Type: VolumeImage, Name: "img1"}
	ct1  = Volume{Type: VolumeContainer, Name: "c1"}
	ct2  = Volume{Type: VolumeContainer, Name: "c2"}
	snap = Volume{Type: VolumeSnapshot, Name: "c1/s1"}
)

func mustCreate(t *testing.T, d Driver, vol Volume) string {
	t.Helper()
	if err := d.CreateVolume(t.Context(), vol); err != nil {
		t.Fatalf("CreateVolume(%v): %v", vol, err)
	}
	return d.Path(vol)
}

// fillImage creates vol with a small tree of every common kind of entry.
func fillImage(t *testing.T, d Driver, vol Volume) string {
	t.Helper()
	p := mustCreate(t, d, vol)
	writeFile(t, filepath.Join(p, "etc/hostname"), []byte("vessel\n"))
	writeFile(t, filepath.Join(p, "bin/tool"), bytes.Repeat([]byte{0x7f}, 70000))
	// os.ModeSetuid: os.Chmod(p, 0o4755) would drop the setuid bit.
	if err := os.Chmod(filepath.Join(p, "bin/tool"), os.ModeSetuid|0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(p, "bin/tool"), filepath.Join(p, "bin/tool-link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../etc/hostname", filepath.Join(p, "bin/name")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(p, "empty"), 0o700); err != nil {
		t.Fatal(err)
	}
	return p
}

func testMountIdempotent(t *testing.T, d Driver) {
	for range 2 {
		if err := d.Mount(t.Context()); err != nil {
			t.Fatalf("second Mount: %v", err)
		}
	}
	for _, vol := range []Volume{img1, ct1} {
		if fi, err := os.Stat(filepath.Dir(d.Path(vol))); err != nil || !fi.IsDir() {
			t.Errorf("directory of %v missing after Mount: %v", vol, err)
		}
	}
}

func testCreateVolume(t *testing.T, d Driver) {
	if d.VolumeExists(ct1) {
		t.Fatal("volume exists before CreateVolume")
	}
	p := mustCreate(t, d, ct1)
	if !d.VolumeExists(ct1) {
		t.Error("VolumeExists false after CreateVolume")
	}
	fi, err := os.Stat(p)
	if err != nil || !fi.IsDir() {
		t.Fatalf("Path(%v) = %s: not a directory: %v", ct1, p, err)
	}
	if fi.Mode().Perm() != volumeMode {
		t.Errorf("new volume mode %v, want %o", fi.Mode().Perm(), volumeMode)
	}
	if entries, _ := os.ReadDir(p); len(entries) != 0 {
		t.Errorf("new volume not empty: %v", entries)
	}
	writeFile(t, filepath.Join(p, "hello"), []byte("hi"))
	if err := d.CreateVolume(t.Context(), ct1); !errors.Is(err, ErrVolumeExists) {
		t.Errorf("CreateVolume twice: got %v, want ErrVolumeExists", err)
	}
	if d.VolumeExists(ct2) || d.VolumeExists(Volume{Type: VolumeImage, Name: "c1"}) {
		t.Error("VolumeExists true for volumes never created")
	}
}

func testCloneVolume(t *testing.T, d Driver) {
	src := fillImage(t, d, img1)
	if err := d.CloneVolume(t.Context(), ct1, img1, false); err != nil {
		t.Fatalf("CloneVolume: %v", err)
	}
	dst := d.Path(ct1)
	want, got := treeListing(t, src), treeListing(t, dst)
	if !maps.Equal(want, got) {
		t.Errorf("clone differs from source:\nsource %v\nclone  %v", want, got)
	}
	// The clone is independent of its source.
	writeFile(t, filepath.Join(dst, "etc/hostname"), []byte("changed\n"))
	if b, _ := os.ReadFile(filepath.Join(src, "etc/hostname")); string(b) != "vessel\n" {
		t.Errorf("writing the clone changed the source: %q", b)
	}
	// A clone of a clone.
	if err := d.CloneVolume(t.Context(), ct2, ct1, false); err != nil {
		t.Fatalf("CloneVolume of a clone: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(d.Path(ct2), "etc/hostname")); string(b) != "changed\n" {
		t.Errorf("clone of clone has %q", b)
	}
}

func testCloneErrors(t *testing.T, d Driver) {
	mustCreate(t, d, img1)
	mustCreate(t, d, ct1)
	if err := d.CloneVolume(t.Context(), ct1, img1, false); !errors.Is(err, ErrVolumeExists) {
		t.Errorf("clone onto existing volume: got %v, want ErrVolumeExists", err)
	}
	missing := Volume{Type: VolumeImage, Name: "missing"}
	if err := d.CloneVolume(t.Context(), ct2, missing, false); !errors.Is(err, ErrVolumeNotFound) {
		t.Errorf("clone from missing volume: got %v, want ErrVolumeNotFound", err)
	}
	if d.VolumeExists(ct2) {
		t.Error("failed clone left its destination behind")
	}
}

func testSnapshots(t *testing.T, d Driver) {
	p := mustCreate(t, d, ct1)
	writeFile(t, filepath.Join(p, "data"), []byte("v1"))
	s2 := Volume{Type: VolumeSnapshot, Name: "c1/s2"}
	for _, s := range []Volume{snap, s2} {
		if err := d.CloneVolume(t.Context(), s, ct1, true); err != nil {
			t.Fatalf("snapshot %v: %v", s, err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(d.Path(snap), "data")); err != nil || string(b) != "v1" {
		t.Errorf("snapshot content %q, %v", b, err)
	}
	if !d.VolumeExists(snap) || !d.VolumeExists(s2) {
		t.Fatal("snapshots do not exist")
	}
	if filepath.Base(filepath.Dir(d.Path(snap))) != "c1" {
		t.Errorf("snapshot path %s is not under a directory of its container", d.Path(snap))
	}
	// Restore: a new container from a snapshot is writable.
	if err := d.CloneVolume(t.Context(), ct2, snap, false); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(d.Path(ct2), "data"), []byte("v2"))

	snapDir := filepath.Dir(d.Path(snap))
	if err := d.DeleteVolume(t.Context(), snap); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(snapDir); err != nil {
		t.Errorf("container's snapshot directory gone while a snapshot remains: %v", err)
	}
	if err := d.DeleteVolume(t.Context(), s2); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(snapDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("container's snapshot directory left after its last snapshot: %v", err)
	}
	if !d.VolumeExists(ct1) {
		t.Error("deleting snapshots deleted their container")
	}
}

// testCopySnapshots: what a local copy of an instance does with its
// snapshots (daemon's copySnapshots): a snapshot cloned read-only from a
// snapshot, a checkpoint cloned from a checkpoint. Sparse files stay
// sparse, and the clones outlive their sources.
func testCopySnapshots(t *testing.T, d Driver) {
	p := mustCreate(t, d, ct1)
	writeFile(t, filepath.Join(p, "data"), []byte("v1"))
	f, err := os.Create(filepath.Join(p, "sparse"))
	if err == nil {
		err = f.Truncate(512 << 20)
	}
	if err == nil {
		_, err = f.WriteAt([]byte("end"), 512<<20)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := d.CloneVolume(t.Context(), snap, ct1, true); err != nil {
		t.Fatal(err)
	}
	ck := Volume{Type: VolumeCheckpoint, Name: "c1/s1"}
	writeFile(t, filepath.Join(mustCreate(t, d, ck), "pages-1.img"), []byte("pages"))

	snap2 := Volume{Type: VolumeSnapshot, Name: "c2/s1"}
	ck2 := Volume{Type: VolumeCheckpoint, Name: "c2/s1"}
	if err := d.CloneVolume(t.Context(), snap2, snap, true); err != nil {
		t.Fatalf("clone a snapshot of a snapshot: %v", err)
	}
	if err := d.CloneVolume(t.Context(), ck2, ck, false); err != nil {
		t.Fatalf("clone a checkpoint: %v", err)
	}
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(d.Path(snap2), "sparse"), &st); err != nil {
		t.Fatal(err)
	}
	if st.Size != 512<<20+3 || st.Blocks*512 > 1<<20 {
		t.Errorf("the copy's sparse file: %d bytes, %d allocated", st.Size, st.Blocks*512)
	}
	for _, v := range []Volume{ck, snap, ct1} {
		if err := d.DeleteVolume(t.Context(), v); err != nil {
			t.Fatal(err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(d.Path(snap2), "data")); err != nil || string(b) != "v1" {
		t.Errorf("the copy's snapshot after its source went: %q, %v", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(d.Path(ck2), "pages-1.img")); err != nil || string(b) != "pages" {
		t.Errorf("the copy's checkpoint after its source went: %q, %v", b, err)
	}
	// The copy's snapshot restores (a writable clone).
	if err := d.CloneVolume(t.Context(), ct2, snap2, false); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(d.Path(ct2), "data"), []byte("v2"))
}

// testCheckpointVolumes: a checkpoint volume is a writable CONTAINER/SNAP
// volume of its own, independent of the snapshot of the same name.
func testCheckpointVolumes(t *testing.T, d Driver) {
	mustCreate(t, d, ct1)
	if err := d.CloneVolume(t.Context(), snap, ct1, true); err != nil {
		t.Fatal(err)
	}
	ck := Volume{Type: VolumeCheckpoint, Name: "c1/s1"}
	p := mustCreate(t, d, ck)
	writeFile(t, filepath.Join(p, "pages-1.img"), []byte("pages"))
	if p == d.Path(snap) || filepath.Base(filepath.Dir(p)) != "c1" {
		t.Errorf("checkpoint path %s (snapshot %s)", p, d.Path(snap))
	}
	if err := d.CreateVolume(t.Context(), ck); !errors.Is(err, ErrVolumeExists) {
		t.Errorf("second create: %v", err)
	}
	for _, bad := range []string{"c1", "c1/s1/x", "../s1"} {
		if err := d.CreateVolume(t.Context(), Volume{Type: VolumeCheckpoint, Name: bad}); !errors.Is(err, ErrInvalidVolume) {
			t.Errorf("checkpoint %q: %v", bad, err)
		}
	}
	if err := d.DeleteVolume(t.Context(), ck); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Dir(p)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("checkpoint directory of c1 left after its last checkpoint: %v", err)
	}
	if !d.VolumeExists(snap) {
		t.Error("deleting a checkpoint deleted the snapshot")
	}
}

func testSetReadOnly(t *testing.T, d Driver) {
	if err := d.SetReadOnly(t.Context(), ct1, true); !errors.Is(err, ErrVolumeNotFound) {
		t.Errorf("SetReadOnly on missing volume: got %v, want ErrVolumeNotFound", err)
	}
	p := mustCreate(t, d, ct1)
	if err := d.SetReadOnly(t.Context(), ct1, true); err != nil {
		t.Fatal(err)
	}
	if err := d.SetReadOnly(t.Context(), ct1, false); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(p, "writable-again"), []byte("x"))

	if err := d.CloneVolume(t.Context(), ct2, ct1, true); err != nil {
		t.Fatal(err)
	}
	if err := d.SetReadOnly(t.Context(), ct2, false); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(d.Path(ct2), "writable"), []byte("x"))
}

func testDeleteVolume(t *testing.T, d Driver) {
	if err := d.DeleteVolume(t.Context(), ct1); err != nil {
		t.Errorf("deleting a missing volume: %v", err)
	}
	fillImage(t, d, img1)
	if err := d.CloneVolume(t.Context(), ct1, img1, true); err != nil {
		t.Fatal(err)
	}
	if err := d.SetReadOnly(t.Context(), img1, true); err != nil {
		t.Fatal(err)
	}
	for _, vol := range []Volume{ct1, img1} { // both read-only
		if err := d.DeleteVolume(t.Context(), vol); err != nil {
			t.Fatalf("DeleteVolume(%v): %v", vol, err)
		}
		if d.VolumeExists(vol) {
			t.Errorf("%v exists after DeleteVolume", vol)
		}
		if _, err := os.Lstat(d.Path(vol)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%v path left after DeleteVolume: %v", vol, err)
		}
	}
	// The name is free again.
	mustCreate(t, d, ct1)
}

// testDeleteNested deletes a container in which the container made nested
// directories or, on btrfs, nested subvolumes (as systemd or a nested
// container manager would).
func testDeleteNested(t *testing.T, d Driver) {
	p := mustCreate(t, d, ct1)
	nested := []string{"var/lib/machines", "var/lib/machines/inner", "var/lib/machines/inner/deeper"}
	if err := os.MkdirAll(filepath.Join(p, "var/lib"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range nested {
		path := filepath.Join(p, n)
		if onBtrfs(t, p) {
			if err := newBtrfsTool().subvolumeCreate(t.Context(), path); err != nil {
				t.Fatal(err)
			}
		} else if err := os.Mkdir(path, 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(path, "file"), []byte(n))
	}
	if err := d.DeleteVolume(t.Context(), ct1); err != nil {
		t.Fatalf("DeleteVolume with nested trees: %v", err)
	}
	if d.VolumeExists(ct1) {
		t.Error("volume exists after DeleteVolume")
	}
}

func testBadNames(t *testing.T, d Driver) {
	mustCreate(t, d, ct1)
	bad := []Volume{
		{Type: VolumeContainer, Name: ""},
		{Type: VolumeContainer, Name: "."},
		{Type: VolumeContainer, Name: ".."},
		{Type: VolumeContainer, Name: "a/b"},
		{Type: VolumeContainer, Name: "/abs"},
		{Type: VolumeImage, Name: "../containers/c1"},
		{Type: VolumeSnapshot, Name: "c1"},
		{Type: VolumeSnapshot, Name: "c1/"},
		{Type: VolumeSnapshot, Name: "/s1"},
		{Type: VolumeSnapshot, Name: "c1/s1/x"},
		{Type: VolumeSnapshot, Name: "../s1"},
		{Type: VolumeSnapshot, Name: "c1/.."},
		{Type: "volume", Name: "c1"},
		{Type: "", Name: "c1"},
	}
	ctx := t.Context()
	for _, vol := range bad {
		if p := d.Path(vol); p != "" {
			t.Errorf("Path(%v) = %q, want \"\"", vol, p)
		}
		if d.VolumeExists(vol) {
			t.Errorf("VolumeExists(%v) = true", vol)
		}
		errs := map[string]error{
			"CreateVolume":    d.CreateVolume(ctx, vol),
			"CloneVolume dst": d.CloneVolume(ctx, vol, ct1, false),
			"CloneVolume src": d.CloneVolume(ctx, ct2, vol, false),
			"SetReadOnly":     d.SetReadOnly(ctx, vol, true),
			"DeleteVolume":    d.DeleteVolume(ctx, vol),
		}
		_, errs["VolumeUsage"] = d.VolumeUsage(ctx, vol)
		for _, op := range slices.Sorted(maps.Keys(errs)) {
			if !errors.Is(errs[op], ErrInvalidVolume) {
				t.Errorf("%s(%v): got %v, want ErrInvalidVolume", op, vol, errs[op])
			}
		}
	}
	if !d.VolumeExists(ct1) {
		t.Error("a bad name reached an existing volume")
	}
}

func testUsage(t *testing.T, d Driver) {
	if _, err := d.VolumeUsage(t.Context(), ct1); !errors.Is(err, ErrVolumeNotFound) {
		t.Errorf("VolumeUsage of missing volume: got %v, want ErrVolumeNotFound", err)
	}
	p := mustCreate(t, d, ct1)
	const size = 1 << 20
	data := make([]byte, size)
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(p, "big"), data)
	if err := os.Link(filepath.Join(p, "big"), filepath.Join(p, "big-link")); err != nil {
		t.Fatal(err)
	}
	used, err := d.VolumeUsage(t.Context(), ct1)
	if err != nil {
		t.Fatal(err)
	}
	if used < size || used >= 2*size {
		t.Errorf("VolumeUsage = %d, want a 1 MiB file counted once (%d <= used < %d)", used, size, 2*size)
	}

	u, err := d.PoolUsage(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if u.Total == 0 || u.Used == 0 || u.Free == 0 || u.Used > u.Total || u.Free > u.Total {
		t.Errorf("PoolUsage = %+v, want 0 < Used, Free <= Total", u)
	}
}

func testRemountKeepsVolumes(t *testing.T, d Driver) {
	p := mustCreate(t, d, ct1)
	writeFile(t, filepath.Join(p, "keep"), []byte("kept"))
	if err := d.CloneVolume(t.Context(), snap, ct1, true); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := d.Unmount(t.Context()); err != nil {
			t.Fatalf("Unmount: %v", err)
		}
	}
	if err := d.Mount(t.Context()); err != nil {
		t.Fatalf("Mount after Unmount: %v", err)
	}
	for _, vol := range []Volume{ct1, snap} {
		if b, err := os.ReadFile(filepath.Join(d.Path(vol), "keep")); err != nil || string(b) != "kept" {
			t.Errorf("%v after remount: %q, %v", vol, b, err)
		}
	}
	mustCreate(t, d, ct2)
}

var majMin = regexp.MustCompile(`^\d+:\d+$`)

func testBlockDevices(t *testing.T, d Driver) {
	devs, err := d.BlockDevices(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	// A dir pool in the temporary directory is on tmpfs where /tmp is one
	// (Debian 13's default): no block device is behind it.
	var sfs unix.Statfs_t
	if err := unix.Statfs(mustCreate(t, d, ct1), &sfs); err != nil {
		t.Fatal(err)
	}
	if sfs.Type == unix.TMPFS_MAGIC {
		if len(devs) != 0 {
			t.Errorf("pool on tmpfs: BlockDevices = %v, want none", devs)
		}
		return
	}
	if len(devs) == 0 {
		t.Fatal("BlockDevices returned none")
	}
	for _, dev := range devs {
		if !majMin.MatchString(dev) {
			t.Errorf("block device %q is not MAJ:MIN", dev)
			continue
		}
		if _, err := os.Stat(filepath.Join(sysDevBlock, dev)); err != nil {
			t.Errorf("block device %s: %v", dev, err)
		}
	}
	if len(slices.Compact(slices.Sorted(slices.Values(devs)))) != len(devs) {
		t.Errorf("BlockDevices has duplicates: %v", devs)
	}
}

// testListVolumes: every volume of a type is listed, sorted, and nothing
// else (other types, transfer leftovers).
func testListVolumes(t *testing.T, d Driver) {
	ctx := t.Context()
	for _, vol := range []Volume{
		img1, ct2, ct1, snap, {Type: VolumeSnapshot, Name: "c2/s1"}, {Type: VolumeCheckpoint, Name: "c1/s1"},
		{Type: VolumeVMImage, Name: "img1"}, transferSnapshot("c1", 1),
	} {
		mustCreate(t, d, vol)
	}
	want := map[VolumeType]string{
		VolumeImage:      `[image volume "img1"]`,
		VolumeContainer:  `[container volume "c1" container volume "c2"]`,
		VolumeSnapshot:   `[snapshot volume "c1/s1" snapshot volume "c2/s1"]`,
		VolumeCheckpoint: `[checkpoint volume "c1/s1"]`,
		VolumeVMImage:    `[vm-image volume "img1"]`,
	}
	for typ, w := range want {
		got, err := d.ListVolumes(ctx, typ)
		if err != nil {
			t.Fatalf("ListVolumes(%s): %v", typ, err)
		}
		if fmt.Sprint(got) != w {
			t.Errorf("ListVolumes(%s) = %v, want %s", typ, got, w)
		}
	}
	must(t, d.DeleteVolume(ctx, ct1))
	if got, err := d.ListVolumes(ctx, VolumeContainer); err != nil || fmt.Sprint(got) != `[container volume "c2"]` {
		t.Errorf("after a delete: ListVolumes = %v, %v", got, err)
	}
	if _, err := d.ListVolumes(ctx, "bogus"); !errors.Is(err, ErrInvalidVolume) {
		t.Errorf("ListVolumes of an unknown type: %v, want ErrInvalidVolume", err)
	}
}

// testPoolPrivate: the pool root and the directories holding volumes are
// root's alone (0700), even where an older version left them 0711.
func testPoolPrivate(t *testing.T, d Driver) {
	root := filepath.Dir(filepath.Dir(d.Path(ct1)))
	check := func(when string) {
		t.Helper()
		for _, dir := range []string{root, filepath.Dir(d.Path(ct1)), filepath.Dir(d.Path(img1)), filepath.Dir(filepath.Dir(d.Path(snap)))} {
			fi, err := os.Stat(dir)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Perm() != 0o700 {
				t.Errorf("%s: %s has mode %o, want 0700", when, dir, fi.Mode().Perm())
			}
		}
	}
	check("after Mount")
	must(t, os.Chmod(root, 0o711))
	must(t, os.Chmod(filepath.Dir(d.Path(ct1)), 0o755))
	must(t, d.Mount(t.Context()))
	check("after a second Mount")
}
